"""``newest``: merging by key (SPEC §14). ``send_many`` and claim + ack on a topic with
``merge="key"`` against the same on a topic merging by body, in the same run (alternating
rounds, so a drift of the machine's speed falls on both). Each message is a product's
state: a body of the bench's size carrying a price, sent with the product's key. Every
product is sent twice, the second time with another price: in key mode the second send
merges and its value wins; in body mode the bodies differ, so both are stored (the first
pass of each mode is what the figures compare: the same number of new messages stored)."""

from __future__ import annotations

from ..context import Bench
from ..jobs import claim_ack_job, send_items_job
from ..parallel import time_inline
from ..report import Figure, Report, bar_chart, ratio_at_least

__all__ = ["run"]

CLAIM = 100
ROUNDS = 3  # alternating: the machine's speed drifts by a fifth between rounds
SEND_TARGET = 0.8  # SPEC §14: key mode send_many at least this share of body mode's
CLAIM_TARGET = 0.85  # and claim + ack at least this share
SEND_BODY, SEND_KEY = "send_many, merge by body", "send_many, merge by key"
CLAIM_BODY, CLAIM_KEY = "claim+ack, merge by body", "claim+ack, merge by key"


def _items(count: int, size: int, price: int) -> list[dict[str, object]]:
    """One state of each of ``count`` products, its price ``price`` + the product's number."""
    pad = b"x" * max(0, size - 24)
    return [{"body": b"price=%09d;" % (price + n) + pad, "key": b"product-%09d" % n}
            for n in range(count)]


def run(bench: Bench) -> Report:
    s, step = bench.sizes, bench.progress.step
    count = s.consume
    report = Report("newest", {"messages": count, "rounds": ROUNDS, "batch": s.batch,
                               "claim_count": CLAIM, "body_size": s.body_size},
                    chart=bar_chart)
    first, second = _items(count, s.body_size, 1000), _items(count, s.body_size, 5000)
    seconds = dict.fromkeys([SEND_BODY, SEND_KEY, CLAIM_BODY, CLAIM_KEY], 0.0)
    for round_number in range(ROUNDS):
        for merge in ("body", "key"):
            send, claim = (SEND_KEY, CLAIM_KEY) if merge == "key" else (SEND_BODY, CLAIM_BODY)
            bench.fresh()
            topic = "bench.newest"
            bench.client.create_topic(topic, merge=merge)
            with step(f"{send}, {count} messages (round {round_number + 1})"):
                seconds[send] += time_inline(send_items_job, bench.url, topic, first,
                                             s.batch).seconds
            again = time_inline(send_items_job, bench.url, topic, second, s.batch)
            stored = bench.client.stats(topic).groups["default"].pending
            report.expect_equal(f"{merge}: pending after a second price of every product",
                                stored, count if merge == "key" else 2 * count)
            if merge == "key":
                report.expect_equal("key: the second prices merged", again.results[0][1],
                                    count)
            with step(f"{claim}, {stored} messages (round {round_number + 1})"):
                span = time_inline(claim_ack_job, bench.url, topic, CLAIM, merge == "key")
            # body mode holds both prices of every product: its figure is per message
            # claimed, as key mode's
            seconds[claim] += span.seconds * count / stored
            report.expect_equal(f"{claim}: acked (round {round_number + 1})", span.count,
                                stored)
            if merge == "key":
                bodies = {body for _, found in span.results for body in found}
                newest = {item["body"] for item in second}
                report.check("key: every product claimed once, with its newest price",
                             bodies == newest, f"{len(bodies & newest)} of {count}")
    for base, keyed, target in ((SEND_BODY, SEND_KEY, SEND_TARGET),
                                (CLAIM_BODY, CLAIM_KEY, CLAIM_TARGET)):
        report.add(Figure(base, ROUNDS * count / seconds[base], "msg/s"))
        figure = report.add(Figure(keyed, ROUNDS * count / seconds[keyed], "msg/s",
                                   compare=[base]))
        ratio_at_least(report, figure, base, target)
    bench.fresh()
    return report
