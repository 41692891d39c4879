"""Two-phase consumption (SPEC §3): a claim holds a message under a lease; ack removes it; an
expired lease is recovered to pending and counts an attempt; extend keeps a lease alive;
release gives a delivery back without counting it."""

from __future__ import annotations

import threading
import time

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows, states
from hypothesis import example, given
from hypothesis import strategies as st

from rmq.storage import settle
from rmq.storage.codec import run_leases
from rmq.storage.keys import SlotKeys

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def test_claimed_message_is_invisible_to_other_claims_while_leased(client, make_client, clock):
    client.create_topic("t")
    client.send("t", b"job")
    (message,) = client.claim("t")
    other = make_client(clock=clock)
    assert other.claim("t") == []
    assert states(client, "t")["in_flight"] == [b"job"]
    assert message.attempts == 1


def test_ack_removes_the_message_for_good(client, clock):
    client.create_topic("t", visibility_timeout=1)
    client.send("t", b"job")
    assert client.ack(client.claim("t")) == 1
    clock.advance(5000)
    assert client.recover("t") == 0
    assert client.claim("t") == []
    assert rows(client, "t") == []


@pytest.mark.both_deployments
def test_claim_can_acknowledge_the_previous_batch_in_the_same_round_trip(client, clock):
    client.create_topic("t", slots=4)
    client.send_many("t", [f"job-{i}".encode() for i in range(7)])
    first = client.claim("t", count=3)
    second = client.claim("t", count=3, ack=first)
    assert {m.body for m in first}.isdisjoint({m.body for m in second})
    assert states(client, "t")["in_flight"] == sorted(m.body for m in second)
    third = client.claim("t", count=3, ack=second)
    assert len(third) == 1
    assert client.claim("t", count=3, ack=third) == []
    assert rows(client, "t") == []
    assert client.stats("t").groups["default"].counters["acked"] == 7


def test_a_claim_acks_even_when_the_topic_is_paused_and_late_acks_change_nothing(client,
                                                                                 clock):
    client.create_topic("t", visibility_timeout=1, retry_backoff=0)
    client.send_many("t", [b"a", b"b"])
    late, kept = client.claim("t", count=2)
    clock.advance(1000)
    client.recover("t")  # both leases ran out: both are pending again
    (again,) = client.claim("t", count=1)
    client.pause("t")
    assert client.claim("t", ack=[late, kept, again]) == []
    assert client.stats("t").groups["default"].counters["acked"] == 1  # only the live one
    assert [r.state for r in rows(client, "t")] == ["ready"]


def test_default_lease_is_the_topics_visibility_timeout(client, clock):
    client.create_topic("t", visibility_timeout=12)
    client.send("t", b"job")
    (message,) = client.claim("t")
    (row,) = rows(client, "t")
    assert row.lease_until == clock() + 12_000
    assert message.lease_until == clock() + 12_000


def test_claim_lease_argument_overrides_the_visibility_timeout(client, clock):
    client.create_topic("t", visibility_timeout=12)
    client.send("t", b"job")
    client.claim("t", lease=2.5)
    (row,) = rows(client, "t")
    assert row.lease_until == clock() + 2500


def test_expired_lease_is_recovered_to_pending_and_counts_an_attempt(client, clock):
    client.create_topic("t", visibility_timeout=5, retry_backoff=0)
    client.send("t", b"job")
    client.claim("t")
    clock.advance(4999)
    assert client.recover("t") == 0
    clock.advance(1)
    assert client.recover("t") == 1
    (row,) = rows(client, "t")
    assert (row.state, row.attempts) == ("ready", 1)
    (again,) = client.claim("t")
    assert (again.body, again.attempts) == (b"job", 2)
    assert client.stats("t").groups["default"].counters["retried"] == 1


def test_recovered_lease_waits_for_the_retry_backoff(client, clock):
    client.create_topic("t", visibility_timeout=1, retry_backoff=2)
    client.send("t", b"job")
    client.claim("t")
    clock.advance(1000)
    client.recover("t")
    (row,) = rows(client, "t")
    assert (row.state, row.due_at) == ("delayed", clock() + 2000)


def test_lease_expiry_on_the_last_attempt_dead_letters_with_lease_expired(client, clock):
    client.create_topic("t", visibility_timeout=1, max_retries=0)
    client.send("t", b"job")
    client.claim("t")
    clock.advance(1000)
    assert client.recover("t") == 1
    (dead,) = client.dead_letters("t")
    assert (dead.body, dead.attempts, dead.error) == (b"job", 1, "lease expired")


