"""``trace``: the cost of the message trace (SPEC §11, docs/trace.md). ``send_many`` and
claim + ack on a topic with ``trace`` on, against the same on a topic with it off, in the
same run (alternating rounds, so a drift of the machine's speed falls on both). Each message
is sent twice (the second merges, counted in the trace's tally), claimed and acknowledged,
so the traced variant records sent, merged, claimed and acked for each."""

from __future__ import annotations

from ..context import Bench
from ..jobs import claim_ack_job, send_many_job
from ..parallel import time_inline
from ..report import Figure, Report, bar_chart, ratio_at_least
from ..workload import Bodies

__all__ = ["run"]

CLAIM = 100
ROUNDS = 3  # alternating: the machine's speed drifts by a fifth between rounds
TARGET = 0.8  # SPEC §11: with the trace on, at least this share of the throughput off
SEND_OFF, SEND_ON = "send_many, trace off", "send_many, trace on"
CLAIM_OFF, CLAIM_ON = "claim+ack, trace off", "claim+ack, trace on"


def run(bench: Bench) -> Report:
    s, step = bench.sizes, bench.progress.step
    count = s.consume
    report = Report("trace", {"messages": count, "sends": 2 * count, "rounds": ROUNDS,
                              "batch": s.batch, "claim_count": CLAIM}, chart=bar_chart)
    bodies = Bodies(b"t", s.body_size, 0, count)
    seconds = dict.fromkeys([SEND_OFF, SEND_ON, CLAIM_OFF, CLAIM_ON], 0.0)
    for round_number in range(ROUNDS):
        for traced in (False, True):
            send, claim = (SEND_ON, CLAIM_ON) if traced else (SEND_OFF, CLAIM_OFF)
            bench.fresh()
            topic = "bench.trace"
            bench.client.create_topic(topic, trace=traced)
            with step(f"{send}, {2 * count} sends (round {round_number + 1})"):
                first = time_inline(send_many_job, bench.url, topic, bodies, s.batch)
                again = time_inline(send_many_job, bench.url, topic, bodies, s.batch)
            seconds[send] += first.seconds + again.seconds
            newest = bodies.build()[-1]
            if traced:
                # the newest event of its slot (at the default size its sent is trimmed away
                # by then: each pass put more events into each slot than its cap of 10 000)
                events = [(e.event, e.count) for e in bench.client.trace(topic, body=newest)]
                report.check("a traced message's merge", events[-1:] == [("merged", 1)],
                             str(events))
            with step(f"{claim}, {count} messages (round {round_number + 1})"):
                span = time_inline(claim_ack_job, bench.url, topic, CLAIM, False)
            seconds[claim] += span.seconds
            report.expect_equal(f"{claim}: acked (round {round_number + 1})", span.count,
                                count)
            if traced:
                # claimed last, so its claim and ack are the newest events of its slot
                names = [e.event for e in bench.client.trace(topic, body=newest)]
                report.check("a traced message's claim and ack",
                             names[-2:] == ["claimed", "acked"], str(names))
    for off, on, sends in ((SEND_OFF, SEND_ON, 2 * count), (CLAIM_OFF, CLAIM_ON, count)):
        report.add(Figure(off, ROUNDS * sends / seconds[off], "msg/s"))
        figure = report.add(Figure(on, ROUNDS * sends / seconds[on], "msg/s", compare=[off]))
        ratio_at_least(report, figure, off, TARGET)
    bench.fresh()
    return report
