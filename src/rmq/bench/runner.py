"""``rmq bench``: options, the benchmark's own Redis server, and running the scenarios."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import traceback
from collections.abc import Sequence
from dataclasses import asdict, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import rmq
from rmq.extras import require
from rmq.server import RedisServer

from .context import FULL, QUICK, Bench, Progress, Sizes
from .report import Report, format_table, format_value, verdict, write
from .scenarios import SCENARIOS

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="rmq bench",
        description="Measure RMQ against Redis Streams and a raw merge-enqueue Lua call on a "
                    "redis-server of its own (loopback, no persistence). Each scenario prints "
                    "a table and writes <scenario>.json and <scenario>.png into --out.")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes (seconds per scenario) and exact correctness checks")
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help=f"comma-separated, from: {','.join(SCENARIOS)} (default: all)")
    p.add_argument("--out", default="bench-results", help="output folder (default: %(default)s)")
    p.add_argument("--verify", action="store_true",
                   help="count every body handled, to check exactly-once (on with --quick)")
    sizes = p.add_argument_group("sizes (defaults: full run; --quick shrinks them)")
    sizes.add_argument("--messages", type=int, help="messages of send and consume")
    sizes.add_argument("--merge-sends", type=int, help="sends of the merge scenario")
    sizes.add_argument("--backlog", type=int, help="low-priority backlog of the priority scenario")
    sizes.add_argument("--headline-size", type=int, help="sends of the headline run (5 M)")
    sizes.add_argument("--memory-messages", type=int, help="messages per kind in memory")
    sizes.add_argument("--scaling-max", type=int,
                       help="largest backlog of scaling (10000000 adds the 10 M point)")
    sizes.add_argument("--body-size", type=int, help="body bytes (default 100)")
    sizes.add_argument("--batch", type=int, help="send_many batch (default 500)")
    sizes.add_argument("--processes", type=int, help="processes of the 2-process variants")
    sizes.add_argument("--scale-processes", type=_positive, metavar="N",
                       help="scale-out: N producer and N consumer processes (default 2)")
    sizes.add_argument("--scale-masters", type=_masters, metavar="K[,K...]",
                       help="scale-out: masters of the cluster it starts, at least 3; several "
                            "(3,6,12) start one cluster each and draw the curve (default 3)")
    sizes.add_argument("--scale-slots", type=_slots, metavar="SLOTS",
                       help="scale-out: slots of its topics, on every server (default 64)")
    sizes.add_argument("--scale-messages", type=_positive,
                       help="scale-out: messages of each workload (default 300000)")
    p.add_argument("--redis-server", help="redis-server binary (default: found on PATH)")
    return p.parse_args(argv)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _masters(text: str) -> tuple[int, ...]:
    """Cluster sizes, in order, each once: ``redis-cli --cluster create`` builds no cluster of
    fewer than 3 masters."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() and int(part) >= 3 for part in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give masters as whole numbers of at least 3 (a Redis Cluster needs 3), "
            "comma-separated")
    return tuple(sorted({int(part) for part in parts}))


def _slots(text: str) -> int:
    """A topic's slots: a power of two from 1 to 1024 (SPEC), refused before any work."""
    slots = _positive(text)
    if slots > 1024 or slots & (slots - 1):
        raise argparse.ArgumentTypeError(f"{text!r}: slots must be a power of two, 1 to 1024")
    return slots


def sizes_from(args: argparse.Namespace) -> Sizes:
    sizes = QUICK if args.quick else FULL
    overrides = {"send": args.messages, "consume": args.messages, "merge": args.merge_sends,
                 "priority_backlog": args.backlog, "headline": args.headline_size,
                 "memory": args.memory_messages, "body_size": args.body_size,
                 "batch": args.batch, "processes": args.processes,
                 "scale_processes": args.scale_processes, "scale_masters": args.scale_masters,
                 "scale_slots": args.scale_slots, "scale_messages": args.scale_messages}
    sizes = replace(sizes, **{k: v for k, v in overrides.items() if v is not None})
    if args.scaling_max:
        points, n = [], sizes.scaling[0]
        while n <= args.scaling_max:
            points.append(n)
            n *= 10
        sizes = replace(sizes, scaling=tuple(points))
    if sizes.body_size < 24:
        raise SystemExit("rmq bench: --body-size must be at least 24 bytes")
    return sizes


