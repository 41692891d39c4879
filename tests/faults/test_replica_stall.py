"""A replica that stalls (frozen with SIGSTOP, then thawed) under a client with ``replicas=1``:
what must not be lost (sends, acks, nacks) still waits and raises ``NotReplicated``, but what
is soft state (a claim's lease, a consumer's registration and heartbeats, lease extensions)
does not fail because of it, so no message is dead-lettered that no handler saw and a worker
can start (docs/reliability.md, "Replicated writes")."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

import rmq
from rmq.errors import NotReplicated
from rmq.server import RedisServer, wait_until
from tests.helpers import wait_for

pytestmark = pytest.mark.faults

TOPIC = "renders"


@pytest.fixture
def pair(fresh_server: Callable[..., RedisServer]) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and its linked replica, the topic (no retries) on both; the replica is
    thawed at teardown whatever the test left it in."""
    primary = fresh_server(extra={"repl-diskless-sync-delay": "0"})
    replica = fresh_server()
    with replica.client() as r:
        r.execute_command("REPLICAOF", "127.0.0.1", primary.port)
    wait_until(lambda: replica.info("replication").get("master_link_status") == "up", 30,
               "the replica linked to its primary")
    with rmq.Client(primary.url, replicas=1, replica_timeout=5) as client:
        client.create_topic(TOPIC, max_retries=0, visibility_timeout=2)
    yield primary, replica
    replica.resume()


def _group(client: rmq.Client) -> rmq.GroupStats:
    return client.stats(TOPIC).groups["default"]


def test_claims_during_a_replica_stall_are_handled_and_none_is_dead_lettered_unseen(pair):
    primary, replica = pair
    bodies = {f"product:{i}" for i in range(200)}
    handled: set[str] = set()
    lock = threading.Lock()

    def handle(message: rmq.Message) -> None:
        with lock:
            handled.add(message.text)

    with rmq.Client(primary.url) as plain, \
            rmq.Client(primary.url, replicas=1, replica_timeout=0.2) as client:
        consumer = rmq.Consumer(client, TOPIC, handle, concurrency=4, lease=1.0,
                                recover_interval=0.2, heartbeat_interval=0.2).start()
        try:
            replica.pause()
            plain.send_many(TOPIC, sorted(bodies))
            # claims (and leases running out, if claims are lost) while the replica is frozen
            wait_for(lambda: _group(plain).ready <= 150, 60, "claims during the stall")
            replica.resume()
            wait_for(lambda: (_group(plain).pending, _group(plain).in_flight) == (0, 0), 60,
                     "every message settled")
        finally:
            consumer.stop(grace=5)
        group = _group(plain)
        dead = [(letter.body, letter.error) for letter in plain.dead_letters(TOPIC)]
    assert (group.dead, dead) == (0, [])
    assert handled == bodies


def test_a_claim_no_replica_acknowledges_returns_its_messages_and_costs_no_attempt(pair):
    primary, replica = pair
    with rmq.Client(primary.url) as plain:
        plain.send_many(TOPIC, ["a", "b", "c"])
    replica.pause()
    with rmq.Client(primary.url, replicas=1, replica_timeout=0.2) as client:
        claimed = client.claim(TOPIC, count=3, lease=60)
        assert sorted(m.text for m in claimed) == ["a", "b", "c"]
        assert all(m.attempts == 1 for m in claimed)
        with pytest.raises(NotReplicated, match="the ack to 'renders'"):
            client.ack(claimed)  # what must not be lost still waits, and says so
        assert _group(client).in_flight == 0  # acknowledged on the primary all the same


def test_a_claim_whose_ack_no_replica_acknowledges_raises_and_gives_back_what_it_took(pair):
    primary, replica = pair
    with rmq.Client(primary.url) as plain:
        plain.send_many(TOPIC, ["a", "b", "c"])
        held = plain.claim(TOPIC, count=1, lease=60)
    replica.pause()
    with rmq.Client(primary.url, replicas=1, replica_timeout=0.2) as client:
        with pytest.raises(NotReplicated, match="the ack to 'renders'"):
            client.claim(TOPIC, count=2, ack=held)
        group = _group(client)
        # nothing left in flight that the caller never received, to run out unseen
        assert (group.ready, group.in_flight, group.counters["acked"]) == (2, 0, 1)
    replica.resume()
    with rmq.Client(primary.url) as plain:
        assert [m.attempts for m in plain.claim(TOPIC, count=2)] == [1, 1]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_async_client_gives_back_a_claim_whose_ack_falls_short_too(pair,
                                                                             anyio_backend):
    primary, replica = pair
    with rmq.Client(primary.url) as plain:
        plain.send_many(TOPIC, ["a", "b", "c"])
        held = plain.claim(TOPIC, count=1, lease=60)
    replica.pause()
    async with rmq.AsyncClient(primary.url, replicas=1, replica_timeout=0.2) as client:
        claimed = await client.claim_due(TOPIC, count=1)
        assert len(claimed.messages) == 1  # a claim alone returns what it took
        with pytest.raises(NotReplicated, match="the ack to 'renders'"):
            await client.claim_due(TOPIC, count=1, ack=held)
    with rmq.Client(primary.url) as plain:
        group = _group(plain)
        assert (group.ready, group.in_flight, group.counters["acked"]) == (1, 1, 1)


def test_a_consumer_starts_registers_and_handles_during_a_replica_stall(pair):
    primary, replica = pair
    handled = threading.Event()
    replica.pause()
    with rmq.Client(primary.url, replicas=1, replica_timeout=0.2) as client, \
            rmq.Client(primary.url) as plain:
        consumer = rmq.Consumer(client, TOPIC, lambda message: handled.set(), group="audit",
                                heartbeat_interval=0.2, name="stalled-start").start()
        try:
            assert [c.id for c in plain.consumers(TOPIC)] == ["stalled-start"]
            plain.send(TOPIC, "product:42")
            assert handled.wait(30)
        finally:
            consumer.stop(grace=5)