@pytest.mark.both_deployments
def test_recover_without_a_topic_recovers_every_topic(client, clock):
    for name in ("a", "b"):
        client.create_topic(name, visibility_timeout=1)
        client.send(name, b"job")
        client.claim(name)
    clock.advance(1000)
    assert client.recover() == 2
    assert states(client, "a")["in_flight"] == states(client, "b")["in_flight"] == []


def test_late_ack_after_recovery_changes_nothing(client, clock):
    client.create_topic("t", visibility_timeout=1, retry_backoff=0)
    client.send("t", b"job")
    (stale,) = client.claim("t")
    clock.advance(1000)
    client.recover("t")
    assert client.ack(stale) == 0
    assert client.nack(stale, "too late") is None
    (fresh,) = client.claim("t")
    assert (fresh.body, fresh.attempts) == (b"job", 2)
    assert client.stats("t").groups["default"].counters["acked"] == 0


def test_late_ack_does_not_remove_the_redelivery(client, clock):
    client.create_topic("t", visibility_timeout=1, retry_backoff=0)
    client.send("t", b"job")
    (stale,) = client.claim("t")
    clock.advance(1000)
    client.recover("t")
    (fresh,) = client.claim("t")
    assert client.ack(stale) == 0
    assert states(client, "t")["in_flight"] == [b"job"]
    assert client.ack(fresh) == 1


def test_extend_keeps_a_lease_alive(client, clock):
    client.create_topic("t", visibility_timeout=5)
    client.send("t", b"job")
    (message,) = client.claim("t")
    clock.advance(4000)
    assert client.extend(message, 5) == [True]
    clock.advance(4000)
    assert client.recover("t") == 0
    clock.advance(1000)
    assert client.recover("t") == 1
    assert client.extend(message, 5) == [False]


@pytest.mark.both_deployments
def test_extend_of_many_deliveries_reports_each(client, clock):
    client.create_topic("t", slots=4, visibility_timeout=1)
    client.send_many("t", [f"m{i}" for i in range(6)])
    held = client.claim("t", count=6)
    client.ack(held[:2])
    assert client.extend(held, 10) == [False, False, True, True, True, True]
    assert {r.lease_until for r in rows(client, "t")} == {clock() + 10_000}


def test_extending_one_delivery_of_a_claim_leaves_the_others_lease_as_it_was(client, clock):
    # a claim's share of a slot has one lease; an extension gives a delivery one of its own
    client.create_topic("t", slots=1, visibility_timeout=5, retry_backoff=0)
    client.send_many("t", [b"a", b"b", b"c"])
    a, b, c = client.claim("t", count=3)
    clock.advance(4000)
    assert client.extend(b, 5) == [True]
    assert {r.body: r.lease_until for r in rows(client, "t")} == {
        b"a": clock() + 1000, b"b": clock() + 5000, b"c": clock() + 1000}
    clock.advance(1000)
    assert client.recover("t") == 2
    assert states(client, "t")["in_flight"] == [b"b"]
    assert client.ack([a, b, c]) == 1
    clock.advance(5000)
    assert client.recover("t") == 0
    assert [m.body for m in client.claim("t", count=3)] == [b"a", b"c"]


def test_an_extended_delivery_is_recovered_when_its_own_lease_ends(client, clock):
    client.create_topic("t", slots=1, visibility_timeout=5, retry_backoff=0)
    client.send_many("t", [b"a", b"b"])
    a, b = client.claim("t", count=2)
    assert client.extend(b, 1) == [True]  # shorter than its claim's lease
    clock.advance(1000)
    assert client.recover("t") == 1
    assert states(client, "t") == {"ready": [b"b"], "delayed": [], "in_flight": [b"a"],
                                   "dead": []}
    clock.advance(4000)
    assert client.recover("t") == 1
    assert client.ack([a, b]) == 0


@pytest.mark.both_deployments
def test_an_ack_of_a_whole_claim_drops_its_lease_at_once(client, make_client):
    client.create_topic("t", slots=1)
    client.send_many("t", [b"a", b"b", b"c"])
    held = client.claim("t", count=3)
    leases = make_client(kind="sync").redis
    key = SlotKeys("t", 0).group("default").leases
    assert leases.zcard(key) == 1  # one lease for the claim's share of the slot
    assert client.ack(held[::-1]) == 3  # in any order
    assert leases.zcard(key) == 0


def test_an_ack_naming_a_delivery_twice_still_drops_its_whole_claims_lease(client,
                                                                          make_client):
    client.create_topic("t", slots=1)
    client.send_many("t", [b"a", b"b", b"c"])
    a, b, c = client.claim("t", count=3)
    leases = make_client(kind="sync").redis
    key = SlotKeys("t", 0).group("default").leases
    assert client.ack([a, b, b, c]) == 3
    assert leases.zcard(key) == 0  # not left for recover to find expired


