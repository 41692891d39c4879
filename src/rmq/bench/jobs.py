"""The measured work, as jobs for :mod:`rmq.bench.parallel`: RMQ through its public API, and
the references (Redis Streams and a raw merge-enqueue Lua call through redis-py)."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import shutil
import subprocess
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis

import rmq
from rmq.client.outgoing import prepare
from rmq.storage import queue
from rmq.storage.scripts import script

from .workload import Bodies

__all__ = ["open_client", "send_one_job", "send_threads_job", "send_tasks_job", "send_many_job",
           "claim_ack_job", "consumer_job", "paced_send_job", "redis_benchmark", "xadd_job",
           "xadd_one_job", "merge_lua_job", "enqueue_one_job", "xconsume_job",
           "MERGE_ENQUEUE_LUA", "CONSUME_TIMEOUT"]

CONSUME_TIMEOUT = 1800.0
# How often a consumer job adds its count to the shared one. Every wake-up of the counting
# thread takes the GIL from the consumer's own threads and slows what is measured; every
# 10 ms keeps that within the noise, and the end of a run is seen at most 10 ms late.
COUNT_EVERY = 0.01

# The reference for RMQ's enqueue: the least a merging enqueue can do in one Lua call
# (one zset, no priorities, delays, groups, counters or wake-ups).
#   KEYS[1]  zset of pending bodies
#   ARGV[1]  base score; ARGV[2..] bodies
# Returns how many bodies were already pending (merged).
MERGE_ENQUEUE_LUA = """
local merged = 0
local base = tonumber(ARGV[1])
for i = 2, #ARGV do
  if redis.call("ZSCORE", KEYS[1], ARGV[i]) then
    merged = merged + 1
  else
    redis.call("ZADD", KEYS[1], "NX", base + i, ARGV[i])
  end
end
return merged
"""


def open_client(url: str, replicas: int = 0) -> rmq.Client:
    """An rmq client (waiting for ``replicas`` after each write); the throughput server runs
    without persistence on purpose."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return rmq.Client(url, replicas=replicas, replica_timeout=10)


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


# -- RMQ ------------------------------------------------------------------------------------

def send_one_job(url: str, topic: str, bodies: Bodies) -> Callable[[], tuple[int, int]]:
    client, items = open_client(url), bodies.build()

    def run() -> tuple[int, int]:
        merged = sum(client.send(topic, body).merged for body in items)
        return len(items), merged

    return run


