"""``rmq stats TOPIC``: backlog by state and priority, counters, per-slot heat; live with
``--watch`` (a Rich view redrawn in place on a terminal; plain frames into a pipe)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rmq import GroupStats, TopicStats

from .common import (
    CommandError,
    age,
    at_least_one,
    open_client,
    print_json,
    priority_name,
    seconds,
    table,
)
from .limits import describe

__all__ = ["add_parsers"]


def _oldest(ready: int, oldest_ready_ms: int) -> str:
    # With nothing ready there is no oldest: "0ms" would read as a message just arrived.
    return age(oldest_ready_ms) if ready else "–"


def shown_groups(stats: TopicStats, bound: tuple[str, ...]) -> dict[str, GroupStats]:
    """The groups worth a row: the ``bound`` ones, and any other still holding messages or
    having counted some (``default`` is always in the stats, bound or not)."""
    return {name: g for name, g in stats.groups.items()
            if name in bound or g.pending or g.in_flight or g.dead or any(g.counters.values())}


def in_flight(group: GroupStats) -> str:
    """In flight as "used/max" of the group's max_in_flight, else the live deliveries;
    those whose lease ran out (not recovered yet) are counted apart, in ``expired``."""
    limit = group.limits.max_in_flight
    if limit is not None and group.limit_in_use is not None:
        return f"{group.limit_in_use}/{limit}"
    return str(group.in_flight - group.expired)


def handler_line(group: GroupStats) -> str | None:
    """How long the group's handlers ran, as its consumers report it (None: no runs)."""
    times = group.handler_times
    if times is None or not times.count:
        return None

    def bound(q: float) -> str:
        value = times.quantile(q)
        return "> 600s" if value == float("inf") else f"≤ {value:g}s"

    return (f"handler time ({group.group}): {times.count} runs, mean "
            f"{times.seconds / times.count:.3g}s, p50 {bound(0.5)}, p95 {bound(0.95)}")


def transactions_line(stats: TopicStats) -> str | None:
    tx = stats.transactions
    if not (tx.open or tx.halves or tx.committed or tx.rolled_back or tx.abandoned):
        return None
    return (f"transactions: {tx.open} open holding {tx.halves} half messages; slot commits "
            f"{tx.committed}, rollbacks {tx.rolled_back}; {tx.abandoned} abandoned")


HEADERS = ["group", "ready", "delayed", "in flight", "expired", "dead", "oldest ready", "sent",
           "merged", "merge %", "filtered", "acked", "retried", "dead-lettered", "superseded",
           "cancelled", "outdated"]
# Counted only once they happen (SPEC §14): a group's counters may not name them yet.
STOPS = ("superseded", "cancelled", "outdated")


def render(stats: TopicStats, previous: TopicStats | None, interval: float,
           slots: bool, bound: tuple[str, ...] = ()) -> str:
    """The stats as text; with ``previous`` (``interval`` seconds older), rates per second.
    ``bound``: the topic's groups (another group is shown only while it holds something)."""
    lines = [f"topic {stats.topic}{'  (paused)' if stats.paused else ''}"]
    headers = list(HEADERS)
    if previous is not None:
        headers += ["sent/s", "acked/s"]
    rows = []
    groups = shown_groups(stats, bound)
    for name, group in groups.items():
        c = group.counters
        row = [name, group.ready, group.delayed, in_flight(group), group.expired, group.dead,
               _oldest(group.ready, group.oldest_ready_ms), c["sent"], c["merged"],
               round(100 * c["merged"] / c["sent"], 1) if c["sent"] else 0.0, c["filtered"],
               c["acked"], c["retried"], c["dead"], *(c.get(name, 0) for name in STOPS)]
        if previous is not None:
            before = previous.groups.get(name)
            for counter in ("sent", "acked"):
                delta = c[counter] - (before.counters[counter] if before else 0)
                row.append(round(delta / interval, 1))
        rows.append(row)
    lines.append(table(headers, rows))
    for name, group in groups.items():
        if group.ready_by_priority:
            bands = "  ".join(f"{priority_name(p)}: {n}"
                              for p, n in group.ready_by_priority.items())
            lines.append(f"ready by priority ({name}): {bands}")
        if not group.limits.unlimited:
            lines.append(f"limits ({name}): {describe(group.limits)}")
        if (line := handler_line(group)) is not None:
            lines.append(line)
    if (line := transactions_line(stats)) is not None:
        lines.append(line)
    if slots:
        for name, group in groups.items():
            lines.append(f"\nslots of {name}:")
            lines.append(table(["slot", "ready", "delayed", "in flight", "expired", "dead",
                                "oldest ready", "sent", "acked"],
                               [[s.slot, s.ready, s.delayed, s.in_flight - s.expired,
                                 s.expired, s.dead, _oldest(s.ready, s.oldest_ready_ms),
                                 s.counters["sent"], s.counters["acked"]]
                                for s in group.slots]))
    return "\n".join(lines)


BUSIEST_SLOTS = 16  # slots the live view lists (the busiest): it must fit a terminal


def _rates(current: TopicStats, previous: TopicStats | None, name: str,
           interval: float) -> list[str]:
    if previous is None:
        return ["–", "–"]
    before = previous.groups.get(name)
    now = current.groups[name].counters
    return [f"{(now[c] - (before.counters[c] if before else 0)) / interval:,.1f}"
            for c in ("sent", "acked")]


