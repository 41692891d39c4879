"""``python -m chaos`` (``./dev chaos``): run the fault-injection scenarios on throwaway Redis
servers and print each one's ledger (every message sent accounted for as acknowledged,
pending, in flight or dead).

Each scenario starts real processes and breaks them for real (see ``chaos``); the
servers live in a temporary directory and are stopped at the end. ``--size`` sets the
number of messages of the large scenarios (default ``$RMQ_CHAOS_SIZE``, else 2000); the
full run is ``python -m chaos --size 100000``. Exits 1 if any promise was broken.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rmq.server import RedisServer
from rmq.server.cluster import Cluster

from .failover import master_failover
from .scenarios import (
    Outcome,
    Stage,
    clock_skew,
    frozen_consumer,
    network_cuts,
    poison_messages,
    redis_restarts,
    slow_handler,
    worker_kills,
)

__all__ = ["SCENARIOS", "CLUSTER_SCENARIOS", "main", "default_size", "scale"]

SCENARIOS = ("worker-kills", "redis-restarts", "network-cuts", "slow-handler",
             "frozen-consumer", "poison", "clock-skew")
CLUSTER_SCENARIOS = ("cluster-worker-kills", "cluster-failover")


def default_size() -> int:
    """``$RMQ_CHAOS_SIZE``, else 2000 messages."""
    return int(os.environ.get("RMQ_CHAOS_SIZE") or 2000)


def scale(size: int) -> dict[str, Any]:
    """Settings that keep a run of ``size`` messages meaningful: kills spread over it, each
    handling slow enough for small runs to outlast the kills, sends batched on large runs."""
    return {"kills": max(5, size // 10_000), "work_ms": max(1.0, min(20.0, 40_000 / size)),
            "batch": max(1, size // 2000)}


def _run_single(name: str, size: int, rng: random.Random, root: Path, slots: int) -> Outcome:
    knobs = scale(size)
    durable = name == "redis-restarts"  # the promise is made for appendfsync always
    server = RedisServer(data_dir=root / f"redis-{name}",
                         appendfsync="always" if durable else "everysec").start()
    try:
        stage = Stage(server.url, root / name, rng, server, slots)
        runs: dict[str, Callable[[], Outcome]] = {
            "worker-kills": lambda: worker_kills(stage, size, knobs["kills"],
                                                 work_ms=knobs["work_ms"]),
            "redis-restarts": lambda: redis_restarts(stage, size, batch=knobs["batch"]),
            "network-cuts": lambda: network_cuts(stage, size, batch=knobs["batch"]),
            "slow-handler": lambda: slow_handler(stage),
            "frozen-consumer": lambda: frozen_consumer(stage),
            "poison": lambda: poison_messages(stage),
            "clock-skew": lambda: clock_skew(stage, min(size, 5000)),
        }
        return runs[name]()
    finally:
        server.stop()


def _run_cluster(names: list[str], size: int, rng: random.Random, root: Path,
                 report: Callable[[Outcome], None]) -> None:
    knobs = scale(size)
    with Cluster(3, replicas=1, data_dir=root / "cluster") as cluster:
        if "cluster-worker-kills" in names:
            stage = Stage(cluster.url, root / "cluster-kills", rng)
            outcome = worker_kills(stage, size, knobs["kills"], work_ms=knobs["work_ms"])
            outcome.name = "cluster-worker-kills"
            report(outcome)
        if "cluster-failover" in names:  # last: it leaves the cluster one master short
            stage = Stage(cluster.url, root / "cluster-failover", rng)
            report(master_failover(stage, cluster, size, batch=knobs["batch"]))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m chaos", description="Inject real faults (killed workers, a killed Redis, "
        "network cuts, frozen consumers, poison messages, clients whose clocks are 10 minutes "
        "apart) and account for every message.")
    parser.add_argument("--size", type=int, default=default_size(),
                        help="messages in the large scenarios (default $RMQ_CHAOS_SIZE or "
                             "2000; the full run is 100000)")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS + CLUSTER_SCENARIOS,
                        help="run only these (repeatable); default: every single-node one")
    parser.add_argument("--cluster", action="store_true",
                        help="also run the Redis Cluster scenarios (3 masters, 1 replica each)")
    parser.add_argument("--slots", type=int, default=8,
                        help="slots of the single-node scenarios' topics (default 8; more than "
                             "16 claims through the heads index)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random fault points")
    parser.add_argument("--json", metavar="FILE", help="also write the outcomes to FILE as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the chosen scenarios; print each ledger; 0 if every promise held, else 1."""
    args = _parse(argv)
    if args.size < 100:
        print("chaos: --size must be at least 100", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    names = args.scenario or list(SCENARIOS) + (list(CLUSTER_SCENARIOS) if args.cluster else [])
    root = Path(tempfile.mkdtemp(prefix="rmq-chaos-"))
    outcomes: list[Outcome] = []

    def report(outcome: Outcome) -> None:
        outcomes.append(outcome)
        print(outcome.report(), flush=True)

    print(f"chaos: size {args.size}, seed {seed}, work in {root}", flush=True)
    started = time.monotonic()
    try:
        for name in names:
            if name in SCENARIOS:
                print(f"running {name} ...", flush=True)
                report(_run_single(name, args.size, rng, root, args.slots))
        cluster_names = [n for n in names if n in CLUSTER_SCENARIOS]
        if cluster_names:
            print(f"running {', '.join(cluster_names)} on a fresh cluster ...", flush=True)
            _run_cluster(cluster_names, args.size, rng, root, report)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    failed = [o.name for o in outcomes if not o.ok]
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} scenarios kept every promise "
          f"in {time.monotonic() - started:.0f} s" + (f"; FAILED: {', '.join(failed)}"
                                                       if failed else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"size": args.size, "seed": seed,
             "outcomes": [{"name": o.name, "ok": o.ok, "seconds": round(o.seconds, 2),
                           "ledger": {k: v for k, v in o.ledger.to_dict().items()
                                      if k != "missing_bodies"},
                           "figures": o.figures, "problems": o.problems} for o in outcomes]},
            indent=2, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
