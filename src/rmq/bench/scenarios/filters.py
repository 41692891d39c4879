"""``filters``: the cost of server-side filters (SPEC §13). ``send_many`` of messages with a
tag and two properties into a topic of 4 groups, each with a ``where`` filter, against the
same sends into 4 groups without filters, in the same run (alternating, so a drift of the
machine's speed falls on both). The filters accept every message, so both variants store
the same and the difference is the filters' evaluation alone; a third variant, where each
group's filter takes a quarter of the messages, shows what a selective filter costs (it
stores a quarter as much)."""

from __future__ import annotations

from collections.abc import Callable

from ..context import Bench
from ..jobs import send_items_job
from ..parallel import Span, time_inline
from ..report import Figure, Report, bar_chart, ratio_at_least

__all__ = ["run"]

GROUPS = ("g0", "g1", "g2", "g3")
REGIONS = ("eu", "us", "ap", "sa")
PLAIN = "send_many, 4 groups without filters"
ACCEPTING = "send_many, 4 groups with where filters (each accepts all)"
SELECTIVE = "send_many, 4 groups with where filters (each takes a quarter)"
WHERE_ALL = "price >= 0 AND region IN ('eu', 'us', 'ap', 'sa')"
ROUNDS = 2


def _items(count: int, size: int) -> list[dict[str, object]]:
    pad = b"x" * max(0, size - 16)
    return [{"body": b"order-%09d-" % n + pad, "tag": "order",
             "properties": {"region": REGIONS[n % 4], "price": n % 1000}}
            for n in range(count)]


def _variant(bench: Bench, report: Report, label: str, items: list[dict[str, object]],
             where: Callable[[int], str | None]) -> Span:
    bench.fresh()
    topic = "bench.filters"
    bench.client.create_topic(topic, slots=16)
    for n, group in enumerate(GROUPS):
        bench.client.bind(topic, group, where=where(n))
    span = time_inline(send_items_job, bench.url, topic, items, bench.sizes.batch)
    stats = bench.client.stats(topic).groups
    stored = sum(stats[g].pending for g in GROUPS)
    filtered = sum(stats[g].counters["filtered"] for g in GROUPS)
    expected = len(items) if label == SELECTIVE else 4 * len(items)
    report.expect_equal(f"{label}: messages stored", stored, expected)
    report.expect_equal(f"{label}: stored + filtered = 4 groups x sends", stored + filtered,
                        4 * len(items))
    return span


def run(bench: Bench) -> Report:
    s, step = bench.sizes, bench.progress.step
    count = s.send // 2
    report = Report("filters", {"messages": count, "rounds": ROUNDS, "batch": s.batch,
                                "groups": len(GROUPS), "where": WHERE_ALL},
                    chart=bar_chart)
    items = _items(count, s.body_size)
    variants: list[tuple[str, Callable[[int], str | None]]] = [
        (PLAIN, lambda n: None),
        (ACCEPTING, lambda n: WHERE_ALL),
        (SELECTIVE, lambda n: f"region = '{REGIONS[n]}' AND price >= 0"),
    ]
    seconds = dict.fromkeys([label for label, _ in variants], 0.0)
    for round_number in range(ROUNDS):
        for label, where in variants:
            with step(f"{label}, {count} messages (round {round_number + 1})"):
                seconds[label] += _variant(bench, report, label, items, where).seconds
    rates = {label: ROUNDS * count / spent for label, spent in seconds.items()}
    report.add(Figure(PLAIN, rates[PLAIN], "msg/s", note="the same sends, unfiltered"))
    accepting = report.add(Figure(ACCEPTING, rates[ACCEPTING], "msg/s", compare=[PLAIN]))
    ratio_at_least(report, accepting, PLAIN, 0.75)
    report.add(Figure(SELECTIVE, rates[SELECTIVE], "msg/s", compare=[PLAIN]))
    bench.fresh()
    return report
