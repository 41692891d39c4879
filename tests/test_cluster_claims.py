"""Claims on a Redis Cluster (docs/semantics.md, "Order"; docs/storage.md, "Claims on a
cluster"): a claim reads every slot's head, then claims the best, each round one pipeline per
master with every master's sent at once, so it costs one round when the topic is empty and
two when it finds messages, whatever the number of slots; and priority is strict across the
slots however they spread over the masters. A claim waits out a slot migrating between
masters and follows it to its new owner.

These tests run on the session's 3-master cluster only. They count what the servers ran
(``INFO commandstats`` per master, reset just before the claim) and what the client's
executor reports (rounds, and node pipelines among them).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from async_bridge import client_of_kind
from core_fixtures import clock_fixture  # noqa: F401
from helpers import ManualClock, wait_for

import rmq
from rmq.server.cluster import Cluster
from rmq.storage.keys import RegistryKeys, SlotKeys


@pytest.fixture
def client(cluster_url: str, client_kind: str, clock: ManualClock) -> Iterator[Any]:
    """A client of the empty cluster whose time and registry cache stand still, so that a
    claim sends nothing but its own calls (no ``TIME``, no registry reads)."""
    made = client_of_kind(client_kind)(cluster_url, clock=clock, registry_ttl=3600)
    yield made
    made.close()


def masters_of_slots(client: Any, topic: str, slots: int) -> dict[int, int]:
    """Topic slot -> the port of the master that holds it."""
    return {slot: client.redis.get_node_from_key(SlotKeys(topic, slot).seq).port
            for slot in range(slots)}


def registry_master(client: Any, topic: str) -> int:
    """The port of the master that holds the topic's registry entry and limit keys."""
    return client.redis.get_node_from_key(RegistryKeys(topic).limits).port


def reset_stats(cluster: Cluster) -> None:
    for master in cluster.masters():
        with master.client() as node:
            node.config_resetstat()


def script_calls(cluster: Cluster) -> dict[int, int]:
    """Master port -> scripts it ran since ``reset_stats`` (FCALL; EVALSHA and EVAL when the
    scripts serve)."""
    calls = {}
    for master in cluster.masters():
        with master.client() as node:
            stats = node.info("commandstats")
        calls[master.port] = sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0)
                                 for name in ("fcall", "evalsha", "eval"))
    return calls


def measured_claim(client: Any, cluster: Cluster, topic: str, **options: Any
                   ) -> tuple[list[rmq.Message], int, int, dict[int, int]]:
    """Claim once; returns the messages, the executor's rounds and node pipelines, and the
    scripts each master ran."""
    executor = client._execute
    rounds, pipelines = executor.round_trips, executor.pipelines
    reset_stats(cluster)
    messages = client.claim(topic, **options)
    return (messages, executor.round_trips - rounds, executor.pipelines - pipelines,
            script_calls(cluster))


def test_a_claim_on_an_empty_64_slot_topic_is_one_round_of_one_pipeline_per_master(
        client, cluster):
    client.create_topic("t", slots=64)
    client.claim("t")  # every master loads the library now, not during the measured claim
    held = Counter(masters_of_slots(client, "t", 64).values())
    assert len(held) == 3

    messages, rounds, pipelines, calls = measured_claim(client, cluster, "t", count=100)

    assert messages == []
    assert (rounds, pipelines) == (1, 3)  # was 64 round trips, one slot after another
    # one head read per slot, on the master that holds it; and with them, on the registry's
    # master, the read of the group's limits (docs/limits.md)
    registry = registry_master(client, "t")
    assert calls == {port: n + (port == registry) for port, n in held.items()}


def test_a_claim_that_finds_one_message_adds_one_pipeline_to_its_master_only(client, cluster):
    client.create_topic("t", slots=64)
    client.send("t", b"only")
    for _ in range(2):  # loads the library wherever the claim runs
        client.release(client.claim("t"))
    slot = client.send("t", b"only").slot
    held = Counter(masters_of_slots(client, "t", 64).values())

    messages, rounds, pipelines, calls = measured_claim(client, cluster, "t", count=100)

    assert [m.body for m in messages] == [b"only"]
    assert (rounds, pipelines) == (2, 4)
    owner = masters_of_slots(client, "t", 64)[slot]
    registry = registry_master(client, "t")
    assert calls == {port: n + (port == owner) + (port == registry)
                     for port, n in held.items()}


@pytest.mark.parametrize(("limits", "expected"), [
    ({"max_in_flight": 100}, 3),  # heads and reserve; claim; settle (the permits)
    ({"rate": (100, 60)}, 2),  # took every unit granted: nothing to settle
])
def test_a_limited_claim_reserves_its_units_in_the_heads_round(client, cluster, limits,
                                                               expected):
    client.create_topic("t", slots=16)
    client.set_limits("t", **limits)
    client.send_many("t", [f"m{i}" for i in range(40)])
    client.ack(client.claim("t", count=5))  # loads the library wherever the claim runs

    messages, rounds, _, _ = measured_claim(client, cluster, "t", count=10)

    assert len(messages) == 10
    assert rounds == expected  # one round fewer than reserve; heads; claim; settle


