"""``transactions``: the cost of a transaction (SPEC §12). Batches of 100 messages, each
sent either as a plain ``send_many`` (one script call per slot, one round trip) or as a
transaction: ``client.transaction(topic)`` (free: its id is made on the client), its
``send_many`` (half messages, one round trip) and ``commit`` (one script call per slot,
pipelined: a second round trip). Same messages, same run, variants alternating, so a drift
of the machine's speed falls on both. Target: a transaction costs at most 2x the plain
``send_many``, i.e. its rate is at least half."""

from __future__ import annotations

from collections.abc import Callable

from ..context import Bench
from ..jobs import open_client
from ..parallel import Span, time_inline
from ..report import Figure, Report, bar_chart, ratio_at_least

__all__ = ["run"]

SIZE = 100  # messages per transaction or send_many
PLAIN = "send_many of 100"
TRANSACTION = "transaction of 100 (send_many, commit)"
ROUNDS = 2


def _batches(count: int, size: int) -> list[list[bytes]]:
    pad = b"x" * max(0, size - 16)
    bodies = [b"order-%09d-" % n + pad for n in range(count)]
    return [bodies[i:i + SIZE] for i in range(0, len(bodies), SIZE)]


def _plain_job(url: str, topic: str, batches: list[list[bytes]]
               ) -> Callable[[], tuple[int, int]]:
    client = open_client(url)

    def run() -> tuple[int, int]:
        sent = 0
        for batch in batches:
            sent += client.send_many(topic, batch).sent
        return sent, 0

    return run


def _transaction_job(url: str, topic: str, batches: list[list[bytes]]
                     ) -> Callable[[], tuple[int, int]]:
    client = open_client(url)

    def run() -> tuple[int, int]:
        sent = 0
        for batch in batches:
            tx = client.transaction(topic)
            tx.send_many(batch)
            sent += tx.commit().sent
        return sent, 0

    return run


def _variant(bench: Bench, report: Report, label: str, batches: list[list[bytes]]) -> Span:
    bench.fresh()
    topic = "bench.transactions"
    bench.client.create_topic(topic)
    job = _transaction_job if label == TRANSACTION else _plain_job
    span = time_inline(job, bench.url, topic, batches)
    messages = sum(len(b) for b in batches)
    stats = bench.client.stats(topic)
    report.expect_equal(f"{label}: messages pending", stats.groups["default"].pending, messages)
    report.expect_equal(f"{label}: half messages left", stats.transactions.halves, 0)
    return span


def run(bench: Bench) -> Report:
    s, step = bench.sizes, bench.progress.step
    count = max(SIZE, min(s.send // 3, 100_000) // SIZE * SIZE)
    report = Report("transactions", {"messages": count, "per transaction": SIZE,
                                     "rounds": ROUNDS, "slots": 8}, chart=bar_chart)
    batches = _batches(count, s.body_size)
    seconds = {PLAIN: 0.0, TRANSACTION: 0.0}
    for round_number in range(ROUNDS):
        for label in (PLAIN, TRANSACTION):
            with step(f"{label}, {count} messages (round {round_number + 1})"):
                seconds[label] += _variant(bench, report, label, batches).seconds
    rates = {label: ROUNDS * count / spent for label, spent in seconds.items()}
    report.add(Figure(PLAIN, rates[PLAIN], "msg/s", note="the same batches, no transaction"))
    tx = report.add(Figure(TRANSACTION, rates[TRANSACTION], "msg/s", compare=[PLAIN]))
    ratio_at_least(report, tx, PLAIN, 0.5)
    bench.fresh()
    return report