def environment(server: RedisServer, quick: bool, sizes: Sizes) -> dict[str, Any]:
    info = server.info("server")
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": platform.machine(), "cpus": os.cpu_count(),
            "system": platform.platform(), "python": platform.python_version(),
            "redis_server": info.get("redis_version"), "rmq": getattr(rmq, "__version__", None),
            "quick": quick, "sizes": {f.name: getattr(sizes, f.name) for f in fields(sizes)}}


def _run_one(name: str, bench: Bench, out: Path, env: dict[str, Any]) -> Report | None:
    bench.progress.scenario = name
    bench.fresh()
    try:
        report = SCENARIOS[name](bench)
    except Exception:  # noqa: BLE001 - one broken scenario must not hide the others
        bench.progress.say(f"FAILED:\n{traceback.format_exc()}")
        return None
    report.resolve_ratios()
    if bench.quick:
        report.waive_targets()
    print(format_table(report) + "\n", flush=True)
    for path in write(report, out, env):
        bench.progress.say(f"wrote {path}")
    return report


def summary_rows(reports: list[Report]) -> list[dict[str, Any]]:
    rows = []
    for report in reports:
        for fig in report.figures:
            for target in fig.targets:
                rows.append({"scenario": report.scenario, "figure": fig.name,
                             "value": fig.value, "unit": fig.unit, "target": target.text,
                             "met": target.met, "ratios": fig.ratios})
    return rows


def _with_earlier_rows(summary: Path, names: list[str], rows: list[dict[str, Any]]
                       ) -> list[dict[str, Any]]:
    """``rows`` plus the targets of scenarios an earlier run wrote into the same folder and
    this run did not repeat (a scenario re-run on its own replaces only its own rows)."""
    if not summary.exists():
        return rows
    earlier = [row for row in json.loads(summary.read_text())["targets"]
               if row["scenario"] not in names and row["scenario"] in SCENARIOS]
    order = list(SCENARIOS)
    return sorted(earlier + rows, key=lambda row: order.index(row["scenario"]))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns the exit status (1 when a correctness check failed)."""
    args = parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"rmq bench: unknown scenario(s) {', '.join(unknown)}; "
              f"choose from {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    sizes = sizes_from(args)
    require("bench")  # the charts need it: say so before any scenario runs
    out = Path(args.out)
    progress = Progress()
    reports: list[Report] = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rmq-bench-") as data_dir:
        server = RedisServer(data_dir=data_dir, appendonly=False, binary=args.redis_server)
        server.start()
        try:
            bench = Bench(server, sizes, args.quick, args.verify or args.quick, progress)
            env = environment(server, args.quick, sizes)
            try:
                for name in names:
                    report = _run_one(name, bench, out, env)
                    if report is None or not report.ok:
                        failed.append(name)
                    if report is not None:
                        reports.append(report)
            finally:
                bench.close()
        finally:
            server.stop()
    rows = _with_earlier_rows(out / "summary.json", names, summary_rows(reports))
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(
        {"environment": env, "targets": rows, "failed": failed,
         "sizes": asdict(sizes)}, indent=2, ensure_ascii=False, default=str) + "\n")
    if rows:
        print("== targets ==")
        if args.quick:
            print("(not judged: --quick runs tiny sizes and checks correctness only)")
        for row in rows:
            print(f"{verdict(row['met']):<6} {row['scenario']}: {row['figure']} = "
                  f"{format_value(row['value'], row['unit'])} (target {row['target']})")
    if failed:
        print(f"rmq bench: correctness checks failed in: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
