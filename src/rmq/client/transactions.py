"""Transactional messages in the client's flows (SPEC §12, docs/transactions.md): a
transaction's state as one handle knows it, its half sends, commit and rollback, the open
transactions of a topic, and the steps of a check-back around the application's checker.

``TransactionFlows`` is a part of each client (through its methods' mixin in
``tx_handles.py``), kept apart so that transactions read as one concept; what it uses of
:class:`~rmq.client.base.BaseClient` is ``host.ClientHost``. The handles users hold
(``Transaction``, ``AsyncTransaction``) are in ``tx_handles.py``.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgument, TransactionClosed
from ..message import SendCounts
from ..settings import check_topic_name
from ..storage import transactions as tx_ops
from ..storage.codec import to_ms
from ..storage.registry import TopicInfo
from ..storage.trace import trace_argument
from ..storage.transactions import DONE, STATES, OpenTransaction
from .effects import Flow
from .host import ClientHost
from .outgoing import MISSING, prepare, prepare_batch

__all__ = ["TransactionFlows", "TxState", "check_transaction_id", "send_item", "CheckStep"]

log = logging.getLogger("rmq.transactions")

_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


def check_transaction_id(value: object, what: str = "transaction id") -> str:
    """``value`` if it is 1-128 characters of ``A-Z a-z 0-9 . _ -``; else InvalidArgument."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidArgument(
            f"invalid {what} {value!r}: use 1-128 characters of A-Z a-z 0-9 . _ -")
    return value


