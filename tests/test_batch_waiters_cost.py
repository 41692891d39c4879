"""What batch consumers waiting for their batch to fill (``batch_wait_ms``, SPEC §15) cost
each send, counted in script calls on the servers (``INFO commandstats``): a bounded number
however many slots the topic has and however many consumers wait. A waiting consumer reads
again only the slot a send wrote, and one consumer of a group gathers at a time, the others
sleeping until it hands the lead on (docs/semantics.md, "Batch handlers")."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import redis
from core_fixtures import make_client_fixture  # noqa: F401
from helpers import wait_for
from support.nodes import node_urls_fixture  # noqa: F401

import rmq

pytestmark = [pytest.mark.both_deployments, pytest.mark.sync_client]

SCRIPTS = ("fcall", "evalsha", "eval")
# Far longer than any test waits, as is a consumer's idle wake-up (its recover_interval):
# a batch taken sooner was woken by what happened in Redis.
WAIT_MS = 20_000
IDLE = {"recover_interval": 20, "heartbeat_interval": 60}


def script_calls(node_urls: Sequence[str]) -> int:
    """Scripts the servers ran so far, summed over the masters."""
    total = 0
    for url in node_urls:
        with redis.Redis.from_url(url) as node:
            stats = node.info("commandstats")
        total += sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in SCRIPTS)
    return total


def recording_looks(client: rmq.Client) -> list[Any]:
    """The looks of ``client``'s batch consumers, recorded as each returns."""
    looks: list[Any] = []
    open_watch = client.ready_watch

    def ready_watch(topic: str, group: str = "default") -> Any:
        watch = open_watch(topic, group)
        look = watch.look

        def recorded(*args: Any, **kwargs: Any) -> Any:
            looks.append(look(*args, **kwargs))
            return looks[-1]

        watch.look = recorded  # type: ignore[method-assign]
        return watch

    client.ready_watch = ready_watch  # type: ignore[method-assign]
    return looks


@pytest.fixture
def consumers() -> Iterator[Callable[..., rmq.Consumer]]:
    started: list[rmq.Consumer] = []

    def start(client: rmq.Client, topic: str, handler: Callable[..., Any],
              **options: Any) -> rmq.Consumer:
        consumer = rmq.Consumer(client, topic, handler, **IDLE, **options)
        started.append(consumer)
        return consumer.start()

    yield start
    for consumer in started:
        consumer.stop(grace=1)


def test_a_send_costs_a_ready_watch_one_script_call_however_many_slots(make_client,
                                                                        node_urls):
    client, producer = make_client(), make_client()
    client.create_topic("t", slots=256)
    producer.send("t", b"first")
    watch = client.ready_watch("t")
    try:
        assert watch.look(10).ready == 1
        before = script_calls(node_urls)
        producer.send("t", b"second")
        assert watch.wait(10)
        assert watch.look(10).ready == 2
        assert watch.look(10).ready == 2  # nothing written since: nothing read
        assert script_calls(node_urls) - before == 2  # the send, and its slot read again
    finally:
        watch.close()


def test_four_waiting_batch_consumers_cost_a_send_two_script_calls_on_256_slots(
        make_client, node_urls, consumers):
    producer = make_client()
    producer.create_topic("t", slots=256)
    producer.send("t", b"first")
    looks: list[Any] = []
    for _ in range(4):
        client = make_client()
        looks_of_client = recording_looks(client)
        looks.append(looks_of_client)
        consumers(client, "t", lambda batch: None, batch=1000, batch_wait_ms=WAIT_MS,
                  concurrency=1)
    wait_for(lambda: any(looks), what="a consumer looked")
    before = script_calls(node_urls)
    sends = 20
    for i in range(sends):
        producer.send("t", f"m{i}".encode())
        wait_for(lambda i=i: any(of[-1].ready == i + 2 for of in looks if of),
                 what=f"send {i} seen by the gathering consumer")
    assert script_calls(node_urls) - before <= 2 * sends
    assert sum(1 for of in looks if of) == 1  # one consumer gathered
    assert producer.stats("t").groups["default"].ready == sends + 1


@pytest.fixture
def long_lead(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lead's lease far longer than the test: the lead passes only when handed on."""
    monkeypatch.setattr("rmq.runtime.batches.LEAD_S", 120.0)


@pytest.mark.single_node
@pytest.mark.usefixtures("long_lead")
def test_a_consumer_with_no_room_for_another_batch_hands_the_gathering_on(make_client,
                                                                           consumers):
    producer = make_client()
    producer.create_topic("t", slots=4)
    gate = threading.Event()
    handled: list[list[bytes]] = []

    def handler(batch: list[rmq.Message]) -> None:
        handled.append([message.body for message in batch])
        assert gate.wait(10), "the test never opened the gate"

    started = [consumers(make_client(), "t", handler, batch=2, batch_wait_ms=WAIT_MS,
                         concurrency=1) for _ in range(2)]
    try:
        # The first consumer to claim runs one batch and holds the next (its room is 2):
        # the third batch is gathered and run by the other one.
        for n in range(3):
            producer.send_many("t", [f"b{n}-1".encode(), f"b{n}-2".encode()])
            wait_for(lambda n=n: producer.stats("t").groups["default"].ready == 0,
                     what=f"batch {n} claimed")
        # Each consumer runs one batch at a time: two run at once.
        wait_for(lambda: len(handled) == 2, what="two batches running at once")
    finally:
        gate.set()
    wait_for(lambda: sum(consumer.handled for consumer in started) == 6,
             what="every batch handled")


@pytest.mark.single_node
@pytest.mark.usefixtures("long_lead")
def test_a_stopping_consumer_hands_the_gathering_on_at_once(make_client, consumers):
    producer = make_client()
    producer.create_topic("t", slots=4)
    producer.send("t", b"first")
    clients = [make_client(), make_client()]
    looks = [recording_looks(client) for client in clients]
    handled: list[list[bytes]] = []
    started = [consumers(client, "t", lambda batch: handled.append(
        [message.body for message in batch]), batch=3, batch_wait_ms=WAIT_MS, concurrency=1)
        for client in clients]
    wait_for(lambda: any(looks), what="a consumer looked")
    leader = 0 if looks[0] else 1
    started[leader].stop(grace=1)
    producer.send_many("t", [b"second", b"third"])
    wait_for(lambda: handled, timeout=8, what="the other consumer took the batch")
    assert sorted(handled[0]) == [b"first", b"second", b"third"]
    # (its count rises once the batch settles, just after the handler returns)
    wait_for(lambda: started[1 - leader].handled == 3, what="the batch counted")


@pytest.mark.single_node
def test_a_watch_whose_tracking_connection_was_replaced_reads_every_slot_again(make_client,
                                                                               redis_url):
    client, producer = make_client(), make_client()
    client.create_topic("t", slots=4)
    producer.send("t", b"first")
    watch = client.ready_watch("t")
    try:
        assert watch.look(10).ready == 1
        (node,) = watch._nodes.values()
        with redis.Redis.from_url(redis_url) as admin:
            admin.client_kill_filter(_id=node.tracking_id)
        # What the killed connection tracked is forgotten: no word of this send comes.
        producer.send_many("t", [f"m{i}".encode() for i in range(8)])
        assert watch.look(10).ready == 9
    finally:
        watch.close()