def send_threads_job(url: str, topic: str, bodies: Bodies,
                     threads: int) -> Callable[[], tuple[int, int]]:
    """``send`` one at a time from ``threads`` threads sharing one client (group commit)."""
    client, items = open_client(url), bodies.build()
    parts = [items[i::threads] for i in range(threads)]

    def run() -> tuple[int, int]:
        merged = [0] * threads

        def send(i: int) -> None:
            merged[i] = sum(client.send(topic, body).merged for body in parts[i])

        workers = [threading.Thread(target=send, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return len(items), sum(merged)

    return run


def send_tasks_job(url: str, topic: str, bodies: Bodies,
                   tasks: int) -> Callable[[], tuple[int, int]]:
    """``AsyncClient.send`` one at a time from ``tasks`` asyncio tasks (group commit)."""
    items = bodies.build()
    parts = [items[i::tasks] for i in range(tasks)]
    loop = asyncio.new_event_loop()
    client = loop.run_until_complete(_open_async(url, topic))

    async def send_all() -> int:
        async def send(part: list[bytes]) -> int:
            return sum([(await client.send(topic, body)).merged for body in part])

        return sum(await asyncio.gather(*(send(part) for part in parts)))

    def run() -> tuple[int, int]:
        try:
            return len(items), loop.run_until_complete(send_all())
        finally:
            loop.run_until_complete(client.close())
            loop.close()

    return run


async def _open_async(url: str, topic: str) -> rmq.AsyncClient:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        client = await rmq.AsyncClient.connect(url)
    await client.topic(topic)  # cached before the clock starts, as the sync client's is
    return client


def send_many_job(url: str, topic: str, bodies: Bodies, batch: int,
                  priority: int | None = None, replicas: int = 0
                  ) -> Callable[[], tuple[int, int]]:
    """``send_many`` ``batch`` bodies at a time (as option dicts when a priority is given)."""
    items: list[Any] = bodies.build()
    if priority is not None:
        items = [{"body": body, "priority": priority} for body in items]
    return send_items_job(url, topic, items, batch, replicas)


def send_items_job(url: str, topic: str, items: list[Any], batch: int, replicas: int = 0
                   ) -> Callable[[], tuple[int, int]]:
    """``send_many`` of ``items`` (bodies or dicts of send options) ``batch`` at a time;
    returns (sent, merged)."""
    client, chunks = open_client(url, replicas), _chunks(items, batch)

    def run() -> tuple[int, int]:
        sent = merged = 0
        for chunk in chunks:
            counts = client.send_many(topic, chunk)
            sent += counts.sent
            merged += counts.merged
        return sent, merged

    return run


def claim_ack_job(url: str, topic: str, count: int, keep: bool, ack_in_claim: bool = False,
                  replicas: int = 0) -> Callable[[], tuple[int, Counter[bytes]]]:
    """Claim ``count`` at a time and acknowledge, until nothing is ready: ``ack`` then
    ``claim`` (two round trips a batch), or with ``ack_in_claim`` each claim acknowledging
    the previous batch (``claim(..., ack=previous)``: one round trip)."""
    client = open_client(url, replicas)

    def run() -> tuple[int, Counter[bytes]]:
        seen: Counter[bytes] = Counter()
        done = 0
        finished: list[rmq.Message] = []
        while True:
            if ack_in_claim:
                messages = client.claim(topic, count=count, ack=finished)
            else:
                messages = client.claim(topic, count=count)
            if not messages:
                return done, seen
            if not ack_in_claim:
                client.ack(messages)
            finished = messages
            done += len(messages)
            if keep:
                seen.update(m.body for m in messages)

    return run


def consumer_job(url: str, topic: str, shared: tuple[Any, Any], target: int, concurrency: int,
                 use_async: bool, keep: bool, prefetch: int | None = None
                 ) -> Callable[[], tuple[int, Counter[bytes]]]:
    """The worker runtime with a no-op handler (``prefetch`` None: the Consumer's default),
    until the processes together have handled ``target`` messages (``shared`` = a
    multiprocessing Value and Event). The handler does nothing but note the body when
    ``keep``: this process's count is the consumer's own (acknowledged), added to the
    shared one every ``COUNT_EVERY`` seconds, so no handler run waits on a cross-process
    lock."""
    client = open_client(url)
    total, done = shared
    bodies: list[bytes] = []

    def handle(message: rmq.Message) -> None:
        if keep:
            bodies.append(message.body)

    async def handle_async(message: rmq.Message) -> None:
        if keep:
            bodies.append(message.body)

    def run() -> tuple[int, Counter[bytes]]:
        consumer = rmq.Consumer(client, topic, handle_async if use_async else handle,
                                concurrency=concurrency, prefetch=prefetch).start()
        reported, tick, deadline = 0, threading.Event(), time.monotonic() + CONSUME_TIMEOUT
        while not done.is_set() and time.monotonic() < deadline:
            tick.wait(COUNT_EVERY)
            handled = consumer.handled
            if handled != reported:
                with total.get_lock():
                    total.value += handled - reported
                    if total.value >= target:
                        done.set()
                reported = handled
        consumer.stop()
        return consumer.handled, Counter(bodies)

    return run


# -- references -----------------------------------------------------------------------------

def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def xadd_job(url: str, stream: str, bodies: Bodies, batch: int) -> Callable[[], int]:
    """Redis Streams in: XADD pipelined ``batch`` at a time."""
    r, chunks = _redis(url), _chunks(bodies.build(), batch)

    def run() -> int:
        for chunk in chunks:
            pipe = r.pipeline(transaction=False)
            for body in chunk:
                pipe.xadd(stream, {b"b": body})
            pipe.execute()
        return sum(len(c) for c in chunks)

    return run


def xadd_one_job(url: str, stream: str, bodies: Bodies) -> Callable[[], int]:
    """Redis Streams in, one ``XADD`` call per message (no pipeline: what a single ``send``
    is measured against; a pipeline of one costs redis-py more, which flattered the ratio)."""
    r, items = _redis(url), bodies.build()

    def run() -> int:
        for body in items:
            r.xadd(stream, {b"b": body})
        return len(items)

    return run


def merge_lua_job(url: str, zset: str, bodies: Bodies,
                  batch: int) -> Callable[[], tuple[int, int]]:
    """The raw merge-enqueue Lua call, ``batch`` bodies per call."""
    r, chunks = _redis(url), _chunks(bodies.build(), batch)
    script = r.register_script(MERGE_ENQUEUE_LUA)

    def run() -> tuple[int, int]:
        merged = 0
        for i, chunk in enumerate(chunks):
            merged += script(keys=[zset], args=[i * batch, *chunk])
        return sum(len(c) for c in chunks), merged

    return run


def enqueue_one_job(url: str, topic: str, bodies: Bodies) -> Callable[[], tuple[int, int]]:
    """RMQ's own enqueue.lua, one message per ``FCALL``, straight through redis-py: the calls a
    lone ``send`` makes, built before the clock starts, so the figure is the script and
    the round trip without RMQ's client (what a single send cannot go below)."""
    client, r = open_client(url), _redis(url)
    info, now = client.topic(topic), client.now()
    calls = []
    for body in bodies.build():
        op = queue.send(topic, info.generation, info.groups,
                        [prepare(info.settings, now, body)], now,
                        queue.keeps_heads(info.settings, not client.is_cluster))
        (call,) = next(op)
        assert call.script is not None
        calls.append(("FCALL", call.script.function, len(call.keys), *call.keys, *call.args))
    with contextlib.suppress(redis.ResponseError):  # another client loaded it already
        r.execute_command("FUNCTION", "LOAD", script("enqueue").library.source)

    def run() -> tuple[int, int]:
        merged = 0
        for args in calls:
            (flag,) = r.execute_command(*args)
            merged += flag
        return len(calls), merged

    return run


def xconsume_job(url: str, stream: str, group: str, name: str, count: int,
                 ack_in_read: bool = False) -> Callable[[], int]:
    """Redis Streams out: XREADGROUP ``count`` at a time, then XACK, until nothing is new;
    with ``ack_in_read`` the XACK of the previous batch is pipelined with the next read."""
    r = _redis(url)

    def run() -> int:
        done = 0
        ids: list[bytes] = []
        while True:
            if ack_in_read and ids:
                pipe = r.pipeline(transaction=False)
                pipe.xack(stream, group, *ids)
                pipe.xreadgroup(group, name, {stream: ">"}, count=count)
                reply = pipe.execute()[1]
            else:
                reply = r.xreadgroup(group, name, {stream: ">"}, count=count)
            if not reply or not reply[0][1]:
                return done
            ids = [entry_id for entry_id, _ in reply[0][1]]
            if not ack_in_read:
                r.xack(stream, group, *ids)
            done += len(ids)

    return run


def paced_send_job(url: str, topic: str, bodies: Bodies, rate: float,
                   batch: int) -> Callable[[], tuple[int, int]]:
    """Background load: ``send_many`` of ``batch`` bodies at ``rate`` messages/s."""
    client, chunks = open_client(url), _chunks(bodies.build(), batch)
    pause = threading.Event()

    def run() -> tuple[int, int]:
        start = time.monotonic()
        for k, chunk in enumerate(chunks):
            pause.wait(max(0.0, start + k * batch / rate - time.monotonic()))  # pacing
            client.send_many(topic, chunk)
        return sum(len(c) for c in chunks), 0

    return run


def redis_benchmark(server_port: int, requests: int, clients: int, pipeline: int,
                    *command: str) -> float:
    """``redis-benchmark`` on ``command`` (``__rand_int__`` is replaced by random numbers):
    requests/s, or NaN when the binary is not installed."""
    binary = shutil.which("redis-benchmark") or shutil.which("valkey-benchmark")
    if binary is None:
        return float("nan")
    done = subprocess.run([binary, "-h", "127.0.0.1", "-p", str(server_port), "-n", str(requests),
                           "-c", str(clients), "-P", str(pipeline), "-r", "1000000000", "--csv",
                           *command], capture_output=True, text=True, timeout=600, check=True)
    rows = list(csv.reader(done.stdout.splitlines()))
    return float(rows[-1][1])
