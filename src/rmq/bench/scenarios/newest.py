"""``newest``: merging by key and supersede (SPEC §14).

``send_many`` and claim + ack on a topic with ``merge="key"`` against the same on a topic
merging by body, and on a topic merging by key whose group has ``supersede`` on, in the
same run (alternating rounds, so a drift of the machine's speed falls on every mode). Each
message is a product's state: a body of the bench's size carrying a price, sent with the
product's key. Every product is sent twice, the second time with another price: in key
mode the second send merges and its value wins; in body mode the bodies differ, so both are
stored (the first pass of each mode is what the figures compare: the same number of new
messages stored). Nothing is in flight while they are sent, so supersede only looks.

Then supersede at work (``rmq/bench/supersede.py``): how soon a running handler hears
that a newer value of its key was sent; and the founding case's renders on a simulated GPU,
the same run with supersede and without: GPU-seconds, renders completed, renders stopped
early, and every product's last completed render showing its latest price."""

from __future__ import annotations

from ..context import Bench
from ..jobs import claim_ack_job, send_items_job
from ..parallel import time_inline
from ..report import Figure, Report, at_most, bar_chart, ratio_at_least
from ..supersede import SUPERSEDE_LIMIT, RenderPlan, RenderRun, render_run, stop_latencies
from ..workload import latency_summary

__all__ = ["run"]

CLAIM = 100
ROUNDS = 3  # alternating: the machine's speed drifts by a fifth between rounds
SEND_TARGET = 0.8  # SPEC §14: key mode send_many at least this share of body mode's
CLAIM_TARGET = 0.85  # and claim + ack at least this share
STOP_P99_MS = 100.0  # SPEC §14: a running handler hears of a supersede within this (p99)
HOT_SHARE = 0.05  # of the products, the ones whose price keeps changing
MODES = ("body", "key", "supersede")  # supersede: merging by key, the group superseding
SEND = {"body": "send_many, merge by body", "key": "send_many, merge by key",
        "supersede": "send_many, merge by key, supersede on"}
CLAIM_ACK = {"body": "claim+ack, merge by body", "key": "claim+ack, merge by key",
             "supersede": "claim+ack, merge by key, supersede on"}
# each mode against the one it adds to: key mode against body mode, supersede on against off
COMPARED = {SEND["key"]: SEND["body"], CLAIM_ACK["key"]: CLAIM_ACK["body"],
            SEND["supersede"]: SEND["key"], CLAIM_ACK["supersede"]: CLAIM_ACK["key"]}
SCRIPT_CALLS = ("fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro")


def _items(count: int, size: int, price: int) -> list[dict[str, object]]:
    """One state of each of ``count`` products, its price ``price`` + the product's number."""
    pad = b"x" * max(0, size - 24)
    return [{"body": b"price=%09d;" % (price + n) + pad, "key": b"product-%09d" % n}
            for n in range(count)]


def _calls(bench: Bench) -> dict[str, int]:
    """Commands run so far by name (``INFO commandstats``; a script's own calls included)."""
    return {name.removeprefix("cmdstat_"): int(stat["calls"])
            for name, stat in bench.redis.info("commandstats").items()}


