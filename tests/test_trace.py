"""The trace (SPEC §11, docs/trace.md): with a topic's ``trace`` on, every state change of a
message in a group is recorded in its slot with Redis's time, and ``trace`` returns them
oldest first. Off, nothing is recorded."""

from __future__ import annotations

import time

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq.errors import InvalidQuery, InvalidSetting
from rmq.storage.keys import SlotKeys

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def names(events):
    return [e.event for e in events]


@pytest.mark.both_clients
def test_a_message_is_traced_from_its_send_to_its_ack(client):
    client.create_topic("t", slots=4, trace=True)
    sent = client.send("t", b"product:42")
    client.send("t", b"product:42")
    client.send("t", b"product:42")
    (message,) = client.claim("t", holder="worker-1")
    client.extend(message, 30)
    client.ack(message)
    events = client.trace("t", sent.message_id)
    assert names(events) == ["sent", "merged", "claimed", "extended", "acked"]
    merged, claimed = events[1], events[2]
    assert (merged.count, merged.group) == (2, "default")
    assert merged.time <= merged.last_time <= claimed.time
    assert (claimed.delivery_id, claimed.consumer, claimed.attempt) == (
        message.id, "worker-1", 1)
    assert [(e.delivery_id, e.consumer) for e in events[3:]] == [(message.id, "worker-1")] * 2
    assert all(e.message_id == sent.message_id and e.slot == message.slot for e in events)
    times = [e.time for e in events]
    assert times == sorted(times)
    # Redis's clock (on this host), not the test's manual one
    assert abs(times[0] - time.time() * 1000) < 60_000 and times[0] != client.now()


def test_merges_before_a_claim_are_one_event_and_later_sends_start_anew(client):
    client.create_topic("t", trace=True)
    for _ in range(5):
        client.send("t", b"x")
    pending = client.trace("t", body=b"x")
    assert [(e.event, e.count) for e in pending] == [("sent", 1), ("merged", 4)]
    client.ack(client.claim("t"))
    client.send("t", b"x")
    client.send("t", b"x")
    client.claim("t")
    assert [(e.event, e.count) for e in client.trace("t", body=b"x")] == [
        ("sent", 1), ("merged", 4), ("claimed", 1), ("acked", 1), ("sent", 1), ("merged", 1),
        ("claimed", 1)]


def test_failures_retries_dead_letters_requeue_and_purge_are_traced(client):
    client.create_topic("t", max_retries=1, retry_backoff=0, trace=True)
    sent = client.send("t", b"x")
    client.nack(client.claim("t")[0], "first")
    client.nack(client.claim("t")[0], "second")
    assert client.requeue_dead("t") == 1
    client.nack(client.claim("t")[0], "third")
    client.nack(client.claim("t")[0], "fourth")
    assert client.purge_dead("t") == 1
    events = client.trace("t", sent.message_id)
    assert [(e.event, e.attempt, e.error) for e in events] == [
        ("sent", None, None),
        ("claimed", 1, None), ("failed", 1, "first"),
        ("claimed", 2, None), ("failed", 2, "second"), ("dead", 2, "second"),
        ("requeued", None, None),
        ("claimed", 1, None), ("failed", 1, "third"),
        ("claimed", 2, None), ("failed", 2, "fourth"), ("dead", 2, "fourth"),
        ("purged", 2, None)]
    dead_id = events[-2].delivery_id
    assert events[-1].delivery_id == dead_id


def test_promotion_release_and_an_expired_lease_are_traced(client, clock):
    client.create_topic("t", visibility_timeout=5, retry_backoff=0, trace=True)
    sent = client.send("t", b"later", delay_ms=1000)
    clock.advance(1000)
    (message,) = client.claim("t")
    client.release([message])
    client.claim("t", holder="frozen")
    clock.advance(6000)
    assert client.recover("t") == 1
    events = client.trace("t", sent.message_id)
    assert names(events) == ["sent", "promoted", "claimed", "released", "claimed", "expired"]
    assert (events[-1].consumer, events[-1].attempt, events[-1].error) == (
        "frozen", 1, "lease expired")