def send_item(body: Any, json: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """A ``send``'s arguments as one item of ``send_many``."""
    item = {name: value for name, value in options.items() if value is not None}
    if body is not MISSING:
        item["body"] = body
    if json is not MISSING:
        item["json"] = json
    return item


@dataclass(slots=True)
class TxState:
    """One handle's view of a transaction: its id, its part (this handle's share: a handle
    sending the same messages again under the same part stores nothing twice), how many
    halves it sent to each slot, and whether it is open, committed or rolled back."""

    topic: str
    id: str
    part: str
    sent: dict[int, int] = field(default_factory=dict)
    state: str = "open"

    def closed(self, what: str) -> TransactionClosed:
        return TransactionClosed(self.topic, self.id, self.state, what)


class CheckStep(Exception):
    """Not an error: what a check-back's first step decided without asking the checker
    (``outcome`` as ``check_transaction`` returns it)."""

    def __init__(self, outcome: str):
        super().__init__(outcome)
        self.outcome = outcome


class TransactionFlows(ClientHost):
    """The transactions' flows."""

    def _new_transaction(self, topic: str, tx_id: str | None, part: str | None) -> TxState:
        check_topic_name(topic)
        name = secrets.token_hex(12) if tx_id is None else check_transaction_id(tx_id)
        share = secrets.token_hex(6) if part is None else check_transaction_id(part, "part")
        return TxState(topic, name, share)

    def _tx_send(self, tx: TxState, items: Iterable[Any], single: bool) -> Flow[int]:
        """Store ``items`` as half messages of ``tx``; returns how many were stored (a part
        sent again stores only what goes beyond its earlier run)."""
        if tx.state != "open":
            raise tx.closed("send")
        if isinstance(items, Iterator):  # one-shot: kept for a second attempt
            items = list(items)

        def send(info: TopicInfo, first: bool) -> Flow[int]:
            now = yield from self._now()
            if single:
                batch = [prepare(info.settings, now, **next(iter(items)))]
            else:
                batch = prepare_batch(info.settings, now, items)  # checks what items is
            dues = [("+0" if m.due_at == now else _due(m.due_at, now, item))
                    for m, item in zip(batch, list(items), strict=True)]
            if self.is_cluster:
                # The topic's record of closed ids is on another node than the slots: read
                # it first, so a replay stores nothing in slots the id never held. (On a
                # single node each slot's script reads it, in the same atomic call.)
                closed = yield from tx_ops.closed_state(tx.topic, tx.id, now,
                                                        info.settings.tx_retention)
                if closed is not None:
                    tx.state = closed
                    raise tx.closed("send")
            outcomes = yield from tx_ops.send_halves(
                tx.topic, info.generation, tx.id, tx.part, tx.sent, batch, dues, now,
                info.settings.tx_retention, topic_record=not self.is_cluster)
            for m in batch:
                tx.sent[m.slot] = tx.sent.get(m.slot, 0) + 1
            refused = [o.state for o in outcomes if o.state != DONE]
            if refused:
                tx.state = STATES[refused[0]]
                raise tx.closed("send")
            return sum(o.halves for o in outcomes)

        return (yield from self._on_current(tx.topic, send))

    def _tx_close(self, tx: TxState, commit: bool) -> Flow[SendCounts]:
        """Commit or roll back ``tx`` in every slot it sent to (every slot of the topic
        when this handle sent nothing: the halves were sent by others), recording it in the
        topic's closed ids first (a cluster) or in each slot's call (a single node): the
        first close recorded decides. Idempotent; the other way after a close raises
        TransactionClosed."""
        done, what = ("committed", "commit") if commit else ("rolled_back", "roll back")
        if tx.state == done:
            return SendCounts(0, 0)
        if tx.state != "open":
            raise tx.closed(what)

        def close(info: TopicInfo, first: bool) -> Flow[SendCounts]:
            now = yield from self._now()
            retention = info.settings.tx_retention
            if self.is_cluster:
                # recorded before any slot closes: a close cut off after it is finished the
                # same way (a retry, the check-back), and a replay finds the id closed
                decided = yield from tx_ops.record_close(tx.topic, tx.id, commit, now,
                                                         retention)
                if decided != DONE:
                    tx.state = STATES[decided]
                    raise tx.closed(what)
            slots = sorted(tx.sent) or list(range(info.settings.slots))
            outcomes = yield from tx_ops.close(
                tx.topic, info.generation, info.groups, tx.id, slots, commit, now,
                retention, self._heads(info), info.filter_argument,
                trace_argument(tx.topic, info.settings), topic_record=not self.is_cluster,
                by_key=info.settings.merge == "key", stops=info.stop_argument,
                version_retention=info.version_retention_ms)
            other = [STATES[o.state] for o in outcomes if STATES.get(o.state, done) != done]
            if other:
                tx.state = other[0]
                raise tx.closed(what)
            tx.state = done
            return SendCounts(sum(o.halves for o in outcomes), sum(o.merged for o in outcomes),
                              outdated=sum(o.outdated for o in outcomes))

        return (yield from self._on_current(tx.topic, close))

    def _open_transactions(self, topic: str) -> Flow[list[OpenTransaction]]:
        info = yield from self._topic(topic)
        now = yield from self._now()
        return (yield from tx_ops.open_transactions(
            topic, info.settings.slots, info.settings.check_after,
            now - to_ms(info.settings.tx_retention)))

    # -- the check-back: begin (no checker yet), then end with the checker's answer --------

    def _check_begin(self, topic: str, tx_id: str) -> Flow[int]:
        """See whether ``tx_id`` is still open, take the check's lease, and see again (so
        no checker is asked about a transaction closed meanwhile); returns which check this
        is, or raises CheckStep with what happened instead: "closed" (no slot holds it),
        "committed"/"rolled_back" (a close cut off midway, finished now), "busy" (another
        checker holds it, or its interval has not passed) or "abandoned" (the checks ran
        out: rolled back)."""
        check_transaction_id(tx_id)
        info = yield from self._topic(topic)
        settings = info.settings
        yield from self._still_open(topic, tx_id, info)
        now = yield from self._now()
        turn = yield from tx_ops.check_turn(topic, tx_id, now, "begin",
                                            settings.check_interval, settings.max_checks)
        if turn.action == "wait":
            raise CheckStep("busy")
        if turn.action == "abandon":
            # the application may have committed it at the last moment
            with suppress(TransactionClosed):
                yield from self._finish(topic, tx_id, False)
            if turn.counted:
                log.warning("transaction %r of topic %r abandoned after %d checks: rolled "
                            "back", tx_id, topic, turn.checks)
            yield from self._check_done(topic, tx_id, "done")
            raise CheckStep("abandoned")
        yield from self._still_open(topic, tx_id, info)
        return turn.checks

    def _still_open(self, topic: str, tx_id: str, info: TopicInfo) -> Flow[None]:
        """Raise CheckStep unless ``tx_id`` is open in some slot and closed neither by the
        topic nor in any slot (a close cut off midway is finished here, without a
        checker)."""
        now = yield from self._now()
        open_slots, closing = yield from tx_ops.state_of(
            topic, tx_id, info.settings.slots, now - to_ms(info.settings.tx_retention))
        if open_slots and closing is None:
            return
        if open_slots and closing is not None:
            try:
                yield from self._finish(topic, tx_id, closing == "committed")
            except TransactionClosed as exc:  # closed the other way meanwhile
                closing = exc.state
        yield from self._check_done(topic, tx_id, "done")
        raise CheckStep(closing if open_slots and closing else "closed")

    def _check_end(self, topic: str, tx_id: str, answer: bool | None) -> Flow[str]:
        """Act on the checker's answer: True commits, False rolls back, None asks again
        after check_interval. Returns "committed", "rolled_back" or "unknown"."""
        if answer is None:
            yield from self._check_done(topic, tx_id, "unknown")
            return "unknown"
        try:
            yield from self._finish(topic, tx_id, answer)
            outcome = "committed" if answer else "rolled_back"
        except TransactionClosed as exc:  # the application closed it meanwhile
            outcome = exc.state
        yield from self._check_done(topic, tx_id, "done")
        return outcome

    def _finish(self, topic: str, tx_id: str, commit: bool) -> Flow[SendCounts]:
        return (yield from self._tx_close(TxState(topic, tx_id, ""), commit))

    def _check_done(self, topic: str, tx_id: str, mode: str) -> Flow[None]:
        info = yield from self._topic(topic)
        now = yield from self._now()
        yield from tx_ops.check_turn(topic, tx_id, now, mode, info.settings.check_interval,
                                     info.settings.max_checks)


def _due(due_at: int, now: int, item: Any) -> str | int:
    """A prepared message's due as a half keeps it: a fixed time stays fixed, any other due
    (now, or a delay) counts from the commit."""
    if isinstance(item, Mapping) and item.get("deliver_at") is not None:
        return due_at
    return f"+{due_at - now}"