def _script_calls(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(after.get(name, 0) - before.get(name, 0) for name in SCRIPT_CALLS)


def _modes(bench: Bench, report: Report) -> None:
    s, step = bench.sizes, bench.progress.step
    count = s.consume
    first, second = _items(count, s.body_size, 1000), _items(count, s.body_size, 5000)
    seconds = dict.fromkeys([*SEND.values(), *CLAIM_ACK.values()], 0.0)
    script_calls = dict.fromkeys(MODES, 0)
    for round_number in range(ROUNDS):
        for mode in MODES:
            send, claim = SEND[mode], CLAIM_ACK[mode]
            keyed = mode != "body"
            bench.fresh()
            topic = "bench.newest"
            bench.client.create_topic(topic, merge="key" if keyed else "body")
            if mode == "supersede":
                bench.client.bind(topic, "default", supersede=True)
            before = _calls(bench)
            with step(f"{send}, {count} messages (round {round_number + 1})"):
                seconds[send] += time_inline(send_items_job, bench.url, topic, first,
                                             s.batch).seconds
            script_calls[mode] += _script_calls(before, _calls(bench))
            again = time_inline(send_items_job, bench.url, topic, second, s.batch)
            stored = bench.client.stats(topic).groups["default"].pending
            report.expect_equal(f"{mode}: pending after a second price of every product",
                                stored, count if keyed else 2 * count)
            if keyed:
                report.expect_equal(f"{mode}: the second prices merged", again.results[0][1],
                                    count)
            with step(f"{claim}, {stored} messages (round {round_number + 1})"):
                span = time_inline(claim_ack_job, bench.url, topic, CLAIM, keyed)
            # body mode holds both prices of every product: its figure is per message
            # claimed, as key mode's
            seconds[claim] += span.seconds * count / stored
            report.expect_equal(f"{claim}: acked (round {round_number + 1})", span.count,
                                stored)
            if keyed:
                bodies = {body for _, found in span.results for body in found}
                newest = {item["body"] for item in second}
                report.check(f"{mode}: every product claimed once, with its newest price",
                             bodies == newest, f"{len(bodies & newest)} of {count}")
    for name in (*SEND.values(), *CLAIM_ACK.values()):
        compare = [COMPARED[name]] if name in COMPARED else []
        report.add(Figure(name, ROUNDS * count / seconds[name], "msg/s", compare=compare))
    ratio_at_least(report, report.figure(SEND["key"]), SEND["body"], SEND_TARGET)
    ratio_at_least(report, report.figure(CLAIM_ACK["key"]), CLAIM_ACK["body"], CLAIM_TARGET)
    report.check("supersede on: a send of an identity not in flight pays no extra round trip",
                 script_calls["supersede"] == script_calls["key"],
                 f"{script_calls['supersede']} script calls sending {ROUNDS} × {count} "
                 f"messages, {script_calls['key']} with supersede off")
    bench.fresh()


def _stop_latency(bench: Bench, report: Report) -> None:
    probes, topic = bench.sizes.supersede_probes, "bench.newest.stop"
    with bench.progress.step(f"supersede: {probes} running handlers told to stop"):
        latencies, told = stop_latencies(bench.url, topic, probes)
    summary = latency_summary(latencies)
    report.series["stop_latency_ms"] = latencies
    report.add(Figure("supersede: send to the running handler told, p50", summary["p50"],
                      "ms"))
    report.add(Figure("supersede: send to the running handler told, p99", summary["p99"],
                      "ms", targets=[at_most(STOP_P99_MS, "ms")(summary["p99"])],
                      note=f"max {summary['max']:.2f} ms of {len(latencies)} sends; one "
                           "process, a single node"))
    report.expect_equal("supersede: every waiting handler heard it", told, probes)
    counters = bench.client.stats(topic).groups["default"].counters
    report.expect_equal("supersede: superseded counter", counters.get("superseded", 0),
                        probes)
    bench.fresh()


def _plan(bench: Bench) -> RenderPlan:
    s = bench.sizes
    return RenderPlan(products=s.render_products,
                      hot=max(1, round(s.render_products * HOT_SHARE)),
                      seconds=s.changing_s, render=s.render_s, every=s.change_every_s)


def _renders(bench: Bench, report: Report) -> None:
    plan = _plan(bench)
    runs: dict[bool, RenderRun] = {}
    for supersede in (True, False):  # the same run, one after the other
        label = "on" if supersede else "off"
        with bench.progress.step(f"renders, supersede {label}: {plan.products} products, "
                                 f"{plan.hot} changing every {plan.every:g} s for "
                                 f"{plan.seconds:g} s"):
            runs[supersede] = run = render_run(bench.url, "bench.newest.renders", plan,
                                               supersede)
        bench.fresh()
        last = run.last_completed()
        wrong = sum(last.get(product) != price for product, price in run.latest.items())
        report.check(f"renders, supersede {label}: every product's last completed render "
                     "shows its latest price", wrong == 0,
                     f"{len(run.latest) - wrong} of {len(run.latest)} products")
        report.expect_equal(f"renders, supersede {label}: every handler run acknowledged",
                            run.counters.get("acked", 0), len(run.renders))
        superseded = run.counters.get("superseded", 0)
        # a handler can only hear of a supersede Redis counted; one counted as its render
        # ended is heard too late to stop it
        report.check(f"renders, supersede {label}: renders stopped early, as counted in "
                     "Redis", run.stopped <= superseded if supersede else superseded == 0,
                     f"{run.stopped} stopped, {superseded} counted superseded")
    on, off = runs[True], runs[False]
    report.series["renders"] = {label: {"gpu_seconds": r.gpu_seconds, "completed": r.completed,
                                        "stopped": r.stopped, "stale": r.stale,
                                        "seconds": r.seconds}
                                for label, r in (("on", on), ("off", off))}
    gpu_off = "renders: GPU time, supersede off"
    report.add(Figure(gpu_off, off.gpu_seconds, "GPU-s",
                      note=f"drained in {off.seconds:.1f} s"))
    report.add(Figure("renders: GPU time, supersede on", on.gpu_seconds, "GPU-s",
                      compare=[gpu_off],
                      note=f"drained in {on.seconds:.1f} s; "
                           f"{off.gpu_seconds - on.gpu_seconds:.1f} GPU-seconds saved"))
    for label, r in (("off", off), ("on", on)):
        report.add(Figure(f"renders completed, supersede {label}", r.completed, "renders",
                          note=f"{r.stale} of them of a price replaced before they ended"))
    report.add(Figure("renders stopped early, supersede on", on.stopped, "renders"))


def run(bench: Bench) -> Report:
    s = bench.sizes
    plan = _plan(bench)
    report = Report("newest", {"messages": s.consume, "rounds": ROUNDS, "batch": s.batch,
                               "claim_count": CLAIM, "body_size": s.body_size,
                               "supersede_probes": s.supersede_probes,
                               "render_products": plan.products, "render_hot": plan.hot,
                               "render_s": plan.render, "change_every_s": plan.every,
                               "changing_s": plan.seconds,
                               "render_concurrency": plan.concurrency,
                               "supersede_limit": SUPERSEDE_LIMIT},
                    chart=bar_chart)
    _modes(bench, report)
    _stop_latency(bench, report)
    _renders(bench, report)
    return report