def test_every_group_has_its_own_events(make_client):
    client = make_client()
    client.create_topic("t", trace=True)
    client.bind("t", "render")
    client.bind("t", "index")
    sent = client.send("t", b"x")
    client.ack(client.claim("t", "render"))
    by_group = {}
    for e in client.trace("t", sent.message_id):
        by_group.setdefault(e.group, []).append(e.event)
    assert by_group == {"render": ["sent", "claimed", "acked"], "index": ["sent"]}


def test_with_the_trace_off_nothing_is_recorded(client):
    client.create_topic("t", slots=2)
    sent = client.send("t", b"x")
    client.send("t", b"x")
    client.ack(client.claim("t"))
    assert client.trace("t", sent.message_id) == []
    assert client.trace("t", body=b"x") == []


def test_alter_topic_turns_the_trace_on_and_off(client):
    client.create_topic("t")
    client.send("t", b"before")
    client.alter_topic("t", trace=True)
    client.send("t", b"x")
    client.alter_topic("t", trace=False)
    client.send("t", b"after")
    client.claim("t", count=10)
    assert names(client.trace("t", body=b"x")) == ["sent"]
    assert client.trace("t", body=b"before") == []
    assert client.trace("t", body=b"after") == []


@pytest.mark.both_deployments
def test_delete_topic_removes_the_trace(client):
    client.create_topic("t", slots=4, trace=True)
    sent = client.send("t", b"x")
    client.delete_topic("t")
    client.create_topic("t", slots=4, trace=True)
    assert client.trace("t", sent.message_id) == []


def test_the_cap_keeps_each_slots_newest_events(client):
    client.create_topic("t", slots=1, trace=True, trace_cap=5)
    sent = [client.send("t", f"m{i}".encode()) for i in range(8)]
    kept = [s for s in sent if client.trace("t", s.message_id)]
    assert kept == sent[3:]


def test_events_older_than_the_retention_are_dropped(client):
    client.create_topic("t", slots=1, trace=True, trace_retention=1)
    old = client.send("t", b"old")
    assert names(client.trace("t", old.message_id)) == ["sent"]

    def old_dropped() -> bool:
        client.send("t", b"new")  # each write drops what is older than the retention
        return client.trace("t", old.message_id) == []

    wait_for(old_dropped, timeout=10, what="the old event dropped")
    fresh = client.send("t", b"fresh")
    assert names(client.trace("t", fresh.message_id)) == ["sent"]


def test_a_trace_names_its_message_by_id_or_by_body_and_key(client):
    client.create_topic("t", slots=8, trace=True)
    keyed = client.send("t", b"x", key="k")
    client.send("t", b"x")
    assert client.trace("t", body=b"x", key="k") == client.trace("t", keyed.message_id)
    assert len(client.trace("t", body="x")) == 1
    for bad in ({}, {"key": "k"}, {"message_id": "nope"},
                {"message_id": keyed.message_id, "body": b"x"}):
        with pytest.raises(InvalidQuery):
            client.trace("t", **bad)


def test_trace_settings_are_checked(client):
    with pytest.raises(InvalidSetting, match="trace_retention"):
        client.create_topic("t", trace=True, trace_retention=0)
    with pytest.raises(InvalidSetting, match="trace_cap"):
        client.create_topic("t", trace_cap=0)
    with pytest.raises(InvalidSetting, match="trace must be"):
        client.create_topic("t", trace="yes")
    assert client.create_topic("t").trace is False


def test_trace_events_have_the_fields_the_spec_names(client):
    client.create_topic("t", trace=True)
    sent = client.send("t", b"x")
    (event,) = client.trace("t", sent.message_id)
    assert isinstance(event, rmq.TraceEvent)
    assert set(event.to_dict()) >= {"event", "time", "group", "delivery_id", "consumer",
                                    "attempt", "error"}


