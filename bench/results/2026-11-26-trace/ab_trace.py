"""Redis's time per message in the scripts (``INFO commandstats``), trace off against on,
alternating on one server: ``send_many`` of sends that all merge (each body sent once
before), then ``claim(100)`` + ``ack`` until nothing is left; three rounds.

    PYTHONPATH=src python bench/results/2026-11-26-trace/ab_trace.py [MESSAGES]
"""

from __future__ import annotations

import sys
import time

import redis

import rmq
from rmq.server import RedisServer


def script_us(raw: redis.Redis) -> float:
    stats = raw.info("commandstats")
    raw.config_resetstat()
    return sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_fcall"))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    rows: dict[bool, list[str]] = {False: [], True: []}
    with RedisServer(appendonly=False) as server, rmq.Client(server.url) as client:
        raw = redis.Redis.from_url(server.url)
        bodies = [b"t-%09d-" % i + b"x" * 88 for i in range(n)]
        for _ in range(3):
            for traced in (False, True):
                for name in client.topics():
                    client.delete_topic(name)
                client.create_topic("t", trace=traced)
                for i in range(0, n, 500):
                    client.send_many("t", bodies[i:i + 500])
                script_us(raw)
                began = time.perf_counter()
                for i in range(0, n, 500):
                    client.send_many("t", bodies[i:i + 500])
                send = (script_us(raw) / n, n / (time.perf_counter() - began))
                began = time.perf_counter()
                while batch := client.claim("t", count=100):
                    client.ack(batch)
                claim = (script_us(raw) / n, n / (time.perf_counter() - began))
                rows[traced].append(f"send_many {send[0]:.2f} µs {send[1] / 1000:.0f} k/s, "
                                    f"claim+ack {claim[0]:.2f} µs {claim[1] / 1000:.0f} k/s")
    for traced, figures in rows.items():
        print(f"trace {'on' if traced else 'off'}: " + " | ".join(figures))


if __name__ == "__main__":
    main()
