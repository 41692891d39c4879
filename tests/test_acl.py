"""ACL users (docs/reliability.md, "Security"): a user with exactly the commands, keys and
channels RMQ needs can do everything RMQ does, without INFO or CONFIG; a one-topic tenant
works in its topic and is refused anywhere else, with nothing written there. Users are made
on the test's Redis (every node of the cluster) and removed after."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from async_bridge import client_of_kind
from helpers import wait_for

import rmq
from rmq.client.connect import connect
from rmq.errors import AccessDenied

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reliability.md"


def documented_acl(name: str) -> str:
    """The ACL rules docs/reliability.md gives under ``name`` (a fenced block after it)."""
    text = DOCS.read_text()
    found = re.search(rf"<!-- acl: {name} -->\s*```\s*\n(.*?)```", text, re.S)
    assert found, f"docs/reliability.md has no ACL block {name!r}"
    return " ".join(found.group(1).split())


@pytest.fixture
def add_user(redis_url: str) -> Iterator[Callable[[str], str]]:
    """Make an ACL user with the given documented rules (and the cluster's, on a cluster) on
    every node; returns a URL naming it."""
    admin = connect(redis_url)
    cluster = hasattr(admin, "get_nodes")
    nodes = [admin.get_redis_connection(n) for n in admin.get_nodes()] if cluster else [admin]
    made: list[str] = []

    def add(rules: str) -> str:
        if cluster:
            rules += " " + documented_acl("cluster")
        name, password = f"rmq-{secrets.token_hex(4)}", secrets.token_hex(8)
        for node in nodes:
            node.execute_command("ACL", "SETUSER", name, "reset", "on", f">{password}",
                                 *rules.split())
        made.append(name)
        return redis_url.replace("://", f"://{name}:{password}@", 1)

    yield add
    for node in nodes:
        for name in made:
            node.execute_command("ACL", "DELUSER", name)
    admin.close()


def test_a_user_with_only_the_documented_acl_can_do_everything(add_user, client_kind):
    url = add_user(documented_acl("rmq"))
    client = client_of_kind(client_kind)(url)
    try:
        client.create_topic("jobs", retry_backoff=0, max_retries=0)
        client.bind("jobs", "workers")
        client.alter_topic("jobs", visibility_timeout=10)
        assert client.topics() == ["jobs"]
        client.send("jobs", b"one")
        client.send_many("jobs", [b"two", {"body": b"three", "delay_ms": 1}])
        first = client.claim("jobs", "workers", count=1)
        assert client.extend(first, 5) == [True]
        assert client.release(first) == 1
        wait_for(lambda: client.stats("jobs").groups["workers"].ready == 3, what="all ready")
        batch = client.claim("jobs", "workers", count=3, wait=1)
        assert client.ack(batch[:2]) == 2
        assert client.nack(batch[2], "boom") == "dead"
        (letter,) = client.dead_letters("jobs", "workers")
        assert client.requeue_dead("jobs", "workers", [letter.id]) == 1
        client.claim("jobs", "workers", lease=0.01)
        wait_for(lambda: client.recover() == 1, what="the lease to run out")
        assert client.purge_dead("jobs", "workers") == 1  # max_retries=0: it died
        client.pause("jobs")
        client.resume("jobs")
        client.send("jobs", b"four")
        assert [r.state for r in client.snapshot("jobs", groups=["workers"])] == ["ready"]
        assert client.consumers("jobs") == []
        client.delete_topic("jobs")
    finally:
        client.close()


def test_a_consumer_runs_as_a_user_with_only_the_documented_acl(add_user):
    url = add_user(documented_acl("rmq"))
    handled: list[bytes] = []
    with rmq.Client(url) as client:
        client.create_topic("jobs")
        consumer = rmq.Consumer(client, "jobs", lambda m: handled.append(m.body)).start()
        try:
            client.send("jobs", b"wake up")  # the consumer is asleep on its wake-up channel
            wait_for(lambda: handled == [b"wake up"], what="the message handled")
            wait_for(lambda: client.consumers("jobs"), what="the consumer's heartbeat")
        finally:
            consumer.stop()


def test_a_one_topic_tenant_works_in_its_topic_and_nowhere_else(add_user, redis_url):
    with rmq.Client(redis_url) as admin:
        admin.create_topic("orders")
        admin.create_topic("billing")
        url = add_user(documented_acl("tenant").replace("TOPIC", "orders"))
        with rmq.Client(url) as tenant:
            tenant.send("orders", b"order-1")
            (message,) = tenant.claim("orders", wait=1)
            assert tenant.ack(message) == 1
            assert tenant.stats("orders").groups["default"].counters["acked"] == 1
            assert tenant.recover() == 0  # every topic it may reach; billing is skipped
            for trespass in (lambda: tenant.send("billing", b"x"),
                             lambda: tenant.claim("billing"),
                             lambda: tenant.stats("billing"),
                             lambda: tenant.create_topic("mine")):
                with pytest.raises(AccessDenied):
                    trespass()
        assert list(admin.snapshot("billing")) == []
        assert admin.topics() == ["billing", "orders"]