def test_a_topic_of_many_slots_is_traced_through_its_heads_index(client):
    client.create_topic("t", slots=64, trace=True)  # claim_heads.lua on a single node
    sent = [client.send("t", f"m{i}".encode()) for i in range(20)]
    claimed = client.claim("t", count=20, holder="w")
    client.ack(claimed)
    for result in sent:
        events = client.trace("t", result.message_id)
        assert names(events) == ["sent", "claimed", "acked"]
        assert events[1].consumer == "w" and events[2].delivery_id == events[1].delivery_id


def test_a_promotion_made_by_stats_is_traced(client, clock):
    client.create_topic("t", trace=True)
    sent = client.send("t", b"later", delay_ms=500)
    clock.advance(500)
    assert client.stats("t").groups["default"].ready == 1  # stats promotes what is due
    assert names(client.trace("t", sent.message_id)) == ["sent", "promoted"]


def test_a_limited_groups_claims_and_acks_are_traced_and_free_their_permits(client):
    client.create_topic("t", slots=4, trace=True)
    client.set_limits("t", max_in_flight=2)
    sent = [client.send("t", f"m{i}".encode()) for i in range(3)]
    first = client.claim("t", count=3)
    assert len(first) == 2  # the limit holds with the trace's keys beside the limit's
    client.ack(first)
    (last,) = client.claim("t", count=3)  # the ack gave the permits back
    client.ack(last)
    for result in sent:
        assert names(client.trace("t", result.message_id)) == ["sent", "claimed", "acked"]


def test_a_message_longer_than_what_the_trace_copies_is_traced_by_its_id(client):
    client.create_topic("t", trace=True)
    body = b"L" * 300  # recorded as its message id, not copied (docs/storage.md, "The trace")
    sent = client.send("t", body)
    client.send("t", body)
    client.ack(client.claim("t", holder="w"))
    events = client.trace("t", sent.message_id)
    assert names(events) == ["sent", "merged", "claimed", "acked"]
    assert events[1].count == 1 and events[2].consumer == "w"
    assert client.trace("t", body=body) == events


