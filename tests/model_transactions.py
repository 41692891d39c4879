"""Transactions in the stateful model test (SPEC §12; ``test_model.py`` mixes these rules
into its machine): half sends, commits (by the handle that sent, or by a fresh handle of
the id, as after a crash), rollbacks, a commit cut off after some of its slots (the process
died midway) and finished by a retry or by the check-back, check-backs answering True,
False or None under the lease and ``max_checks``, and the closed transactions' errors.

The model: a transaction holds its half messages in send order; they are in no group and
merge with nothing until its commit, which sends them at the commit's time in that order
(a delay counts from the commit, a fixed time stays, ready at once if already past). Half
messages show in the snapshot as rows of state "half" (checked with the rest by
``agrees_with_model``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import rmq
from rmq.storage import transactions as tx_ops

__all__ = ["TransactionRules", "CHECK_INTERVAL_MS", "MAX_CHECKS"]

CHECK_INTERVAL_MS = 2_000  # the model topic's check_interval
MAX_CHECKS = 2
MAX_OPEN = 3


@dataclass
class ModelTx:
    id: str
    handle: Any
    halves: list[dict[str, Any]] = field(default_factory=list)  # send args, in send order
    sent: list[dict[str, Any]] = field(default_factory=list)  # every half ever sent
    state: str = "open"  # or "committed", "rolled_back"
    closing: str | None = None  # "committed" when some slots committed (cut off midway)
    checks: int = 0
    next_check: int = 0  # epoch ms before which no check may begin (the lease, an interval)
    # another handle sent too: only a handle that sent nothing (it covers every slot) closes
    # all of it (docs/transactions.md, "Ids, parts and replays")
    shared: bool = False


class TransactionRules:
    """Rules and model state of transactions, for ``QueueMachine``."""

    def __init__(self) -> None:
        super().__init__()
        self.txs: dict[str, ModelTx] = {}
        self.tx_count = 0
        self.abandoned = 0

    def forget_transactions(self) -> None:
        """The topic was deleted: its transactions went with it."""
        self.txs = {}
        self.abandoned = 0

    def open_txs(self) -> list[ModelTx]:
        return [t for t in self.txs.values() if t.state == "open"]

    def model_halves(self) -> Counter[tuple[Any, ...]]:
        """What the snapshot must show as half messages: (state, slot, tx id, body, key,
        priority)."""
        rows: Counter[tuple[Any, ...]] = Counter()
        for tx in self.open_txs():
            for args in tx.halves:
                slot = self.m.slot_of(args["body"], args.get("key"))
                rows[("half", slot, tx.id, args["body"], args.get("key"),
                      args.get("priority", int(rmq.Priority.MEDIUM)))] += 1
        return rows

    def _commit_halves(self, halves: list[dict[str, Any]], now: int) -> int:
        """The model's commit of ``halves`` at ``now``: sends, in order (a version checked
        against what was sent before the commit); returns merges."""
        merged = 0
        for args in halves:
            sent = dict(args)
            if "deliver_at" in sent:
                sent["deliver_at"] = max(sent["deliver_at"], now)
            merged += self._model_send(sent, now) == 1  # MERGED
        return merged

    # -- the application's side ------------------------------------------------------------

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def tx_send(self, data: st.DataObject) -> None:
        """Half messages into an open transaction, or a new one (its first send begins it)."""
        candidates = [t for t in self.open_txs() if t.closing is None]
        if candidates and (len(candidates) >= MAX_OPEN or data.draw(st.booleans(),
                                                                     label="same tx")):
            tx = data.draw(st.sampled_from(candidates), label="transaction")
        else:
            self.tx_count += 1
            tx_id = f"tx-{self.tx_count}"
            tx = self.txs[tx_id] = ModelTx(tx_id, self.client.transaction(self.topic, tx_id))
        n = data.draw(st.integers(1, 4), label="half messages")
        batch = [self._send_args(data) for _ in range(n)]
        # another sender of the same id (a part of its own), or one whose batch reached
        # some slots only before it died: its halves are the transaction's all the same
        handle = tx.handle
        if not data.draw(st.integers(0, 3), label="other sender?"):
            handle, tx.shared = self.client.transaction(self.topic, tx.id), True
        if n == 1 and data.draw(st.booleans(), label="send, not send_many"):
            assert handle.send(**batch[0]) == 1
        else:
            assert handle.send_many(batch) == n
        tx.halves += batch
        tx.sent += batch

    @precondition(lambda self: self.live and any(
        t.state == "open" and t.halves for t in self.txs.values()))
    @rule(data=st.data(), fresh=st.booleans())
    def tx_commit(self, data: st.DataObject, fresh: bool) -> None:
        """The handle commits, or a fresh handle of the id (the sender crashed after its
        own database committed, and a retry commits every slot)."""
        tx = data.draw(st.sampled_from([t for t in self.open_txs() if t.halves]),
                       label="transaction")
        self.reserve_stamps(len(tx.halves))
        now = self.now()
        handle = (self.client.transaction(self.topic, tx.id) if fresh or tx.shared
                  else tx.handle)
        counts = handle.commit()
        merged = self._commit_halves(tx.halves, now)
        assert (counts.sent, counts.merged) == (len(tx.halves), merged)
        tx.state, tx.halves = "committed", []

    @precondition(lambda self: self.live and any(t.closing is None for t in self.open_txs()))
    @rule(data=st.data())
    def tx_rollback(self, data: st.DataObject) -> None:
        tx = data.draw(st.sampled_from([t for t in self.open_txs() if t.closing is None]),
                       label="transaction")
        (self.client.transaction(self.topic, tx.id) if tx.shared else tx.handle).rollback()
        tx.state, tx.halves = "rolled_back", []

    @precondition(lambda self: self.live and any(
        t.state == "open" and t.closing is None and t.halves for t in self.txs.values()))
    @rule(data=st.data())
    def tx_commit_cut_off(self, data: st.DataObject) -> None:
        """A commit that reached some slots only: the process died midway."""
        tx = data.draw(st.sampled_from([t for t in self.open_txs()
                                        if t.closing is None and t.halves]),
                       label="transaction")
        slots = sorted({self.m.slot_of(a["body"], a.get("key")) for a in tx.halves})
        reached = data.draw(st.lists(st.sampled_from(slots), min_size=1, max_size=len(slots),
                                     unique=True), label="slots committed")
        self.reserve_stamps(len(tx.halves))
        now = self.now()
        info = self.client.topic(self.topic)
        retention, cluster = info.settings.tx_retention, self.client.is_cluster
        if cluster:  # the client's commit records it in the topic first
            self.client._run(tx_ops.record_close(self.topic, tx.id, True, now, retention))
        self.client._run(tx_ops.close(self.topic, info.generation, info.groups, tx.id, reached,
                                      True, now, retention, self.client._heads(info),
                                      info.filter_argument, topic_record=not cluster,
                                      by_key=info.settings.merge == "key",
                                      stops=info.stop_argument,
                                      version_retention=info.version_retention_ms))
        self._commit_halves([a for a in tx.halves if self.m.slot_of(a["body"], a.get("key"))
                             in reached], now)
        tx.halves = [a for a in tx.halves
                     if self.m.slot_of(a["body"], a.get("key")) not in reached]
        if tx.halves:
            tx.closing = "committed"
        else:
            tx.state = "committed"

    @precondition(lambda self: self.live and any(t.state != "open" for t in self.txs.values()))
    @rule(data=st.data(), what=st.sampled_from(["send", "commit", "rollback"]))
    def tx_closed(self, data: st.DataObject, what: str) -> None:
        """A closed transaction: the same close again does nothing, the other way or a send
        raises TransactionClosed; the id is remembered, also by a fresh handle."""
        tx = data.draw(st.sampled_from([t for t in self.txs.values() if t.state != "open"]),
                       label="transaction")
        handle = (self.client.transaction(self.topic, tx.id)
                  if data.draw(st.booleans(), label="fresh handle") else tx.handle)
        same = (what == "commit") == (tx.state == "committed")
        if what == "send":
            # a replay, of one of its halves or of a message for any slot: the topic
            # remembers the id closed
            half = (data.draw(st.sampled_from(tx.sent), label="replayed half")
                    if data.draw(st.booleans(), label="one of its halves")
                    else self._send_args(data))
            with pytest.raises(rmq.errors.TransactionClosed):
                handle.send(**{k: v for k, v in half.items() if k in ("body", "key")})
        elif same:
            result = handle.commit() if what == "commit" else handle.rollback()
            assert result in (rmq.SendCounts(0, 0), None)
        else:
            with pytest.raises(rmq.errors.TransactionClosed):
                if what == "commit":
                    handle.commit()
                else:
                    handle.rollback()

    # -- the check-back ----------------------------------------------------------------------

    @precondition(lambda self: self.live and self.txs)
    @rule(data=st.data(), checks=st.integers(1, 4))
    def tx_check(self, data: st.DataObject, checks: int) -> None:
        """Check-backs of one transaction (mostly an open one) in a row, each answering
        True, False or None, at once or past the interval of the last check: the lease
        (busy), the interval, ``max_checks`` (abandoned) and the closed ones (never asked)."""
        open_ones = self.open_txs()
        pool = open_ones if open_ones and data.draw(st.integers(0, 4), label="open?") else (
            sorted(self.txs.values(), key=lambda t: t.id))
        tx = data.draw(st.sampled_from(pool), label="transaction")
        for _ in range(checks):
            answer = data.draw(st.sampled_from([True, False, None, None]), label="answer")
            self.clock.advance(data.draw(st.sampled_from([0, 1, CHECK_INTERVAL_MS]),
                                         label="later"))
            asked: list[str] = []

            def checker(tx_id: str, answer: bool | None = answer,
                        asked: list[str] = asked) -> bool | None:
                asked.append(tx_id)
                return answer

            self.reserve_stamps(len(tx.halves))
            now = self.now()
            outcome = self.client.check_transaction(self.topic, tx.id, checker)
            expected, ask = self._checked(tx, answer, now)
            assert (outcome, asked) == (expected, [tx.id] if ask else []), (
                f"check of {tx.id} ({tx.state}, closing {tx.closing}, {tx.checks} checks, "
                f"next at {tx.next_check}, now {now}): {outcome}, asked {asked}; model "
                f"{expected}")

    def _checked(self, tx: ModelTx, answer: bool | None, now: int) -> tuple[str, bool]:
        """The model of one check: its outcome, and whether the checker is asked."""
        if tx.state != "open" or not tx.halves:
            return "closed", False
        if tx.closing is not None:
            self._commit_halves(tx.halves, now)
            tx.state, tx.halves = "committed", []
            return "committed", False
        if now < tx.next_check:
            return "busy", False
        if tx.checks >= MAX_CHECKS:
            tx.state, tx.halves = "rolled_back", []
            self.abandoned += 1
            return "abandoned", False
        tx.checks += 1
        tx.next_check = now + CHECK_INTERVAL_MS
        if answer is None:
            return "unknown", True
        if answer:
            self._commit_halves(tx.halves, now)
            tx.state, tx.halves = "committed", []
            return "committed", True
        tx.state, tx.halves = "rolled_back", []
        return "rolled_back", True

    @precondition(lambda self: self.live)
    @rule()
    def tx_stats(self) -> None:
        """``stats(topic).transactions`` and ``open_transactions`` against the model."""
        figures = self.client.stats(self.topic).transactions
        holding = [t for t in self.open_txs() if t.halves]
        assert (figures.open, figures.halves, figures.abandoned) == (
            len(holding), sum(len(t.halves) for t in holding), self.abandoned)
        listed = {t.id: (t.halves, t.checks, t.closing)
                  for t in self.client.open_transactions(self.topic)}
        assert listed == {t.id: (len(t.halves), t.checks, t.closing) for t in holding}
