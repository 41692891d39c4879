"""Which consumer holds an in-flight message (issue 10: peek and find show the holder): a
claim may name its holder, a Consumer always names itself, and the record that carries it
settles like any other (ack, nack, release, recovery, key locks)."""

from __future__ import annotations

import threading

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import ManualClock, states, wait_for

import rmq
from rmq import errors
from rmq.storage.codec import InflightRecord, parse_inflight

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def in_flight(client, topic: str, group: str = "default") -> dict[bytes, str | None]:
    return {r.body: r.holder for r in client.snapshot(topic, groups=[group])
            if r.state == "in_flight"}


def test_a_claim_names_its_holder_and_peek_find_and_snapshot_show_it(client) -> None:
    client.create_topic("t", slots=2)
    client.send_many("t", ["a", "b", "c"])
    client.claim("t", count=1, holder="worker-7@host:123")
    client.claim("t", count=1)  # says nobody
    assert sorted(in_flight(client, "t").values(), key=str) == [None, "worker-7@host:123"]
    held = {r.body: r.holder for r in client.peek("t", "in_flight").rows}
    assert held == in_flight(client, "t")
    (named,) = [body for body, who in held.items() if who]
    (found,) = client.find_messages("t", named.decode())
    assert (found.state, found.holder) == ("in_flight", "worker-7@host:123")


@pytest.mark.parametrize("holder", ["", "x" * 257, 7, b"bytes"])
def test_a_holder_that_is_no_consumer_id_is_refused_before_anything_is_claimed(
        client, holder) -> None:
    client.create_topic("t")
    client.send("t", b"kept")
    with pytest.raises(errors.InvalidArgument, match="holder must be a str of 1-256"):
        client.claim("t", holder=holder)
    assert states(client, "t")["ready"] == [b"kept"]


def test_records_with_a_holder_settle_as_any_other(client, clock: ManualClock) -> None:
    """Commas, semicolons and digits in the holder cannot shift the member apart: ack,
    nack, release, extend and recovery read the same message back."""
    client.create_topic("t", slots=1, max_retries=5, retry_backoff=0, serial_keys=True)
    holder = "12,34;5,"
    client.send_many("t", [{"body": "9,9;9", "key": "k"}, {"body": "two", "key": "k"},
                           {"body": "other", "key": "j"}])
    first = client.claim("t", count=10, holder=holder)
    assert sorted(m.body for m in first) == [b"9,9;9", b"other"]  # one per key
    assert in_flight(client, "t") == {b"9,9;9": holder, b"other": holder}
    assert client.extend(first, 60) == [True, True]
    (k,) = [m for m in first if m.key == b"k"]
    client.nack(k, "again")  # retried: back to ready with its key lock kept for it
    (retried,) = [m for m in client.claim("t", count=10, holder=holder) if m.key == b"k"]
    assert (retried.body, retried.attempts) == (b"9,9;9", 2)
    assert client.release([retried]) == 1
    assert states(client, "t")["ready"][0] == b"9,9;9"
    again = client.claim("t", count=10, holder=holder)
    assert [m.body for m in again] == [b"9,9;9"]
    clock.advance(3_600_000)
    assert client.recover("t") == 2  # expired: both in-flight records read back
    ready = states(client, "t")["ready"]
    assert sorted(ready) == [b"9,9;9", b"other", b"two"]
    done = client.claim("t", count=10, holder=holder)
    assert client.ack(done) == len(done) == 2
    (last,) = client.claim("t", count=10, holder=holder)
    assert last.body == b"two"  # the key's lock was released by the ack of its first


def test_records_written_before_holders_existed_still_read() -> None:
    assert parse_inflight(b"200,3,1700000000000,1,2;x") == InflightRecord(
        200, 3, 1700000000000, b"1,2;x", None)
    assert parse_inflight(b"200,3,1700000000000;4,a,b;1,2;x") == InflightRecord(
        200, 3, 1700000000000, b"1,2;x", "a,b;")


def test_a_consumer_holds_its_messages_under_its_own_id(make_client) -> None:
    client = make_client(kind="sync")
    client.create_topic("t", slots=2)
    client.send_many("t", ["a", "b"])
    started, release = threading.Barrier(3), threading.Event()

    def handle(message: rmq.Message) -> None:
        started.wait(10)
        assert release.wait(10)

    consumer = rmq.Consumer(client, "t", handle, concurrency=2, prefetch=2,
                            heartbeat_interval=60).start()
    try:
        started.wait(10)
        assert in_flight(client, "t") == {b"a": consumer.id, b"b": consumer.id}
    finally:
        release.set()
        consumer.stop(grace=5)
    wait_for(lambda: in_flight(client, "t") == {}, what="the messages acked")