def test_merges_are_named_by_ready_score_with_no_key_per_message(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("t", slots=1, trace=True)
        client.send_many("t", [b"x", b"x", b"y"])
        client.send("t", b"x")
        assert [(e.event, e.count) for e in client.trace("t", body=b"x")] == [
            ("sent", 1), ("merged", 2)]
        score = int(client.redis.zscore(SlotKeys("t", 0).group("default").ready, b"x"))
        log = client.redis.lrange(SlotKeys("t", 0).trace_log, 0, -1)
        refs = [line.split(b"\t")[6] for line in log if line.startswith(b"merged\tdefault\t~")]
        # the second x of the batch, then the later send: two merges into one ready score
        assert [int(float(ref)) for line in refs for ref in line.split(b",")] == [score] * 2
        assert client.redis.keys("*tally*") == []  # a merge writes no hash field
        taken = client.claim("t", count=2, holder="w")
        assert [(e.event, e.count) for e in client.trace("t", body=b"x")] == [
            ("sent", 1), ("merged", 2), ("claimed", 1)]
        client.ack(taken)
        client.send("t", b"x")
        client.send("t", b"x")  # into the new pending message: a run of its own
        assert [(e.event, e.count) for e in client.trace("t", body=b"x")][-3:] == [
            ("acked", 1), ("sent", 1), ("merged", 1)]


def test_merges_before_and_after_a_priority_raise_are_one_run(client):
    client.create_topic("t", slots=2, trace=True)
    sent = client.send("t", b"x")
    client.send("t", b"x")
    client.send("t", b"x", priority=200)  # its ready score changes: recorded as rescored
    client.send_many("t", [{"body": b"x", "priority": 200}])
    pending = [(e.event, e.count) for e in client.trace("t", sent.message_id)]
    assert pending == [("sent", 1), ("merged", 3)]
    assert [(e.event, e.count) for e in client.trace("t", body=b"x")] == pending
    (message,) = client.claim("t")
    assert message.priority == 200
    assert [(e.event, e.count) for e in client.trace("t", sent.message_id)] == [
        ("sent", 1), ("merged", 3), ("claimed", 1)]


def test_merges_into_a_delayed_message_then_into_it_promoted(client, clock):
    client.create_topic("t", trace=True)
    sent = client.send("t", b"later", delay_ms=1000)
    client.send_many("t", [{"body": b"later", "delay_ms": 2000}] * 2)  # named: no score yet
    clock.advance(1000)
    client.stats("t")  # promotes it
    client.send("t", b"later")
    client.claim("t")
    assert [(e.event, e.count) for e in client.trace("t", sent.message_id)] == [
        ("sent", 1), ("merged", 2), ("promoted", 1), ("merged", 1), ("claimed", 1)]


def test_merges_stay_counted_when_a_delivery_given_back_moves_the_pending_copy(client):
    client.create_topic("t", trace=True)
    sent = client.send("t", b"x")
    (first,) = client.claim("t")
    client.send("t", b"x")  # a pending copy, behind the delivery in flight
    client.send("t", b"x")
    client.release([first])  # merges into the copy and gives it the delivery's earlier place
    client.send("t", b"x")
    (second,) = client.claim("t")
    assert second.id != first.id
    events = client.trace("t", sent.message_id)
    assert names(events) == ["sent", "claimed", "sent", "merged", "released", "merged",
                             "claimed"]
    assert [e.count for e in events if e.event == "merged"] == [1, 1]


def test_a_pending_messages_merges_are_found_by_body_after_its_sent_is_trimmed(client):
    client.create_topic("t", slots=1, trace=True, trace_cap=10)
    client.send("t", b"x")
    client.send_many("t", [f"m{i}".encode() for i in range(100)])  # the sent of x trimmed
    client.send("t", b"x")
    client.send("t", b"x")
    assert [(e.event, e.count) for e in client.trace("t", body=b"x")] == [("merged", 2)]


def test_merges_older_than_the_retention_are_not_counted(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("t", slots=1, trace=True, trace_retention=1)
        client.send("t", b"x")
        client.send("t", b"x")
        wait_for(lambda: client.trace("t", body=b"x") == [], timeout=10,
                 what="the first send and merge past the retention")
        client.send("t", b"x")
        assert [(e.event, e.count) for e in client.trace("t", body=b"x")] == [("merged", 1)]


def test_a_slots_trace_is_trimmed_near_its_cap_and_reads_its_newest_events(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("t", slots=1, trace=True, trace_cap=10)
        sent = [client.send("t", f"m{i}".encode()) for i in range(100)]
        log = SlotKeys("t", 0).trace_log
        # trimmed to the cap whenever it grows 64 elements past it; a send writes 4
        assert client.redis.llen(log) <= 10 + 64 + 4
        assert all(client.trace("t", s.message_id) == [] for s in sent[:80])
        kept = [s for s in sent if client.trace("t", s.message_id)]
        assert kept == sent[-len(kept):] and 1 <= len(kept) <= 10


def test_delete_topic_removes_what_earlier_versions_traced_too(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("t", slots=1, trace=True)
        client.send("t", b"x")
        earlier = SlotKeys("t", 0).earlier_trace(["default"])
        for key in earlier:
            client.redis.set(key, b"left by an earlier version")
        client.delete_topic("t")
        assert client.redis.exists(*earlier) == 0


@pytest.mark.both_deployments
def test_a_trace_by_body_is_one_round_trip_and_by_id_two(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("t", slots=8, trace=True)
        sent = client.send("t", b"x")
        client.send("t", b"x")
        client.topic("t")  # cached, as in a running application
        before = client._execute.round_trips
        assert [(e.event, e.count) for e in client.trace("t", body=b"x")] == [
            ("sent", 1), ("merged", 1)]
        # time, the slot's log and the message's scores now, together
        assert client._execute.round_trips - before == 1
        before = client._execute.round_trips
        assert [(e.event, e.count) for e in client.trace("t", sent.message_id)] == [
            ("sent", 1), ("merged", 1)]
        # then the scores of the message its log names, in that slot only
        assert client._execute.round_trips - before == 2