def test_priority_is_strict_across_slots_held_by_different_masters(client):
    client.create_topic("t", slots=16)
    rng = random.Random(11)
    sent = {f"m{i}".encode(): rng.randint(0, 255) for i in range(200)}
    client.send_many("t", [{"body": b, "priority": p} for b, p in sent.items()])
    owners = masters_of_slots(client, "t", 16)
    by_master: dict[int, set[int]] = {}
    for body, priority in sent.items():
        slot = client.send("t", body, priority=priority).slot
        by_master.setdefault(owners[slot], set()).add(priority)
    assert len(by_master) == 3  # every master holds a share of every range of priorities

    taken: list[rmq.Message] = []
    batch: list[rmq.Message] = []
    while batch := client.claim("t", count=rng.choice([1, 5, 17, 40]), ack=batch):
        assert [m.priority for m in batch] == sorted((m.priority for m in batch), reverse=True)
        taken += batch
    assert [m.priority for m in taken] == sorted(sent.values(), reverse=True)


def test_within_a_priority_each_claim_starts_with_the_oldest_message_of_any_slot(
        client, clock):
    client.create_topic("t", slots=8)
    bodies = [f"m{i}".encode() for i in range(40)]
    for body in bodies:
        client.send("t", body)
        clock.advance(1)
    left = list(bodies)
    batch: list[rmq.Message] = []
    while batch := client.claim("t", count=6, ack=batch):
        assert batch[0].body == left[0]  # then that slot's run, in send order
        for message in batch:
            left.remove(message.body)
    assert left == []


def test_a_slot_holding_most_of_the_best_messages_fills_the_claim_in_three_rounds(
        client, cluster):
    client.create_topic("t", slots=8)
    client.send_many("t", [{"body": f"best-{p}", "priority": p, "slot_basis": "crowded"}
                           for p in range(255, 205, -1)])
    client.send_many("t", [{"body": f"plain-{i}", "priority": 100} for i in range(200)])

    messages, rounds, _, _ = measured_claim(client, cluster, "t", count=60)

    assert [m.priority for m in messages] == [*range(255, 205, -1), *[100] * 10]
    assert rounds <= 4  # one slot's 50 bands are read deeper once; not one round per band


def served_by(cluster: Cluster, slot: int) -> Any:
    """The master that serves hash ``slot``."""
    with cluster.masters()[0].client() as node:
        ranges = node.execute_command("CLUSTER", "SLOTS")
    port = next(served[1] for start, end, served, *_ in ranges if start <= slot <= end)
    return next(master for master in cluster.masters() if master.port == port)


def node_id(master: Any) -> str:
    with master.client() as node:
        return node.execute_command("CLUSTER", "MYID").decode()


def migrate(slot: int, source: Any, target: Any) -> None:
    """Start moving hash ``slot`` from ``source`` to ``target`` and move all its keys: until
    ``hand_over`` the source answers ASK for them, and the target TRYAGAIN for a command
    over several keys of the slot of which some do not exist."""
    with source.client() as src, target.client() as dst:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)


def hand_over(cluster: Cluster, slot: int, owner: Any) -> None:
    """Give hash ``slot`` to ``owner`` on every master (MOVED for stale clients)."""
    for master in [owner, *(m for m in cluster.masters() if m.port != owner.port)]:
        with master.client() as node:
            node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", node_id(owner))
    cluster.wait_ok()


def errors_answered(master: Any, code: str) -> int:
    with master.client() as node:
        return int(node.info("errorstats").get(f"errorstat_{code}", {}).get("count", 0))


def test_a_claim_waits_out_a_slot_migration_and_follows_the_slot_to_its_new_master(
        client, cluster, cluster_url, client_kind, clock):
    client.create_topic("t", slots=1)
    client.send_many("t", [{"body": f"m{i}", "priority": i} for i in range(6)])
    stale = client_of_kind(client_kind)(cluster_url, clock=clock)  # its map: before the move
    hash_slot = redis.crc.key_slot(SlotKeys("t", 0).seq.encode())
    source = served_by(cluster, hash_slot)
    target = next(m for m in cluster.masters() if m.port != source.port)
    try:
        refused = errors_answered(target, "TRYAGAIN")
        migrate(hash_slot, source, target)
        with ThreadPoolExecutor(1) as pool:
            # The source sends the claim on (ASK); the target refuses a script over keys of a
            # slot still migrating (TRYAGAIN) until the slot is its own: the claim retries.
            claim = pool.submit(client.claim, "t", count=2)
            wait_for(lambda: errors_answered(target, "TRYAGAIN") > refused,
                     what="the target to refuse the claim while the slot migrates")
            hand_over(cluster, hash_slot, target)
            assert [m.body for m in claim.result(timeout=30)] == [b"m5", b"m4"]
        assert [m.body for m in stale.claim("t", count=2)] == [b"m3", b"m2"]  # after MOVED
    finally:  # the session's cluster serves the other tests: give the slot back
        stale.close()
        if served_by(cluster, hash_slot).port != target.port:
            hand_over(cluster, hash_slot, target)
        migrate(hash_slot, target, source)
        hand_over(cluster, hash_slot, source)
    assert [m.body for m in client.claim("t", count=5)] == [b"m1", b"m0"]