@given(st.lists(st.integers(min_value=0, max_value=60), max_size=40))
@example([30, 31, 31, 32])  # a repeated id split the share 30:32 into 30:31 and 31:32
def test_the_runs_an_ack_names_are_exactly_the_runs_of_consecutive_ids_it_settles(seqs):
    # an ack drops the lease of every run it names, so a run must never take in an id the
    # ack does not settle (its delivery would be left in flight under no lease), and a
    # share acknowledged whole must be named whole (its lease dropped now, not left to
    # recover): whatever the order and repeats, every name is a run of settled ids, and
    # every maximal run of them is named
    ids = set(seqs)
    spans = []
    for run in run_leases(seqs):
        first, _, last = run.partition(":")
        spans.append((int(first), int(last or first)))
    assert all(set(range(first, last + 1)) <= ids for first, last in spans)
    maximal = [(first, last) for first in sorted(ids) if first - 1 not in ids
               for last in [next(n for n in range(first, first + 62) if n + 1 not in ids)]]
    assert set(maximal) <= set(spans)
    assert {n for first, last in spans for n in range(first, last + 1)} == ids


@pytest.mark.both_deployments
def test_an_ack_of_two_claims_and_part_of_a_third_drops_the_two_claims_leases(client,
                                                                             make_client):
    client.create_topic("t", slots=1)
    client.send_many("t", [f"m{i}" for i in range(9)])
    first, second, third = (client.claim("t", count=3) for _ in range(3))
    leases = make_client(kind="sync").redis
    key = SlotKeys("t", 0).group("default").leases
    assert leases.zcard(key) == 3
    assert client.ack([*second, *third[:1], *first]) == 7
    assert leases.zcard(key) == 1  # the third claim's: two of its deliveries are held


def test_a_lease_left_by_partial_acks_is_dropped_once_it_expires(client, make_client, clock):
    client.create_topic("t", slots=1, visibility_timeout=5)
    client.send_many("t", [b"a", b"b", b"c"])
    a, b, c = client.claim("t", count=3)
    client.extend(a, 5)
    assert client.ack([b]) == 1
    assert client.ack([a, c]) == 2  # not one run: the claim's lease stays
    leases = make_client(kind="sync").redis
    key = SlotKeys("t", 0).group("default").leases
    assert leases.zcard(key) == 1  # the claim's (a's own went with a)
    clock.advance(5000)
    assert client.recover("t") == 0
    assert leases.zcard(key) == 0


@pytest.mark.both_deployments
def test_recover_finds_the_deliveries_still_held_anywhere_in_a_claims_range(client, clock):
    # recover spells out a range's ids in hundreds (includes/leases.lua): cross two of them
    client.create_topic("t", slots=1, visibility_timeout=5, retry_backoff=0)
    client.send_many("t", [f"m{i}" for i in range(1, 251)])
    held = client.claim("t", count=250)
    first = held[0].seq
    assert [m.seq for m in held] == list(range(first, first + 250))
    # the ids at both sides of the first two hundreds the range crosses, its first and last
    hundred = first - first % 100 + 100
    kept = {0, hundred - first - 1, hundred - first, hundred - first + 100, 249}
    assert client.ack([m for j, m in enumerate(held) if j not in kept]) == 250 - len(kept)
    clock.advance(5000)
    assert client.recover("t") == len(kept)
    assert states(client, "t")["ready"] == sorted(f"m{j + 1}".encode() for j in kept)


def test_a_recover_call_takes_whole_leases_up_to_its_limit_of_deliveries(client, clock):
    limit = settle.RECOVER_LIMIT
    client.create_topic("t", slots=1, visibility_timeout=5, retry_backoff=0)
    share = limit * 3 // 5
    client.send_many("t", [f"m{i}" for i in range(3 * share)])
    client.claim("t", count=share)
    client.claim("t", count=share)
    clock.advance(5000)
    assert client.recover("t") == share  # two shares would be more than the limit
    assert client.recover("t") == share
    client.claim("t", count=3 * share)  # one lease over the limit: taken whole
    clock.advance(5000)
    assert client.recover("t") == 3 * share


