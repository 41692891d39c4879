"""ACL users (docs/reliability.md, "Security"): a user with exactly the commands, keys and
channels RMQ needs can do everything RMQ does, without INFO or CONFIG; a one-topic tenant
works in its topic and is refused anywhere else, with nothing written there, runs no code
of its own (no EVAL, SCRIPT or FUNCTION) and writes no registry key the administrator's
views read. Users are made on the test's Redis (every node of the cluster) and removed
after; the recipe's rules and the administrator's commands are read from the docs page."""

from __future__ import annotations

import logging
import os
import re
import secrets
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from async_bridge import client_of_kind
from helpers import wait_for

import rmq
from rmq.client.connect import connect
from rmq.errors import AccessDenied
from rmq.storage.scripts import script

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


def test_the_documented_acls_grant_unlink_and_not_del() -> None:
    """DEL frees a big key while every other client waits (a 2 M member zset: about half a
    second); UNLINK frees it in the background. RMQ deletes with UNLINK only, so no user
    needs DEL, and a tenant cannot stall the server by deleting a big key of its own."""
    for name in ("rmq", "tenant"):
        rules = documented_acl(name).split()
        assert "+unlink" in rules and "+del" not in rules, name
        assert not [rule for rule in rules if rule.lower().startswith("+del")], name


def test_rmqs_code_deletes_keys_with_unlink_only() -> None:
    """Every command of RMQ's scripts and operations is one the documented rules grant, so
    none may be DEL (the operations that delete keys are run under the rules below)."""
    source = Path(rmq.__file__).parent
    found = [f"{path.relative_to(source)}: {line.strip()}"
             for path in [*source.glob("storage/**/*.lua"), *source.glob("storage/*.py"),
                          *source.glob("client/*.py"), *source.glob("runtime/*.py")]
             for line in path.read_text().splitlines()
             if re.search(r"""(rcall|command)\(\s*["']DEL["']""", line)]
    assert found == []


def commands_of_rmqs_code() -> set[str]:
    """Every Redis command RMQ's scripts and operations name, lower case."""
    source = Path(rmq.__file__).parent
    named = re.compile(r"""(?:rcall|bulk|command)\(\s*["']([A-Z]+)["']""")
    found = {name.lower()
             for path in [*source.glob("storage/**/*.lua"), *source.glob("storage/*.py"),
                          *source.glob("client/*.py"), *source.glob("runtime/*.py")]
             for name in named.findall(path.read_text())}
    return found | {"blpop"}  # a wait for capacity: redis-py's blpop()


def test_the_documented_acl_grants_every_command_of_rmqs_code() -> None:
    granted = {rule[1:].partition("|")[0] for rule in documented_acl("rmq").split()
               if rule.startswith("+")}
    granted |= {rule[1:].partition("|")[0] for rule in documented_acl("cluster").split()}
    # WAIT and WAITAOF: granted for replicated writes only (this page, "Replicated writes")
    assert commands_of_rmqs_code() - granted - {"wait", "waitaof"} == set()


def test_operations_that_delete_keys_run_under_the_documented_acl(add_user, client_kind):
    url = add_user(documented_acl("rmq"))
    client = client_of_kind(client_kind)(url)
    try:
        client.create_topic("jobs", retry_backoff=0, max_retries=0, trace=True)
        client.pause("jobs")  # resuming deletes the paused flag
        client.resume("jobs")
        assert not client.topic("jobs", fresh=True).paused
        with client.transaction("jobs") as tx:  # a closed transaction's halves are deleted
            tx.send(b"committed")
        rolled_back = client.transaction("jobs")
        rolled_back.send(b"rolled back")
        rolled_back.rollback()
        (message,) = client.claim("jobs", count=5, wait=1)
        assert message.body == b"committed"
        assert client.nack(message, "boom") == "dead"
        assert client.purge_dead("jobs") == 1  # traced: deleted by a script
        client.set_limits("jobs", max_in_flight=1)  # its claims and acks trim and wake
        client.send_many("jobs", [b"limited-1", b"limited-2"])
        (held,) = client.claim("jobs", count=2, wait=1)
        assert client.claim("jobs", count=2) == []
        assert client.ack([held]) == 1
        assert len(client.claim("jobs", count=2, wait=1)) == 1
        client.set_limits("jobs", max_in_flight=None)
        assert client.record_history("jobs")  # samples are written in place (SETRANGE)
        client.create_topic("wide", slots=32)  # claims build the heads index afresh
        client.send_many("wide", [f"m{i}".encode() for i in range(40)])
        assert len(client.claim("wide", count=40, wait=1)) == 40
        client.delete_topic("wide")
        client.delete_topic("jobs")
        assert client.topics() == []
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


