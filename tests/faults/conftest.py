"""Fixtures of the fault-injection suite: a ``Stage`` for each scenario of ``chaos``.

``RMQ_CHAOS_SIZE`` sets the number of messages of the large scenarios (default 1500 here, to
keep the suite within a couple of minutes; ``python -m chaos --size 100000`` is the full
run), and ``RMQ_CHAOS_SEED`` fixes the random fault points (each test prints the seed it
used).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from chaos.scenarios import Stage
from rmq.server import RedisServer


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("RMQ_CHAOS_SEED") or random.randrange(1 << 30))
    print(f"RMQ_CHAOS_SEED={seed}")
    return random.Random(seed)


@pytest.fixture
def stage(redis_url: str, tmp_path: Path, rng: random.Random) -> Stage:
    """A stage on the shared single node or cluster (``redis_url`` is parametrized)."""
    return Stage(redis_url, tmp_path, rng)


@pytest.fixture
def own_stage(fresh_server: Callable[..., RedisServer], tmp_path: Path,
              rng: random.Random) -> Callable[..., Stage]:
    """A stage on a server of the test's own, which the scenario may kill; keyword arguments
    go to :class:`RedisServer` (``appendfsync="always"``, ...)."""
    def make(**options: object) -> Stage:
        return Stage("", tmp_path, rng, fresh_server(**options))

    return make
