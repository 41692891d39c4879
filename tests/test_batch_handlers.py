"""Batch handlers (SPEC §15, docs/semantics.md "Batch handlers"): a consumer given
``batch=N`` hands its handler lists of up to N messages of its group; returning acknowledges
them all, raising retries them all, ``BatchFailed`` retries those it names. With
``batch_wait_ms`` it waits for the batch to fill while the messages stay pending in Redis,
woken by the sends that fill it, and takes an urgent message at once."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import zlib
from collections.abc import Callable

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows, states, wait_for

import rmq
from rmq.errors import InvalidArgument

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


class Batches:
    """A batch handler that records each batch it was handed; ``gate`` holds it back."""

    def __init__(self, gate: threading.Event | None = None, clock: Callable[[], int] | None = None):
        self.seen: list[list[rmq.Message]] = []
        self.handled_at: list[int] = []
        self.lock = threading.Lock()
        self.gate, self.clock = gate, clock

    def __call__(self, messages: list[rmq.Message]) -> None:
        with self.lock:
            self.seen.append(list(messages))
            if self.clock is not None:
                self.handled_at.append(self.clock())
        if self.gate is not None:
            assert self.gate.wait(10), "the test never opened the gate"

    @property
    def bodies(self) -> list[list[bytes]]:
        with self.lock:
            return [[m.body for m in batch] for batch in self.seen]



def counters(client: rmq.Client, topic: str) -> dict[str, int]:
    return client.stats(topic).groups["default"].counters


def test_a_batch_handler_gets_lists_of_up_to_its_batch_and_returning_acks_them_all(
        make_client, consumers):
    producer = make_client()
    producer.create_topic("t", slots=4)
    producer.send_many("t", [f"m{i}" for i in range(25)])
    handled = Batches()
    consumer = consumers(make_client(), "t", handled, batch=10, concurrency=1)
    wait_for(lambda: consumer.handled == 25, what="25 handled")
    assert sorted(len(batch) for batch in handled.bodies) == [5, 10, 10]
    assert all(isinstance(batch, list) for batch in handled.seen)
    assert sorted(b for batch in handled.bodies for b in batch) == sorted(
        f"m{i}".encode() for i in range(25))
    assert counters(producer, "t")["acked"] == 25
    assert rows(producer, "t") == []


def test_a_raising_batch_handler_retries_every_message_of_its_batch_an_attempt_each(
        make_client, consumers):
    producer = make_client()
    producer.create_topic("t", max_retries=1, retry_backoff=0)
    producer.send_many("t", [b"a", b"b", b"c"])
    attempts: list[tuple[bytes, int]] = []

    def broken(messages: list[rmq.Message]) -> None:
        attempts.extend((m.body, m.attempts) for m in messages)
        raise RuntimeError("the GPU fell over")

    consumer = consumers(make_client(), "t", broken, batch=3, concurrency=1)
    dead = wait_for(lambda: len(producer.dead_letters("t")) == 3 and producer.dead_letters("t"),
                    what="3 dead letters")
    assert sorted(attempts) == [(b"a", 1), (b"a", 2), (b"b", 1), (b"b", 2), (b"c", 1),
                                (b"c", 2)]
    assert {(d.body, d.attempts, d.error) for d in dead} == {
        (body, 2, "RuntimeError: the GPU fell over") for body in (b"a", b"b", b"c")}
    assert (consumer.failed, consumer.failed_messages, consumer.handled) == (6, 3, 0)


def test_batch_failed_retries_only_the_messages_it_names_and_acks_the_rest(make_client,
                                                                          consumers):
    producer = make_client()
    producer.create_topic("t", max_retries=0, trace=True)
    producer.send_many("t", [b"ok-1", b"bad-by-message", b"ok-2", b"bad-by-id"])

    def partly(messages: list[rmq.Message]) -> None:
        by_body = {m.body: m for m in messages}
        raise rmq.BatchFailed({by_body[b"bad-by-message"]: ValueError("no such product"),
                               by_body[b"bad-by-id"].id: "out of stock"})

    consumer = consumers(make_client(), "t", partly, batch=4, concurrency=1)
    wait_for(lambda: len(producer.dead_letters("t")) == 2, what="2 dead letters")
    dead = {d.body: d.error for d in producer.dead_letters("t")}
    assert dead == {b"bad-by-message": "ValueError: no such product",
                    b"bad-by-id": "out of stock"}
    wait_for(lambda: consumer.handled == 2, what="the others acknowledged")
    assert counters(producer, "t")["acked"] == 2
    assert states(producer, "t") == {"ready": [], "delayed": [], "in_flight": [],
                                     "dead": [b"bad-by-id", b"bad-by-message"]}
    failed = [e for e in producer.trace("t", body=b"bad-by-id") if e.event == "failed"]
    assert [e.error for e in failed] == ["out of stock"]
    assert [e.event for e in producer.trace("t", body=b"ok-1")][-1] == "acked"


def test_batch_failed_naming_a_message_not_in_the_batch_retries_the_whole_batch(
        make_client, consumers, caplog):
    producer = make_client()
    producer.create_topic("t", max_retries=0)
    producer.send_many("t", [b"a", b"b"])

    def confused(messages: list[rmq.Message]) -> None:
        raise rmq.BatchFailed({"7-77": "which one?"})

    consumers(make_client(), "t", confused, batch=2, concurrency=1)
    wait_for(lambda: len(producer.dead_letters("t")) == 2, what="both dead-lettered")
    assert {d.error for d in producer.dead_letters("t")} == {
        "BatchFailed: 1 message(s) of the batch failed: 7-77"}
    assert "which is no message of its batch" in caplog.text


def test_batch_failed_with_no_error_for_a_message_fails_the_whole_batch(make_client,
                                                                       consumers):
    producer = make_client()
    producer.create_topic("t", max_retries=0)
    producer.send_many("t", [b"a", b"b"])

    def careless(messages: list[rmq.Message]) -> None:
        raise rmq.BatchFailed({m: None for m in messages if m.body == b"b"})

    consumers(make_client(), "t", careless, batch=2, concurrency=1)
    wait_for(lambda: len(producer.dead_letters("t")) == 2, what="both dead-lettered")
    (error,) = {d.error for d in producer.dead_letters("t")}
    assert re.match(r"InvalidArgument: BatchFailed entry '\d+-\d+': None: ", error)
    assert counters(producer, "t")["acked"] == 0


class Named:
    """Something with a delivery id but no message id: no Message."""

    id = "1-1"


@pytest.mark.parametrize("failures", [
    {"1-1": None}, {"1-1": ""}, {"1-1": 7}, {"1-1": ValueError}, {"": "bad"},
    {None: "bad"}, {7: "bad"}, {Named(): "bad"}, [("1-1", "bad")]])
def test_batch_failed_refuses_an_entry_that_is_no_message_and_error(failures):
    with pytest.raises(InvalidArgument, match="BatchFailed"):
        rmq.BatchFailed(failures)


def test_batch_failed_takes_exceptions_and_texts_by_message_or_id(make_client):
    client = make_client()
    client.create_topic("t")
    client.send("t", b"a")
    (message,) = client.claim("t")
    failures = {message: ValueError("bad"), "1-9": "out of stock", message.message_id: "x"}
    assert rmq.BatchFailed(failures).failures == failures
    assert rmq.BatchFailed({}).failures == {}


def test_an_async_batch_handler_is_awaited_and_its_batches_acknowledged(make_client,
                                                                       consumers):
    producer = make_client()
    producer.create_topic("t")
    seen: list[list[bytes]] = []

    async def render(messages: list[rmq.Message]) -> None:
        await asyncio.sleep(0.001)
        seen.append(sorted(m.body for m in messages))

    producer.send_many("t", [b"a", b"b", b"c"])
    consumer = consumers(make_client(), "t", render, batch=8, concurrency=2)
    wait_for(lambda: consumer.handled == 3, what="3 handled")
    assert seen == [[b"a", b"b", b"c"]]


def test_an_async_batch_handler_raising_batch_failed_retries_those_named(make_client,
                                                                        consumers):
    producer = make_client()
    producer.create_topic("t", max_retries=0)
    producer.send_many("t", [b"a", b"b"])

    async def render(messages: list[rmq.Message]) -> None:
        raise rmq.BatchFailed({m: "no" for m in messages if m.body == b"b"})

    consumer = consumers(make_client(), "t", render, batch=2, concurrency=1)
    wait_for(lambda: consumer.handled == 1 and producer.dead_letters("t"), what="settled")
    assert [(d.body, d.error) for d in producer.dead_letters("t")] == [(b"b", "no")]


def test_a_batch_handlers_run_counts_once_in_the_handler_times_its_heartbeats_report(
        make_client, consumers):
    producer = make_client()
    producer.create_topic("t", max_retries=0)
    producer.send_many("t", [b"a", b"b", b"bad", b"c"])

    def render(messages: list[rmq.Message]) -> None:
        time.sleep(0.03)  # a run's length, measured: not a synchronisation
        raise rmq.BatchFailed({m: "bad" for m in messages if m.body == b"bad"})

    consumer = consumers(make_client(), "t", render, batch=4, concurrency=1)
    wait_for(lambda: consumer.handled == 3 and consumer.failed == 1, what="settled")
    times = consumer._settler.times.times
    assert times.count == 1 and times.seconds >= 0.03


def test_the_leases_of_a_batch_are_extended_while_its_handler_runs(make_client, consumers):
    producer = make_client()
    producer.create_topic("t", visibility_timeout=0.6)
    producer.send_many("t", [b"a", b"b", b"c"])
    gate = threading.Event()
    handled = Batches(gate)
    consumer = consumers(make_client(), "t", handled, batch=3, concurrency=1,
                         recover_interval=0.2)
    wait_for(lambda: handled.seen, what="the batch started")
    # Three leases long: a lease not extended would have expired and been recovered.
    deadline = time.monotonic() + 1.8
    while time.monotonic() < deadline:
        assert states(producer, "t")["in_flight"] == [b"a", b"b", b"c"]
        time.sleep(0.1)
    gate.set()
    wait_for(lambda: consumer.handled == 3, what="3 handled")
    assert len(handled.seen) == 1 and counters(producer, "t")["retried"] == 0


def test_stop_gives_unstarted_batches_back_at_once_without_counting_attempts(make_client,
                                                                           consumers):
    producer = make_client()
    producer.create_topic("t", slots=1)
    producer.send_many("t", [f"m{i}" for i in range(6)])
    gate = threading.Event()
    handled = Batches(gate)
    consumer = consumers(make_client(), "t", handled, batch=2, concurrency=1)
    wait_for(lambda: handled.seen and consumer.held == 4, what="one batch running, one held")
    stopping = threading.Thread(target=consumer.stop, kwargs={"grace": 5})
    stopping.start()
    # the unstarted batch is back at once, while the running one still holds its messages
    wait_for(lambda: len(states(producer, "t")["ready"]) == 4, what="unstarted given back")
    gate.set()
    stopping.join(10)
    assert consumer.handled == 2
    assert all(m.attempts == 1 for m in producer.claim("t", count=10))


@pytest.mark.parametrize("options, named", [
    ({"batch": 0}, "batch"),
    ({"batch": 10_001}, "batch"),
    ({"batch": 2.5}, "batch"),
    ({"batch": 4, "batch_wait_ms": -1}, "batch_wait_ms"),
    ({"batch": 4, "batch_wait_ms": 3_600_001}, "batch_wait_ms"),
    ({"batch_wait_ms": 50}, "batch_wait_ms"),
    ({"batch": 4, "prefetch": 8}, "prefetch"),
])
def test_batch_options_out_of_range_are_refused_naming_the_option(make_client, options, named):
    client = make_client()
    client.create_topic("t")
    with pytest.raises(InvalidArgument, match=named):
        rmq.Consumer(client, "t", lambda messages: None, **options)


# -- waiting for a batch to fill ---------------------------------------------------------


@pytest.mark.both_clients
def test_a_ready_watch_looks_at_what_the_group_could_claim_without_claiming_it(make_client):
    client = make_client()
    client.create_topic("t", slots=2)
    client.send("t", b"low", priority=rmq.Priority.LOW)
    client.send("t", b"later", delay_ms=60_000)
    watch = client.ready_watch("t")
    try:
        calm = watch.look(10)
        assert (calm.ready, calm.urgent) == (1, False)
        assert calm.next_due is not None and calm.next_due > client.now() + 50_000
        client.send("t", b"urgent", priority=rmq.Priority.HIGH)
        look = watch.look(10)
        assert (look.ready, look.urgent, look.since) == (2, True, calm.since)
    finally:
        watch.close()
    assert states(client, "t")["ready"] == [b"low", b"urgent"]


def test_a_ready_watch_wakes_when_a_key_its_look_read_is_written(make_client):
    client, producer = make_client(), make_client()
    client.create_topic("t", slots=1)
    producer.send("t", b"first")
    watch = client.ready_watch("t")
    try:
        watch.look(10)
        assert not watch.wait(0.05)  # nothing changed
        producer.send("t", b"second")  # into a slot that had ready messages: no wake-up sent
        assert watch.wait(10)
        assert watch.look(10).ready == 2
    finally:
        watch.close()

# Far longer than any test waits, as is a consumer's idle wake-up (its recover_interval):
# a batch taken sooner was woken by what happened in Redis.
WAIT_MS = 20_000
IDLE = {"recover_interval": 20}


def in_slot(slot: int, slots: int, n: int = 0) -> str:
    """A slot basis whose messages go to ``slot`` (the ``n``-th such one)."""
    found = (f"k{i}" for i in range(100_000) if zlib.crc32(f"k{i}".encode()) & (slots - 1)
             == slot)
    for _ in range(n):
        next(found)
    return next(found)


def every_slot_has_one(producer: rmq.Client, topic: str, slots: int) -> list[bytes]:
    """One message ready in each slot: a send from now on finds its slot's ready messages,
    so the scripts publish no wake-up for it (only the keys' tracking can tell)."""
    bodies = [f"first-{slot}".encode() for slot in range(slots)]
    for slot, body in enumerate(bodies):
        producer.send(topic, body, slot_basis=in_slot(slot, slots))
    return bodies


def counting_looks(client: rmq.Client) -> list[object]:
    """The looks of ``client``'s batch consumers, recorded as each returns."""
    looks: list[object] = []
    open_watch = client.ready_watch

    def ready_watch(topic: str, group: str = "default"):
        watch = open_watch(topic, group)
        look = watch.look

        def counted(*args, **kwargs):
            looks.append(look(*args, **kwargs))
            return looks[-1]

        watch.look = counted
        return watch

    client.ready_watch = ready_watch  # type: ignore[method-assign]
    return looks


@pytest.mark.both_deployments
def test_a_waiting_batch_leaves_its_messages_pending_and_is_woken_by_the_send_that_fills_it(
        make_client, consumers):
    producer, consumer_client = make_client(), make_client()
    producer.create_topic("t", slots=4)
    first = every_slot_has_one(producer, "t", 4)
    looks = counting_looks(consumer_client)
    handled = Batches()
    consumer = consumers(consumer_client, "t", handled, batch=6, batch_wait_ms=WAIT_MS,
                         concurrency=1, **IDLE)
    wait_for(lambda: looks, what="the consumer looked")
    assert looks[0].ready == 4
    # Pending, not claimed: a duplicate merges into its message.
    assert producer.send("t", first[2], slot_basis=in_slot(2, 4)).merged
    producer.send("t", b"fifth", slot_basis=in_slot(2, 4, 1))
    producer.send("t", b"sixth", slot_basis=in_slot(1, 4, 1))
    wait_for(lambda: consumer.handled == 6, timeout=8, what="the full batch handled")
    assert [sorted(batch) for batch in handled.bodies] == [sorted([*first, b"fifth",
                                                                   b"sixth"])]


@pytest.mark.both_deployments
def test_a_message_at_high_priority_is_taken_at_once_with_what_is_ready(make_client,
                                                                      consumers):
    producer, consumer_client = make_client(), make_client()
    producer.create_topic("t", slots=2)
    first = every_slot_has_one(producer, "t", 2)
    looks = counting_looks(consumer_client)
    handled = Batches()
    consumer = consumers(consumer_client, "t", handled, batch=10, batch_wait_ms=WAIT_MS,
                         concurrency=1, **IDLE)
    wait_for(lambda: looks, what="the consumer looked")
    assert producer.send("t", first[0], slot_basis=in_slot(0, 2)).merged  # still pending
    producer.send("t", b"urgent", priority=rmq.Priority.HIGH, slot_basis=in_slot(1, 2, 1))
    wait_for(lambda: consumer.handled == 3, timeout=8, what="the batch handled")
    assert [sorted(batch) for batch in handled.bodies] == [sorted([*first, b"urgent"])]


def test_a_batch_that_does_not_fill_is_taken_once_its_oldest_message_waited_batch_wait_ms(
        make_client, consumers):
    producer = make_client()
    producer.create_topic("t", slots=2)
    consumer_client = make_client()
    handled = Batches(clock=consumer_client.now)
    consumer = consumers(consumer_client, "t", handled, batch=10, batch_wait_ms=400,
                         concurrency=1)
    producer.send_many("t", [b"a", b"b"])
    wait_for(lambda: consumer.handled == 2, what="the partial batch handled")
    (batch,) = handled.seen
    waited = handled.handled_at[0] - min(m.due_at for m in batch)
    assert 400 <= waited < 5000


def test_a_delayed_message_falling_due_counts_toward_the_batch(make_client, consumers):
    producer = make_client()
    producer.create_topic("t", slots=2)
    handled = Batches()
    consumer = consumers(make_client(), "t", handled, batch=3, batch_wait_ms=WAIT_MS,
                         concurrency=1, **IDLE)
    producer.send("t", b"later", delay_ms=300)
    producer.send_many("t", [b"a", b"b"])
    wait_for(lambda: consumer.handled == 3, timeout=8, what="the batch handled")
    assert [sorted(batch) for batch in handled.bodies] == [[b"a", b"b", b"later"]]