def test_a_batch_consumer_of_the_documented_acl_is_woken_by_the_keys_it_tracks(add_user):
    url = add_user(documented_acl("rmq"))
    batches: list[int] = []
    with rmq.Client(url) as client:
        client.create_topic("jobs", slots=1)
        client.send("jobs", b"first")
        consumer = rmq.Consumer(client, "jobs", lambda ms: batches.append(len(ms)), batch=2,
                                batch_wait_ms=60_000, recover_interval=60).start()
        try:
            watch = client.ready_watch("jobs")
            watch.look(2)
            client.send("jobs", b"second")  # its slot has a ready message: no wake-up sent
            wait_for(lambda: batches == [2], what="the full batch handled, woken by Redis")
            assert watch._tracked  # tracking, not the fallback
            watch.close()
        finally:
            consumer.stop()


def documented_commands(name: str, topic: str) -> list[str]:
    """The commands of the ACL block ``name`` of docs/reliability.md, one a line, for
    ``topic``."""
    block = re.search(rf"<!-- acl: {name} -->\s*```\s*\n(.*?)```", DOCS.read_text(), re.S)
    assert block, f"docs/reliability.md has no block {name!r}"
    return [line.strip().replace("TOPIC", topic) for line in block.group(1).splitlines()
            if line.strip()]


