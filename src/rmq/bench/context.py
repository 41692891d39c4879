"""What a scenario works with: the sizes of the work, progress lines, and the :class:`Bench`
(the benchmark's own server, a client, the output folder)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis

import rmq
from rmq.server import RedisServer

from .jobs import open_client

__all__ = ["Sizes", "QUICK", "FULL", "Bench", "Progress"]


@dataclass(frozen=True)
class Sizes:
    """How much work each scenario does (``--quick`` uses :data:`QUICK`)."""

    body_size: int = 100
    batch: int = 500
    processes: int = 2
    send: int = 300_000
    send_single: int = 30_000
    merge: int = 1_000_000
    duplicate_share: float = 0.82
    consume: int = 300_000
    replicated: int = 100_000
    concurrency: int = 8
    priority_backlog: int = 1_000_000
    priority_probes: int = 100
    priority_burst: int = 1_000
    wake_probes: int = 200
    idle_gap_ms: float = 20.0
    delay_messages: int = 300
    delay_max_ms: int = 2_000
    delay_load: int = 10_000
    supersede_probes: int = 300
    render_products: int = 200  # newest's renders: 5 % of them hot
    render_s: float = 2.0  # a render's length, when nothing supersedes it
    change_every_s: float = 0.5  # how often each hot product's price changes
    changing_s: float = 20.0  # for how long
    memory: int = 100_000
    headline: int = 5_000_000
    reference_cap: int = 1_000_000
    scaling: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    scaling_rounds: int = 50
    scale_messages: int = 300_000
    scale_processes: int = 2
    scale_masters: tuple[int, ...] = (3,)
    scale_slots: int = 64


FULL = Sizes()
QUICK = Sizes(send=5_000, send_single=1_000, merge=10_000, consume=4_000, replicated=2_000,
              priority_backlog=20_000, priority_probes=10, priority_burst=100, wake_probes=20,
              idle_gap_ms=5.0, delay_messages=30, delay_max_ms=300, delay_load=2_000,
              supersede_probes=30, render_products=20, render_s=0.4, change_every_s=0.1,
              changing_s=2.0,
              memory=3_000, headline=20_000, reference_cap=20_000, scaling=(1_000, 3_000, 10_000),
              scaling_rounds=5, scale_messages=3_000)


class Progress:
    """Progress lines on stderr, so stdout keeps only the tables."""

    def __init__(self, stream: Any = None):
        self.stream = stream or sys.stderr
        self.scenario = ""

    def say(self, text: str) -> None:
        print(f"[{self.scenario}] {text}", file=self.stream, flush=True)

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        self.say(f"{text} ...")
        start = time.perf_counter()
        yield
        self.say(f"{text}: {time.perf_counter() - start:.2f} s")


class Bench:
    """What a scenario gets: the server, sizes, a client, progress, and the output folder."""

    def __init__(self, server: RedisServer, sizes: Sizes, quick: bool, verify: bool,
                 progress: Progress):
        self.server, self.sizes, self.quick, self.verify = server, sizes, quick, verify
        self.url = server.url
        self.progress = progress
        self.client = open_client(self.url)
        self.redis = redis.Redis.from_url(self.url)

    def fresh(self) -> None:
        """Empty the benchmark's own server (never any other) between measurements."""
        self.redis.flushall(asynchronous=True)  # a 10 M backlog takes Redis long to free
        self.client.close()
        self.client = open_client(self.url)  # forget cached topics

    def group_stats(self, topic: str) -> rmq.GroupStats:
        return self.client.stats(topic).groups["default"]

    def used_memory(self) -> int:
        return int(self.redis.info("memory")["used_memory"])

    def close(self) -> None:
        self.client.close()
        self.redis.close()
