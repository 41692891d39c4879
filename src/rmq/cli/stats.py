"""``rmq stats TOPIC``: backlog by state and priority, counters, per-slot heat; live with
``--watch``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..storage.stats import TopicStats
from .common import CommandError, age, at_least_one, open_client, print_json, seconds, table

__all__ = ["add_parsers"]


def render(stats: TopicStats, previous: TopicStats | None, interval: float,
           slots: bool) -> str:
    """The stats as text; with ``previous`` (``interval`` seconds older), rates per second."""
    lines = [f"topic {stats.topic}{'  (paused)' if stats.paused else ''}"]
    headers = ["group", "ready", "delayed", "in flight", "dead", "oldest ready", "sent",
               "merged", "merge %", "acked", "retried", "dead-lettered"]
    if previous is not None:
        headers += ["sent/s", "acked/s"]
    rows = []
    for name, group in stats.groups.items():
        c = group.counters
        row = [name, group.ready, group.delayed, group.in_flight, group.dead,
               age(group.oldest_ready_ms), c["sent"], c["merged"],
               round(100 * c["merged"] / c["sent"], 1) if c["sent"] else 0.0, c["acked"],
               c["retried"], c["dead"]]
        if previous is not None:
            before = previous.groups.get(name)
            for counter in ("sent", "acked"):
                delta = c[counter] - (before.counters[counter] if before else 0)
                row.append(round(delta / interval, 1))
        rows.append(row)
    lines.append(table(headers, rows))
    for name, group in stats.groups.items():
        if group.ready_by_priority:
            bands = "  ".join(f"p{p}: {n}" for p, n in group.ready_by_priority.items())
            lines.append(f"ready by priority ({name}): {bands}")
    if slots:
        for name, group in stats.groups.items():
            lines.append(f"\nslots of {name}:")
            lines.append(table(["slot", "ready", "delayed", "in flight", "dead", "oldest ready",
                                "sent", "acked"],
                               [[s.slot, s.ready, s.delayed, s.in_flight, s.dead,
                                 age(s.oldest_ready_ms), s.counters["sent"],
                                 s.counters["acked"]] for s in group.slots]))
    return "\n".join(lines)


def stats(args: argparse.Namespace) -> None:
    if args.count and not args.watch:
        raise CommandError("--count counts the refreshes of --watch: give --watch SECONDS too")
    with open_client(args) as client:
        previous = None
        shown = 0
        tty = sys.stdout.isatty()
        while True:
            current = client.stats(args.topic)
            if args.json:
                print_json({"at": round(time.time(), 3), **current.to_dict()})
            else:
                text = render(current, previous, args.watch or 1.0, args.slots)
                if args.watch and tty:
                    sys.stdout.write("\x1b[H\x1b[2J")  # redraw in place
                elif shown:
                    print()
                print(text, flush=True)
            shown += 1
            if not args.watch or (args.count and shown >= args.count):
                return
            previous = current
            time.sleep(args.watch)


def add_parsers(commands: Any) -> None:
    p = commands.add_parser("stats", help="backlog, counters and rates of a topic",
                            description="Per group: ready, delayed, in flight, dead, oldest "
                                        "ready age and the counters; --watch refreshes live.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--json", action="store_true",
                   help="print JSON (one object per line with --watch)")
    p.add_argument("--slots", action="store_true", help="also show each slot")
    p.add_argument("--watch", type=seconds(0.01), metavar="SECONDS",
                   help="refresh every SECONDS until Ctrl-C, with rates")
    p.add_argument("--count", type=at_least_one, metavar="N",
                   help="with --watch: stop after N refreshes")
    p.set_defaults(run=stats)
