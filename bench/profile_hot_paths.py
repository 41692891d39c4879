#!/usr/bin/env python3
"""Profiles of the hot paths behind missed benchmark targets, written to bench/profiles/.

Each profile runs against a redis-server of its own (no persistence) and records both sides:
the Python client (cProfile, top functions by own time and by cumulative time) and the server
(``INFO commandstats``: calls and µs per call of every command, scripts included).

    bench/profile_hot_paths.py [--messages 50000] [--out bench/profiles]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

import rmq
from rmq.bench.jobs import open_client
from rmq.bench.workload import make_bodies
from rmq.server import RedisServer


def _commandstats(r: redis.Redis) -> str:
    stats = r.info("commandstats")
    rows = sorted(stats.items(), key=lambda kv: -kv[1]["usec"])
    lines = [f"{'command':<32} {'calls':>9} {'usec':>11} {'usec/call':>10}"]
    for name, v in rows[:15]:
        lines.append(f"{name.removeprefix('cmdstat_'):<32} {v['calls']:>9} {v['usec']:>11} "
                     f"{v['usec_per_call']:>10}")
    return "\n".join(lines)


def _profile(name: str, out: Path, url: str, setup: Callable[[rmq.Client], Any],
             work: Callable[[rmq.Client, Any], int], note: str,
             extra: io.StringIO | None = None) -> None:
    extra = extra or io.StringIO()
    client = open_client(url)
    r = redis.Redis.from_url(url)
    r.flushall()
    state = setup(client)
    r.config_resetstat()
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    done = work(client, state)
    profiler.disable()
    seconds = time.perf_counter() - start
    text = io.StringIO()
    text.write(f"# {name}\n{note}\n{extra.getvalue()}\n")
    text.write(f"{done} messages in {seconds:.2f} s under cProfile = {done / seconds:,.0f} "
               "msg/s (cProfile slows Python; the ratios matter)\n\n")
    text.write("## Redis server side (INFO commandstats)\n" + _commandstats(r) + "\n\n")
    for order in ("tottime", "cumulative"):
        text.write(f"## Python client side, top 25 by {order}\n")
        stats = pstats.Stats(profiler, stream=text)
        stats.strip_dirs().sort_stats(order).print_stats(25)
    (out / f"{name}.txt").write_text(text.getvalue())
    print(f"wrote {out / name}.txt ({done / seconds:,.0f} msg/s under cProfile)", file=sys.stderr)
    client.close()
    r.close()


def _claim_by_slots(out: Path, url: str, n: int) -> None:
    """Server time per claimed message of claim(100) and of its ack, by the topic's slots: a
    claim on a single node reads ``count`` candidates from every slot and sorts them."""
    client, r = open_client(url), redis.Redis.from_url(url)
    bodies = make_bodies(b"s", 0, n, 100)
    lines = ["# claim_by_slots", "Redis server time (INFO commandstats, evalsha usec) per "
             "message of claim(count=100) and of acknowledging them, by topic slots; "
             "50 rounds each, in one run.", ""]
    for slots in (1, 2, 4, 8, 16):
        r.flushall()
        client.create_topic(f"slots{slots}", slots=slots)
        for i in range(0, n, 500):
            client.send_many(f"slots{slots}", bodies[i:i + 500])
        claim_us = ack_us = 0
        for _ in range(50):
            r.config_resetstat()
            messages = client.claim(f"slots{slots}", count=100)
            claim_us += r.info("commandstats")["cmdstat_evalsha"]["usec"]
            r.config_resetstat()
            client.ack(messages)
            ack_us += r.info("commandstats")["cmdstat_evalsha"]["usec"]
        lines.append(f"slots={slots:<3} claim(100): {claim_us / 5000:6.1f} µs/message   "
                     f"ack: {ack_us / 5000:5.1f} µs/message")
    (out / "claim_by_slots.txt").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'claim_by_slots.txt'}", file=sys.stderr)
    client.close()
    r.close()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--out", default=str(Path(__file__).parent / "profiles"))
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n = args.messages
    bodies = make_bodies(b"p", 0, n, 100)

    def topic(client: rmq.Client, fill: int = 0) -> None:
        client.create_topic("profile")
        for i in range(0, fill, 500):
            client.send_many("profile", bodies[i:min(fill, i + 500)])

    def send_one(client: rmq.Client, _: Any) -> int:
        for body in bodies[: n // 10]:
            client.send("profile", body)
        return n // 10

    def send_many(client: rmq.Client, _: Any) -> int:
        for i in range(0, n, 500):
            client.send_many("profile", bodies[i:i + 500])
        return n

    def claim_ack(client: rmq.Client, _: Any) -> int:
        done = 0
        while messages := client.claim("profile", count=100):
            client.ack(messages)
            done += len(messages)
        return done

    def consumer(client: rmq.Client, _: Any) -> int:
        finished, lock, count = threading.Event(), threading.Lock(), [0]
        asked: Counter[int] = Counter()
        claim_until = client.claim_until

        def counted_claim(topic: str, group: str, count_: int, **kw: Any) -> Any:
            asked[count_] += 1
            return claim_until(topic, group, count_, **kw)

        client.claim_until = counted_claim  # type: ignore[method-assign]

        def handle(message: rmq.Message) -> None:
            with lock:
                count[0] += 1
                if count[0] == n:
                    finished.set()

        worker = rmq.Consumer(client, "profile", handle, concurrency=8).start()
        finished.wait(600)
        worker.stop()
        calls = sum(asked.values())
        print(f"claims made by the Consumer's fetcher: {calls}, {count[0] / calls:.1f} "
              f"messages per claim; requested counts: {sorted(asked.items())}", file=note)
        return count[0]

    note = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="rmq-profile-") as data_dir:
        server = RedisServer(data_dir=data_dir, appendonly=False).start()
        try:
            _profile("send_one", out, server.url, topic, send_one,
                     f"client.send one at a time, {n // 10} distinct 100-byte bodies")
            _profile("send_many", out, server.url, topic, send_many,
                     f"client.send_many, batches of 500, {n} distinct 100-byte bodies")
            _profile("claim_ack", out, server.url, lambda c: topic(c, n), claim_ack,
                     f"claim(count=100) then ack, until {n} pending messages are gone")
            _profile("consumer_threads", out, server.url, lambda c: topic(c, n), consumer,
                     f"rmq.Consumer, 8 threads, no-op handler, {n} pending messages "
                     "(cProfile sees the main thread only: the server side and the claim "
                     "sizes tell the story)", note)
            _claim_by_slots(out, server.url, max(n, 6_000))
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
