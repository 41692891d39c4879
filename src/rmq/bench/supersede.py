"""Supersede at work (SPEC §14, docs/semantics.md "Supersede and cancel"), for the ``newest``
scenario: how soon a running handler hears that a newer value was sent, and the founding
case's renders on a simulated GPU with and without supersede.

A render is ``message.wait_superseded(render)``: it takes ``render`` seconds unless its
delivery is superseded first, when it returns at once, as a render that checks the flag
between steps would stop. Its GPU-seconds are the time it ran."""

from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass

import rmq

from .jobs import open_client

__all__ = ["stop_latencies", "Render", "RenderPlan", "RenderRun", "render_run",
           "SUPERSEDE_LIMIT"]

WAIT = 30.0  # the longest a probe or a drain waits before the run fails
POLL = 0.02  # how often the drain looks at the group's counts
SUPERSEDE_LIMIT = 3  # the bind's default: after 3 supersedes in a row a render runs to its end


def stop_latencies(url: str, topic: str, probes: int) -> tuple[list[float], int]:
    """``probes`` times: a message is sent and its handler starts waiting with
    ``wait_superseded``; then a newer value of its key is sent, timed from just before that
    send to the handler's return from the wait (``time.perf_counter``, one process).
    Returns the latencies (ms) and how many of the waits returned superseded."""
    client = open_client(url)
    client.create_topic(topic, merge="key")
    client.bind(topic, "default", supersede=True)
    waiting: queue.Queue[rmq.Message] = queue.Queue()
    heard: queue.Queue[tuple[bool, float]] = queue.Queue()
    newer_handled: queue.Queue[bytes] = queue.Queue()

    def handle(message: rmq.Message) -> None:
        if message.body.startswith(b"newer"):
            newer_handled.put(message.body)
            return
        waiting.put(message)
        told = message.wait_superseded(WAIT)
        heard.put((told, time.perf_counter()))

    consumer = rmq.Consumer(client, topic, handle, concurrency=2).start()
    latencies, told_count = [], 0
    try:
        for n in range(probes):
            key = b"probe-%06d" % n
            client.send(topic, b"first", key=key)
            waiting.get(timeout=WAIT)
            start = time.perf_counter()
            client.send(topic, b"newer", key=key)
            told, at = heard.get(timeout=WAIT + 5)
            told_count += told
            latencies.append((at - start) * 1000)
            newer_handled.get(timeout=WAIT)  # the next probe starts with nothing running
    finally:
        consumer.stop()
        client.close()
    return latencies, told_count


@dataclass(frozen=True)
class RenderPlan:
    """The founding case in small: ``products`` are rendered once each; the first ``hot``
    of them get a new price every ``every`` seconds for ``seconds``; a render takes
    ``render`` seconds."""

    products: int
    hot: int
    seconds: float
    render: float
    every: float

    @property
    def changes(self) -> int:
        """How many times each hot product changes."""
        return round(self.seconds / self.every)

    @property
    def concurrency(self) -> int:
        """Enough handlers that no render waits for one: every product at once, and twice
        the renders of a hot product that can overlap (without supersede each change
        starts a render beside the ones running)."""
        return self.products + 2 * self.hot * math.ceil(self.render / self.every)


@dataclass(frozen=True)
class Render:
    """One handler run: the product (its key), the price it rendered, the seconds it ran,
    when it ended (``time.perf_counter``) and whether it stopped early, superseded."""

    product: bytes
    price: int
    seconds: float
    ended: float
    stopped: bool


@dataclass(frozen=True)
class RenderRun:
    """What a render run did: every handler run, each product's latest price as sent, the
    seconds from the first send to nothing pending or in flight, and the group's counters
    then."""

    renders: list[Render]
    latest: dict[bytes, int]
    changed_at: list[float]  # when each price of the hot products was sent (perf_counter)
    seconds: float
    counters: dict[str, int]

    @property
    def gpu_seconds(self) -> float:
        return sum(r.seconds for r in self.renders)

    @property
    def completed(self) -> int:
        return sum(not r.stopped for r in self.renders)

    @property
    def stopped(self) -> int:
        return sum(r.stopped for r in self.renders)

    @property
    def stale(self) -> int:
        """Completed renders of a price that a newer one had replaced before they ended:
        GPU time spent on an image already out of date."""
        return sum(not r.stopped and r.price < self.latest[r.product]
                   and self.changed_at[r.price + 1] < r.ended for r in self.renders)

    def last_completed(self) -> dict[bytes, int]:
        """Each product's price in its last completed render."""
        last: dict[bytes, Render] = {}
        for r in self.renders:
            if not r.stopped and (r.product not in last or r.ended > last[r.product].ended):
                last[r.product] = r
        return {product: r.price for product, r in last.items()}


def _key(product: int) -> bytes:
    return b"product-%06d" % product


def _item(product: int, price: int) -> dict[str, object]:
    return {"body": b"price=%09d" % price, "key": _key(product)}


def render_run(url: str, topic: str, plan: RenderPlan, supersede: bool) -> RenderRun:
    """The founding case on a topic merging by key whose group has ``supersede`` on or off:
    a Consumer of ``plan.concurrency`` renders; every product sent at price 0, then each hot
    product sent at price k at k × ``plan.every`` seconds; until nothing is left."""
    client = open_client(url)
    client.create_topic(topic, merge="key")
    client.bind(topic, "default", supersede=supersede,
                supersede_limit=SUPERSEDE_LIMIT if supersede else None)
    renders: list[Render] = []

    def render(message: rmq.Message) -> None:
        began = time.perf_counter()
        stopped = message.wait_superseded(plan.render)  # the GPU's work, or less
        ended = time.perf_counter()
        renders.append(Render(message.key or b"", int(message.body.split(b"=")[1]),
                              ended - began, ended, stopped))

    consumer = rmq.Consumer(client, topic, render, concurrency=plan.concurrency).start()
    latest = {_key(p): 0 for p in range(plan.products)}
    pace = threading.Event()  # never set: its wait paces the changes
    try:
        start = time.perf_counter()
        changed_at = [start]
        client.send_many(topic, [_item(p, 0) for p in range(plan.products)])
        for price in range(1, plan.changes + 1):
            pace.wait(max(0.0, start + price * plan.every - time.perf_counter()))
            changed_at.append(time.perf_counter())
            client.send_many(topic, [_item(p, price) for p in range(plan.hot)])
            latest.update({_key(p): price for p in range(plan.hot)})
        _drain(client, topic, time.perf_counter() + plan.render * 4 + WAIT)
        seconds = time.perf_counter() - start
    finally:
        consumer.stop()
    counters = dict(client.stats(topic).groups["default"].counters)
    client.close()
    return RenderRun(renders, latest, changed_at, seconds, counters)


def _drain(client: rmq.Client, topic: str, deadline: float) -> None:
    """Return once the group holds nothing pending or in flight; raise at ``deadline``."""
    tick = threading.Event()
    while time.perf_counter() < deadline:
        group = client.stats(topic).groups["default"]
        if group.pending == 0 and group.in_flight == 0:
            return
        tick.wait(POLL)
    raise RuntimeError(f"{topic}: renders still pending or running after the deadline")
