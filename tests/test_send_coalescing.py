"""Group commit of single sends (``rmq.client.group_commit``): sends made at once, from threads or
from asyncio tasks, share round trips, and each sender still gets its own result or error."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections import Counter

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows, wait_for

import rmq
from rmq.client.group_commit import GroupCommit
from rmq.client.replication import BatchNotReplicated

pytestmark = pytest.mark.sync_client


def _sends_in_flight(client: rmq.Client, topic: str, bodies: list[bytes],
                     execute: object) -> tuple[GroupCommit, list[object]]:
    """Threads sending ``bodies`` through a group commit whose batches ``execute`` runs;
    returns it and the per-thread outcomes (``merged``, or the exception raised)."""
    coalescer = GroupCommit(execute)  # type: ignore[arg-type]
    client._commit = coalescer
    client.topic(topic)  # cached: the sends only send
    outcomes: list[object] = [None] * len(bodies)

    def send(i: int) -> None:
        try:
            outcomes[i] = client.send(topic, bodies[i]).merged
        except BaseException as exc:  # noqa: BLE001 - the outcome under test
            outcomes[i] = exc

    # daemons: a regression that strands a sender must fail the test, not hang the run
    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(len(bodies))]
    return coalescer, [threads, outcomes]


def _first_round_trip_held(client: rmq.Client, gate: threading.Event,
                           later: object = None) -> tuple[object, list[object]]:
    """A group commit's executor: the real client's, its first batch of sends held until
    ``gate`` is set (so the other senders queue behind it); ``later(n)`` may fail the n-th."""
    calls: list[object] = []
    execute = client._execute

    def run(batch):
        if batch[0].script is None or batch[0].script.name != "enqueue":
            return execute(batch)  # not sends (the registry, the clock): not counted
        calls.append(batch)
        if len(calls) == 1:
            gate.wait(10)
        elif later is not None:
            later(len(calls))  # type: ignore[operator]
        return execute(batch)

    return run, calls


def _queue_behind_the_first(coalescer: GroupCommit, threads: list[threading.Thread],
                            gate: threading.Event) -> None:
    """Start the first sender, queue the others behind it in order, then let it go."""
    threads[0].start()
    wait_for(lambda: coalescer._busy)
    for queued, thread in enumerate(threads[1:], 1):
        thread.start()
        wait_for(lambda n=queued: len(coalescer._queued) == n)
    gate.set()
    for thread in threads:
        thread.join(10)


def test_threads_sending_while_a_send_is_on_the_wire_go_out_together(client):
    client.create_topic("t")
    gate = threading.Event()
    run, batches = _first_round_trip_held(client, gate)
    bodies = [b"first", b"a", b"b", b"a", b"c"]
    coalescer, (threads, outcomes) = _sends_in_flight(client, "t", bodies, run)
    _queue_behind_the_first(coalescer, threads, gate)

    assert len(batches) == 2  # "first" alone, then the four that queued behind it
    assert outcomes == [False, False, False, True, False]  # the second b"a" merged
    stats = client.stats("t").groups["default"]
    assert (stats.ready, stats.counters["sent"], stats.counters["merged"]) == (4, 5, 1)
    assert not coalescer._busy


def test_a_failed_batch_raises_in_every_sender_and_the_next_batch_still_goes(client):
    client.create_topic("t")
    gate = threading.Event()

    def fail_the_second(n: int) -> None:
        if n == 2:
            raise rmq.errors.RedisUnavailable("the batch's round trip failed")

    run, _ = _first_round_trip_held(client, gate, fail_the_second)
    coalescer, (threads, outcomes) = _sends_in_flight(client, "t", [b"x", b"y", b"z"], run)
    _queue_behind_the_first(coalescer, threads, gate)
    assert outcomes[0] is False
    assert all(isinstance(o, rmq.errors.RedisUnavailable) for o in outcomes[1:])
    assert not coalescer._busy

    assert client.send("t", b"after").merged is False
    assert client.stats("t").groups["default"].ready == 2  # x and after; y and z failed


def test_a_joined_batch_short_of_replicas_is_not_replicated_in_every_sender_but_stored(client):
    client.create_topic("t")
    gate = threading.Event()
    run, batches = _first_round_trip_held(client, gate)

    def short_of_replicas(batch):  # as the executor says it (replication.py), replies kept
        replies = run(batch)
        if len(batches) == 2 and batch is batches[-1]:
            short = BatchNotReplicated("only 0 of 1 replicas acknowledged", acknowledged=0,
                                       wanted=1)
            short.replies = replies
            raise short
        return replies

    coalescer, (threads, outcomes) = _sends_in_flight(client, "t", [b"x", b"y", b"z", b"y"],
                                                      short_of_replicas)
    _queue_behind_the_first(coalescer, threads, gate)
    assert outcomes[0] is False
    assert all(isinstance(o, rmq.errors.NotReplicated) for o in outcomes[1:])
    assert len({id(o) for o in outcomes[1:]}) == 3  # each its own, raised apart
    assert client.stats("t").groups["default"].ready == 3  # stored all the same, y merged
    assert not coalescer._busy


class Interrupted(Exception):
    pass


class Abort(BaseException):  # as KeyboardInterrupt: not an Exception
    pass


def test_an_abort_in_the_carrying_thread_is_its_own_and_the_others_get_an_rmq_error(client):
    client.create_topic("t")
    gate = threading.Event()

    def abort(n: int) -> None:
        raise Abort  # in the thread carrying the second batch: "y", the first queued

    run, _ = _first_round_trip_held(client, gate, abort)
    coalescer, (threads, outcomes) = _sends_in_flight(client, "t", [b"x", b"y", b"z"], run)
    _queue_behind_the_first(coalescer, threads, gate)
    assert outcomes[0] is False
    assert isinstance(outcomes[1], Abort)
    assert isinstance(outcomes[2], rmq.errors.RMQError) and "interrupted" in str(outcomes[2])
    assert not coalescer._busy


def test_a_sender_interrupted_while_waiting_does_not_strand_the_threads_behind_it(client):
    """The main thread, queued behind a send on the wire, is interrupted by a signal: the
    thread queued after it must still be carried, and the coalescer end idle."""
    client.create_topic("t")
    gate = threading.Event()
    run, _ = _first_round_trip_held(client, gate)
    coalescer, (threads, outcomes) = _sends_in_flight(client, "t", [b"first", b"last"], run)
    threads[0].start()
    wait_for(lambda: coalescer._busy)

    def interrupt(*_: object) -> None:
        raise Interrupted

    def queue_behind_main_and_interrupt() -> None:
        wait_for(lambda: len(coalescer._queued) == 1)  # the main thread's send is queued
        threads[1].start()
        wait_for(lambda: len(coalescer._queued) == 2)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, interrupt)
    helper = threading.Thread(target=queue_behind_main_and_interrupt)
    try:
        helper.start()
        with pytest.raises(Interrupted):
            client.send("t", b"interrupted")
    finally:
        signal.signal(signal.SIGUSR1, previous)
        helper.join(10)
    gate.set()
    for thread in threads:
        thread.join(10)
    assert outcomes == [False, False]
    assert not coalescer._busy and not coalescer._queued
    assert sorted(r.body for r in rows(client, "t")) == [b"first", b"last"]


def test_many_threads_sending_duplicates_get_consistent_results(client):
    client.create_topic("t", slots=4)
    bodies = [f"p{i % 7}".encode() for i in range(64)]
    results: list[rmq.SendResult | None] = [None] * len(bodies)

    def send(i: int) -> None:
        results[i] = client.send("t", bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    fresh = Counter(bodies[i] for i, r in enumerate(results) if r is not None and not r.merged)
    assert fresh == Counter({f"p{i}".encode(): 1 for i in range(7)})  # one send of each stored
    stats = client.stats("t").groups["default"]
    assert (stats.ready, stats.counters["sent"], stats.counters["merged"]) == (7, 64, 57)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_concurrent_async_sends_share_round_trips(redis_url: str, anyio_backend: str):
    async with rmq.AsyncClient(redis_url) as client:
        await client.create_topic("t", slots=4)
        await client.topic("t")  # cached: the sends below only queue and wait
        carried: list[object] = []
        original = client._commit._execute

        async def counting(batch):
            carried.append(batch)
            return await original(batch)

        client._commit._execute = counting
        bodies = [f"p{i % 50}".encode() for i in range(400)]
        results = await asyncio.gather(*(client.send("t", body) for body in bodies))

        assert sum(not r.merged for r in results) == 50
        assert len(carried) < len(bodies) / 10  # hundreds of sends, a handful of round trips
        stats = (await client.stats("t")).groups["default"]
        assert (stats.ready, stats.counters["sent"], stats.counters["merged"]) == (50, 400, 350)
        assert not client._commit._carriers


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_cancelled_async_sender_does_not_break_the_others(redis_url: str,
                                                                  anyio_backend: str):
    async with rmq.AsyncClient(redis_url) as client:
        await client.create_topic("t")
        await client.topic("t")
        tasks = [asyncio.ensure_future(client.send("t", f"m{i}")) for i in range(20)]
        await asyncio.sleep(0)  # every task has queued its send; the carrier has not run yet
        assert len(client._commit._queued) == 20
        tasks[3].cancel()  # its sender stops waiting; its message is already on its way
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(done[3], asyncio.CancelledError)
        assert all(isinstance(r, rmq.SendResult) for i, r in enumerate(done) if i != 3)
        assert (await client.stats("t")).groups["default"].ready == 20
        assert not client._commit._carriers


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("carriers", [1, 2])
async def test_async_sends_in_rounds_are_all_carried(redis_url: str, anyio_backend: str,
                                                     carriers: int):
    # Senders answered together send again at once, while the carrier that answered them is
    # about to leave: each must be carried (a carrier that left the set only in a done
    # callback let them queue behind nobody, and they waited forever). At most `carriers`
    # batches are on the wire at once.
    async with rmq.AsyncClient(redis_url) as client:
        await client.create_topic("t", slots=4)
        await client.topic("t")
        client._commit.CARRIERS = carriers
        on_the_wire, most = 0, 0
        original = client._commit._execute

        async def counting(batch):
            nonlocal on_the_wire, most
            on_the_wire += 1
            most = max(most, on_the_wire)
            try:
                return await original(batch)
            finally:
                on_the_wire -= 1

        client._commit._execute = counting

        async def sender(n: int) -> list[rmq.SendResult]:
            return [await client.send("t", f"s{n}-{i}") for i in range(20)]

        results = await asyncio.wait_for(asyncio.gather(*(sender(n) for n in range(64))), 60)
        assert [len(r) for r in results] == [20] * 64
        assert not any(r.merged for rounds in results for r in rounds)
        assert 1 <= most <= carriers
        assert not client._commit._carriers
        stats = (await client.stats("t")).groups["default"]
        assert (stats.ready, stats.counters["sent"]) == (1280, 1280)