def test_an_earlier_versions_recover_never_takes_this_versions_leases_for_expired(
        client, make_client, clock):
    # An earlier version kept a lease per id and read a score >= -(now * 1024 + 1023) as
    # expired: had it read a claim's lease so, it would have dropped the lease of a share.
    client.create_topic("t", slots=1, visibility_timeout=1)
    client.send_many("t", [b"a", b"b", b"c"])
    a, b, c = client.claim("t", count=3)
    client.extend(b, 1)
    far = clock() + 10**9
    raw = make_client(kind="sync").redis
    key = SlotKeys("t", 0).group("default").leases
    assert raw.zcard(key) == 2
    assert raw.zrangebyscore(key, -(far * 1024 + 1023), "+inf") == []
    clock.advance(1000)
    assert client.recover("t") == 3


def test_a_lease_an_earlier_version_wrote_is_still_read_and_recovered(client, make_client,
                                                                     clock):
    client.create_topic("t", slots=1, visibility_timeout=60)
    client.send("t", b"a")
    (a,) = client.claim("t")
    raw = make_client(kind="sync").redis
    key = SlotKeys("t", 0).group("default").leases
    raw.delete(key)  # as an earlier version wrote it: a lease per id, without the 2^52
    raw.zadd(key, {str(a.seq): -((clock() + 1000) * 1024 + a.seq % 1024)})
    (row,) = rows(client, "t")
    assert row.lease_until == clock() + 1000
    assert client.extend(a, 5) == [True]  # a lease of this version's now decides
    clock.advance(1000)
    assert client.recover("t") == 0
    clock.advance(4000)
    assert client.recover("t") == 1


@pytest.mark.both_deployments
def test_ack_counts_only_deliveries_that_held_their_lease(client):
    client.create_topic("t", slots=4)
    client.send_many("t", [f"m{i}" for i in range(5)])
    held = client.claim("t", count=5)
    assert client.ack(held[:2]) == 2
    assert client.ack(held) == 3
    assert client.ack([]) == 0
    assert client.stats("t").groups["default"].counters["acked"] == 5


@pytest.mark.both_deployments
def test_release_gives_deliveries_back_at_their_place_without_counting_an_attempt(client):
    client.create_topic("t", slots=1)
    client.send_many("t", [b"a", b"b", b"c"])
    held = client.claim("t", count=3)
    assert client.release(held[1:]) == 2
    assert [(r.body, r.attempts) for r in rows(client, "t") if r.state == "ready"] == [
        (b"b", 0), (b"c", 0)]
    client.send("t", b"d")
    taken = client.claim("t", count=3)
    assert [(m.body, m.attempts) for m in taken] == [(b"b", 1), (b"c", 1), (b"d", 1)]
    counters = client.stats("t").groups["default"].counters
    assert counters["retried"] == 0


def test_released_retry_keeps_its_earlier_attempts(client, clock):
    client.create_topic("t", retry_backoff=0)
    client.send("t", b"a")
    client.nack(client.claim("t")[0], "first failure")
    (second,) = client.claim("t")
    client.release([second])
    (third,) = client.claim("t")
    assert (second.attempts, third.attempts) == (2, 2)


def test_a_claim_never_blocks_by_default(client):
    client.create_topic("t")
    assert client.claim("t", count=10) == []


def test_a_claimed_message_describes_itself(client, clock):
    client.create_topic("t", slots=4)
    sent = client.send("t", json={"sku": 1}, key="shop-3", priority=200)
    (message,) = client.claim("t")
    assert (message.topic, message.group, message.slot) == ("t", "default", sent.slot)
    assert (message.priority, message.key, message.attempts) == (200, b"shop-3", 1)
    assert (message.due_at, message.json(), message.text) == (clock(), {"sku": 1}, '{"sku":1}')
    assert message.id == f"{sent.slot}-{message.seq}"


def test_claim_count_limits_the_batch(client):
    client.create_topic("t", slots=4)
    client.send_many("t", [f"m{i}" for i in range(10)])
    assert len(client.claim("t", count=3)) == 3
    assert len(client.claim("t", count=100)) == 7


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_claim_with_wait_wakes_when_a_message_is_sent(make_client):
    c = make_client()
    c.create_topic("t")
    producer = make_client()
    sender = threading.Timer(0.1, producer.send, args=("t", b"arrived"))
    started = time.monotonic()
    sender.start()
    try:
        messages = c.claim("t", wait=5.0)
    finally:
        sender.join()
    assert [m.body for m in messages] == [b"arrived"]
    assert time.monotonic() - started < 2.0


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_claim_with_wait_returns_empty_when_time_is_up(make_client):
    c = make_client()
    c.create_topic("t")
    started = time.monotonic()
    assert c.claim("t", wait=0.2) == []
    assert 0.2 <= time.monotonic() - started < 2.0