def view(current: TopicStats, previous: TopicStats | None, interval: float,
         slots: bool, bound: tuple[str, ...] = ()) -> Group:
    """The live view: one row per group, ready by priority, and with ``slots`` the busiest
    slots (a topic may have 1024)."""
    title = Text.assemble((f"topic {current.topic}", "bold"),
                          ("  paused" if current.paused else "", "bold yellow"),
                          (f"  every {interval:g}s · {time.strftime('%H:%M:%S')}", "dim"))
    groups = Table(box=None, header_style="bold", pad_edge=False)
    for header in (*HEADERS, "sent/s", "acked/s"):
        groups.add_column(header, justify="left" if header == "group" else "right")
    parts: list[Any] = [title, groups]
    shown = shown_groups(current, bound)
    for name, group in shown.items():
        c = group.counters
        share = f"{100 * c['merged'] / c['sent']:.1f}" if c["sent"] else "–"
        groups.add_row(name, f"[blue]{group.ready:,}[/]", f"[yellow]{group.delayed:,}[/]",
                       f"[magenta]{in_flight(group)}[/]",
                       f"[red]{group.expired:,}[/]" if group.expired else "0",
                       f"[red]{group.dead:,}[/]",
                       _oldest(group.ready, group.oldest_ready_ms), f"{c['sent']:,}",
                       f"{c['merged']:,}", share, f"{c['filtered']:,}",
                       f"{c['acked']:,}", f"{c['retried']:,}", f"{c['dead']:,}",
                       *(f"{c.get(stop, 0):,}" for stop in STOPS),
                       *_rates(current, previous, name, interval))
    for name, group in shown.items():
        if group.ready_by_priority:
            bands = "  ".join(f"{priority_name(p)}: {n:,}"
                              for p, n in group.ready_by_priority.items())
            parts.append(Text(f"ready by priority ({name}): {bands}", style="dim"))
        if not group.limits.unlimited:
            parts.append(Text(f"limits ({name}): {describe(group.limits)}", style="dim"))
        if (line := handler_line(group)) is not None:
            parts.append(Text(line, style="dim"))
    if (line := transactions_line(current)) is not None:
        parts.append(Text(line, style="dim"))
    if slots:
        for name, group in shown.items():
            busiest = sorted(group.slots, key=lambda s: -(s.ready + s.delayed + s.in_flight))
            table_ = Table(title=f"busiest slots of {name} ({min(BUSIEST_SLOTS, len(busiest))} "
                                 f"of {len(busiest)})", title_justify="left", box=None,
                           header_style="bold")
            for header in ("slot", "ready", "delayed", "in flight", "expired", "dead",
                           "oldest ready"):
                table_.add_column(header, justify="right")
            for s in busiest[:BUSIEST_SLOTS]:
                table_.add_row(str(s.slot), f"{s.ready:,}", f"{s.delayed:,}",
                               f"{s.in_flight - s.expired:,}", f"{s.expired:,}", f"{s.dead:,}",
                               _oldest(s.ready, s.oldest_ready_ms))
            parts.append(table_)
    return Group(*parts)


def _watch_live(client: Any, args: argparse.Namespace) -> None:
    previous = None
    shown = 0
    with Live(console=Console(), auto_refresh=False) as live:
        while True:
            current = client.stats(args.topic)
            live.update(view(current, previous, args.watch, args.slots,
                             client.topic(args.topic).groups), refresh=True)
            shown += 1
            if args.count and shown >= args.count:
                return
            previous = current
            time.sleep(args.watch)


def stats(args: argparse.Namespace) -> None:
    if args.count and not args.watch:
        raise CommandError("--count counts the refreshes of --watch: give --watch SECONDS too")
    with open_client(args) as client:
        if args.watch and not args.json and sys.stdout.isatty():
            _watch_live(client, args)
            return
        previous = None
        shown = 0
        while True:
            current = client.stats(args.topic)
            if args.json:
                print_json({"at": round(time.time(), 3), **current.to_dict()})
            else:
                text = render(current, previous, args.watch or 1.0, args.slots,
                              client.topic(args.topic).groups)
                if shown:
                    print()
                print(text, flush=True)
            shown += 1
            if not args.watch or (args.count and shown >= args.count):
                return
            previous = current
            time.sleep(args.watch)


def add_parsers(commands: Any) -> None:
    p = commands.add_parser("stats", help="backlog, counters and rates of a topic",
                            description="Per group: ready, delayed, in flight (used/max of "
                                        "a max_in_flight), expired leases not yet recovered, "
                                        "dead, oldest ready age, the counters (superseded and "
                                        "cancelled among them), handler times and the "
                                        "transactions; --watch refreshes live.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--json", action="store_true",
                   help="print JSON (one object per line with --watch)")
    p.add_argument("--slots", action="store_true", help="also show each slot")
    p.add_argument("--watch", type=seconds(0.01), metavar="SECONDS",
                   help="refresh every SECONDS until Ctrl-C, with rates")
    p.add_argument("--count", type=at_least_one, metavar="N",
                   help="with --watch: stop after N refreshes")
    p.set_defaults(run=stats)
