#!/usr/bin/env python3
"""What the Consumer's prefetch costs a high-priority message, in one run: HIGH messages sent
one at a time into a LOW backlog that a no-op Consumer drains, timed from just before
``send`` to the handler, with the former default prefetch (2 x concurrency) and with the
default (adaptive) one, round after round on the same redis-server of its own.

    bench/priority_under_prefetch.py [--backlog 150000] [--rounds 4] [--probes 50]

Each round starts a fresh backlog and consumer, so the first probe of a round meets the
adaptive consumer's large claims (docs/semantics.md, "Prefetch").
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

import rmq
from rmq.bench.jobs import open_client
from rmq.bench.workload import make_bodies, percentile
from rmq.server import RedisServer

CONCURRENCY = 8


def one_round(url: str, backlog: int, probes: int, prefetch: int | None) -> tuple[list[float],
                                                                                  float]:
    """Latencies (ms) of ``probes`` HIGH messages, and the LOW rate (msg/s) meanwhile."""
    with open_client(url) as producer, open_client(url) as client:
        producer.create_topic("t")
        bodies = make_bodies(b"low", 0, backlog, 100)
        for start in range(0, backlog, 500):
            producer.send_many("t", [{"body": b, "priority": rmq.Priority.LOW}
                                     for b in bodies[start:start + 500]])
        lock, arrived, low = threading.Lock(), {}, [0]

        def handle(message: rmq.Message) -> None:
            now = time.perf_counter()
            with lock:
                if message.priority == rmq.Priority.HIGH:
                    arrived[message.body] = now
                else:
                    low[0] += 1

        consumer = rmq.Consumer(client, "t", handle, concurrency=CONCURRENCY,
                                prefetch=prefetch).start()
        pause = threading.Event()
        try:
            pause.wait(0.3)  # pacing: the consumer is well into the backlog
            latencies, low_before, began = [], low[0], time.perf_counter()
            for i in range(probes):
                pause.wait(0.01)  # pacing between probes
                body = b"high-%d" % i
                sent = time.perf_counter()
                producer.send("t", body, priority=rmq.Priority.HIGH)
                while body not in arrived:
                    pause.wait(0.0002)
                latencies.append((arrived[body] - sent) * 1000)
            rate = (low[0] - low_before) / (time.perf_counter() - began)
        finally:
            consumer.stop()
        producer.delete_topic("t")
        return latencies, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=150_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--probes", type=int, default=50)
    args = parser.parse_args()
    kinds = {f"prefetch {2 * CONCURRENCY} (former default)": 2 * CONCURRENCY,
             "default (adaptive)": None}
    results: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in kinds}
    with tempfile.TemporaryDirectory() as data:
        server = RedisServer(data_dir=data, appendonly=False)
        server.start()
        try:
            for _ in range(args.rounds):
                for name, prefetch in kinds.items():
                    latencies, rate = one_round(server.url, args.backlog, args.probes, prefetch)
                    results[name][0].extend(latencies)
                    results[name][1].append(rate)
        finally:
            server.stop()
    for name, (latencies, rates) in results.items():
        print(f"{name}: HIGH send to handler p50 {percentile(latencies, 50):.2f} ms, p90 "
              f"{percentile(latencies, 90):.2f} ms, p99 {percentile(latencies, 99):.2f} ms, max "
              f"{max(latencies):.2f} ms; LOW meanwhile "
              f"{', '.join(f'{r / 1000:.1f}' for r in rates)} k/s")


if __name__ == "__main__":
    main()