def as_administrator(url: str, topic: str) -> None:
    """Run the administrator's part of the tenant recipe (docs/reliability.md), as written,
    with the ``rmq`` command line of this environment."""
    env = {**os.environ, "RMQ_REDIS_URL": url,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    for line in documented_commands("tenant-admin", topic):
        done = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"


def on_every_node(url: str, *command: str) -> None:
    """``command`` as the test's own (unrestricted) user, on every node."""
    every = connect(url)
    nodes = ([every.get_redis_connection(n) for n in every.get_nodes()]
             if hasattr(every, "get_nodes") else [every])
    for node in nodes:
        node.execute_command(*command)
    every.close()


class Tenancy:
    """Two topics, ``orders`` and ``billing``, prepared by an administrator (a user with the
    documented ``rmq`` rules; ``orders`` by the documented commands), and the URL of the
    user with the documented tenant rules for ``orders``."""

    def __init__(self, add_user: Callable[[str], str], redis_url: str):
        on_every_node(redis_url, "FUNCTION", "FLUSH")  # only the administrator's steps load it
        self.admin_url = add_user(documented_acl("rmq"))
        as_administrator(self.admin_url, "orders")
        self.admin = rmq.Client(self.admin_url)
        self.admin.create_topic("billing")
        self.admin.send("billing", b"invoice-1")
        self.url = add_user(documented_acl("tenant").replace("TOPIC", "orders"))

    def tenant_redis(self) -> redis.Redis:
        """A plain connection of the tenant to one node (ACL is checked before a cluster
        node redirects)."""
        return redis.Redis.from_url(self.url)


@pytest.fixture
def tenancy(add_user, redis_url) -> Iterator[Tenancy]:
    made = Tenancy(add_user, redis_url)
    yield made
    made.admin.close()


def test_a_one_topic_tenant_works_in_its_topic_and_nowhere_else(tenancy, client_kind):
    tenant = client_of_kind(client_kind)(tenancy.url)
    try:
        tenant.send("orders", b"order-1")
        (message,) = tenant.claim("orders", wait=1)
        assert tenant.ack(message) == 1
        tenant.send("orders", b"order-2")
        (held,) = tenant.claim("orders", wait=1)
        assert tenant.nack(held, "out of stock") == "retried"
        assert tenant.stats("orders").groups["default"].counters["acked"] == 1
        assert tenant.recover() == 0  # every topic it may reach; billing is skipped
        for trespass in (lambda: tenant.send("billing", b"x"),
                         lambda: tenant.claim("billing"),
                         lambda: tenant.stats("billing"),
                         lambda: tenant.dead_letters("billing"),
                         lambda: tenant.create_topic("mine"),
                         lambda: tenant.alter_topic("orders", max_retries=1),
                         lambda: tenant.bind("orders", "audit"),
                         lambda: tenant.pause("orders")):
            with pytest.raises(AccessDenied):
                trespass()
    finally:
        tenant.close()
    assert [r.body for r in tenancy.admin.snapshot("billing")] == [b"invoice-1"]
    assert tenancy.admin.topics() == ["billing", "orders"]
    orders = tenancy.admin.topic("orders", fresh=True)
    assert orders.bound_groups == ("default",) and not orders.paused
    assert orders.settings.max_retries == 16


def test_a_consumer_runs_as_a_one_topic_tenant(tenancy, caplog):
    handled: list[bytes] = []
    caplog.set_level(logging.INFO, logger="rmq")
    with rmq.Client(tenancy.url) as tenant:
        consumer = rmq.Consumer(tenant, "orders", lambda m: handled.append(m.body),
                                heartbeat_interval=0.05, recover_interval=0.05).start()
        try:
            tenant.send("orders", b"wake up")  # the consumer is asleep on its wake-up channel
            wait_for(lambda: handled == [b"wake up"], what="the message handled")
            seen: set[int] = set()

            def heartbeats() -> int:
                seen.update(c.last_seen for c in tenancy.admin.consumers("orders"))
                return len(seen) >= 4  # its keeper went round (heartbeat, history, recover)

            wait_for(heartbeats, what="the tenant's keeper to go round")
        finally:
            consumer.stop()
    assert tenancy.admin.consumers("orders") == []  # it deregistered
    complaints = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert complaints == []
    # history samples are the console's to record: the keeper stops asking, saying so once
    told = [r for r in caplog.records if "records no history samples" in r.getMessage()]
    assert len(told) == 1


def test_a_batch_consumer_of_a_one_topic_tenant_waits_on_its_wake_channel_instead(
        tenancy, caplog):
    caplog.set_level(logging.INFO, logger="rmq")
    batches: list[int] = []
    with rmq.Client(tenancy.url) as tenant:
        consumer = rmq.Consumer(tenant, "orders", lambda ms: batches.append(len(ms)), batch=5,
                                batch_wait_ms=300).start()
        try:
            tenant.send_many("orders", [b"a", b"b"])
            wait_for(lambda: batches == [2], what="the batch taken once it waited 300 ms")
        finally:
            consumer.stop()
    told = [r for r in caplog.records if "wait on its wake channel" in r.getMessage()]
    assert len(told) == 1


# Each would run code of the tenant's choosing on the server (or remove RMQ's): a busy loop
# ("while true do end") stalls every user, and only SCRIPT KILL or FUNCTION KILL, refused to
# it, would stop it. (The code here is harmless, so a recipe that allows it fails the test
# instead of stalling the suite's Redis.)
OWN_CODE = [
    ("EVAL", "return 1", "0"),
    ("EVAL_RO", "return 1", "0"),
    ("EVALSHA", "a" * 40, "0"),
    ("EVALSHA_RO", "a" * 40, "0"),
    ("SCRIPT", "LOAD", "return 1"),
    ("SCRIPT", "KILL"),
    ("SCRIPT", "FLUSH"),
    ("FUNCTION", "LOAD", "#!lua name=mine\nredis.register_function('f', function() end)"),
    ("FUNCTION", "DELETE", script("enqueue").library.name),
    ("FUNCTION", "FLUSH"),
    ("FUNCTION", "KILL"),
    ("FUNCTION", "RESTORE", "x"),
]


def test_a_one_topic_tenant_runs_no_code_of_its_own(tenancy):
    with tenancy.tenant_redis() as raw:
        for command in OWN_CODE:
            with pytest.raises(redis.exceptions.NoPermissionError):
                raw.execute_command(*command)
    with rmq.Client(tenancy.url) as tenant:  # RMQ's library is still there, and serves it
        tenant.send("orders", b"order-1")
        assert [m.body for m in tenant.claim("orders", wait=1)] == [b"order-1"]


@pytest.mark.extras  # it also reads the console's overview (the console extra)
def test_a_one_topic_tenant_writes_no_registry_key_and_the_admins_views_hold(tenancy):
    registry = [f"rmq:{{orders}}:{name}"
                for name in ("settings", "generation", "groups", "unbound", "paused")]
    with tenancy.tenant_redis() as raw:
        assert raw.get(registry[0]) is not None  # it reads its settings
        for key in registry:
            for write in (("SET", key, "x"), ("HSET", key, "f", "v"), ("SADD", key, "x"),
                          ("DEL", key), ("UNLINK", key)):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    raw.execute_command(*write)
        with pytest.raises(redis.exceptions.NoPermissionError):
            raw.execute_command("SADD", "rmq:topics", "forged")
    admin = tenancy.admin
    assert admin.topics() == ["billing", "orders"]
    assert admin.topic("orders", fresh=True).settings == rmq.TopicSettings()
    assert admin.stats("orders").groups["default"].ready == 0
    assert admin.stats("billing").groups["default"].ready == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Starlette suggests a fork of httpx; httpx it is
        from starlette.testclient import TestClient
    from rmq.console import create_app  # the console extra: not in `./dev floors`
    with TestClient(create_app(admin, sample_interval=None),
                    base_url="http://127.0.0.1:8270") as console:
        overview = console.get("/api/overview")
    assert overview.status_code == 200
    assert [t["name"] for t in overview.json()["topics"]] == ["billing", "orders"]


def test_a_tenant_whose_library_is_missing_is_told_so_and_served_once_it_is_loaded(
        tenancy, redis_url, client_kind):
    tenant = client_of_kind(client_kind)(tenancy.url)
    try:
        tenant.send("orders", b"order-1")
        on_every_node(redis_url, "FUNCTION", "FLUSH")  # a server that lost it
        with pytest.raises(AccessDenied) as refused:
            tenant.send("orders", b"order-2")
        message = str(refused.value)
        assert script("enqueue").library.name in message and "FUNCTION LOAD" in message
        assert "rmq stats TOPIC" in message
        as_administrator(tenancy.admin_url, "orders")  # rmq stats loads it again
        tenant.send("orders", b"order-2")  # the same client, without a restart
        assert tenant.stats("orders").groups["default"].ready == 2
    finally:
        tenant.close()


def test_the_documented_acls_let_a_topic_be_traced(tenancy, client_kind):
    """The trace's commands (its list, its trimming, its reader) are in both blocks: ACL
    checks a script's commands one by one."""
    tenancy.admin.alter_topic("orders", trace=True, trace_cap=1)  # trims every 64 elements
    for url in (tenancy.admin_url, tenancy.url):
        client = client_of_kind(client_kind)(url)
        try:
            sent = client.send("orders", b"order-1")
            client.send("orders", b"order-1")
            client.ack(client.claim("orders", wait=1))
            for i in range(40):  # past the cap by more than 64 elements: trimmed
                client.ack(client.claim("orders", wait=1) or [])
                client.send("orders", f"filler-{i}".encode())
            client.send("orders", b"order-2")
            assert [e.event for e in client.trace("orders", body=b"order-2")] == ["sent"]
            client.send("orders", b"order-2")  # the cap keeps the newest event only
            assert [e.event for e in client.trace("orders", body=b"order-2")] == ["merged"]
            assert client.trace("orders", sent.message_id) == []  # trimmed away
        finally:
            client.close()


def test_a_command_the_acl_refuses_inside_rmqs_code_is_access_denied(add_user, client_kind):
    rules = documented_acl("rmq").replace(" +rpush", "")  # the trace appends with RPUSH
    client = client_of_kind(client_kind)(add_user(rules))
    try:
        client.create_topic("jobs", trace=True)
        with pytest.raises(AccessDenied, match="(?s)docs/reliability.md.*can't run"):
            client.send("jobs", b"one")
        client.delete_topic("jobs")
    finally:
        client.close()


def test_a_tenant_without_the_stop_channel_still_claims_and_settles(tenancy, add_user,
                                                                    caplog):
    # an ACL written before supersede: no stop channel; the topic's groups do not supersede
    rules = documented_acl("tenant").replace("TOPIC", "orders").replace(
        " &rmq:stop:orders", "")
    tenant = rmq.Client(add_user(rules))
    try:
        tenant.send("orders", b"order-1")
        (message,) = tenant.claim("orders", wait=1)
        assert not message.superseded
        assert tenant.ack(message) == 1
    finally:
        tenant.close()
    assert "cannot be heard" in caplog.text
