"""Transactional messages (SPEC §12, docs/transactions.md): half messages stored in the slot
of their final home, a slot's commit or rollback as one atomic and idempotent script, the
topic's record of closed ids, the open transactions of a topic read for the check-back, the
console and the CLI, and the check-back's lease (``lua/tx_*.lua``). Sans-IO operations, as
``send.py``.

``topic_record``: on a single node the slots' scripts are passed the topic's record of
closed ids and read (a send) or write (a close) it in the same atomic call; on a cluster it
lives on another node, and the client calls ``closed_state`` before a half send and
``record_close`` before a close."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import groupby
from typing import Any, NamedTuple

from ..message import message_id_of
from .calls import Call, Op, command, script_call
from .codec import decode_parts, scored_pairs, to_ms
from .generation import check_stored
from .keys import HeadsKeys, SlotKeys, TxSlotKeys, TxTopicKeys, wake_channel
from .scripts import script
from .send import MAX_SCRIPT_BATCH, Outgoing
from .snapshot import SnapshotRow

__all__ = [
    "SlotOutcome",
    "TxArgs",
    "OpenTransaction",
    "TransactionStats",
    "HALVES",
    "DONE",
    "COMMITTED",
    "ROLLED_BACK",
    "UNKNOWN",
    "send_halves",
    "close",
    "record_close",
    "closed_state",
    "open_transactions",
    "check_turn",
    "state_of",
    "CheckTurn",
    "SlotTransactions",
    "stats",
    "snapshot_halves",
    "topic_keys",
]

# What the scripts answer first (lua/includes/tx_state.lua).
DONE, COMMITTED, ROLLED_BACK, UNKNOWN = 0, 1, 2, 3
STATES = {COMMITTED: "committed", ROLLED_BACK: "rolled_back"}


class TxArgs(NamedTuple):
    """ARGV[1..4] of every transaction script (``lua/tx_*.lua``), each script's own arguments
    after them (``(*TxArgs(...), ...)``). The field order is ``lua/includes/tx_args.lua``'s
    ARGV order, and its header and locals use these names: the two change together
    (tests/test_script_loader.py checks that they agree). A script that does not use one is
    passed ``""``."""

    tx_id: str
    now: int
    retention_ms: int | str = ""  # how long a closed id is remembered
    generation: str = ""  # the topic's, as the client read it: a slot's script checks it


class SlotOutcome(NamedTuple):
    """What a slot's script did: ``state`` one of DONE, COMMITTED, ROLLED_BACK, UNKNOWN;
    ``halves`` the half messages stored (a send) or closed (a commit, a rollback);
    ``merged`` how many of a commit's halves merged into pending messages, ``outdated``
    how many were dropped as older than their key's version."""

    slot: int
    state: int
    halves: int
    merged: int = 0
    outdated: int = 0


def send_halves(topic: str, generation: str, tx_id: str, part: str, before: dict[int, int],
                batch: Sequence[Outgoing], dues: Sequence[str | int], now: int,
                retention: float, topic_record: bool = False) -> Op[list[SlotOutcome]]:
    """Store ``batch`` as half messages of the part ``part`` of transaction ``tx_id``: one
    tx_send.lua call per slot (at most MAX_SCRIPT_BATCH messages each), pipelined. ``dues``:
    each message's due as tx_send.lua keeps it, ``"+<ms>"`` after the commit (a delay, or
    ``"+0"``) or epoch ms (a fixed time). ``before``: how many halves the part sent to each
    slot before (a re-run sends from 0 again, and stores only what goes beyond).
    ``topic_record``: each call also refuses an id the topic closed (a single node). Raises
    TopicGone as ``send`` does."""
    by_slot: dict[int, list[int]] = defaultdict(list)
    for index, message in enumerate(batch):
        by_slot[message.slot].append(index)
    calls: list[Call] = []
    slots: list[int] = []
    tx_send, keep = script("tx_send"), to_ms(retention)
    record = (TxTopicKeys(topic).closed,) if topic_record else ()
    tx = TxArgs(tx_id=tx_id, now=now, retention_ms=keep, generation=generation)
    for slot, indexes in by_slot.items():
        sent = before.get(slot, 0)
        keys = (SlotKeys(topic, slot).generation, *TxSlotKeys(topic, slot).of(tx_id), *record)
        for start in range(0, len(indexes), MAX_SCRIPT_BATCH):
            chunk = indexes[start : start + MAX_SCRIPT_BATCH]
            # tx_send.lua's own arguments: part, before, then the runs
            calls.append(Call((*tx, part, sent, *_runs(batch, dues, chunk)), tx_send, keys))
            slots.append(slot)
            sent += len(chunk)
    replies = yield calls
    for reply in replies:
        check_stored(topic, reply)
    return [SlotOutcome(slot, int(r[0]), int(r[1])) for slot, r in zip(slots, replies,
                                                                         strict=True)]


def _runs(batch: Sequence[Outgoing], dues: Sequence[str | int], chunk: list[int]) -> list[Any]:
    """tx_send.lua's runs: ``priority, due, n, member...`` for messages sharing both, or
    ``priority, due, -n, version..., member...`` for those carrying versions
    (lua/includes/versions.lua)."""
    args: list[Any] = []
    for (priority, due, versioned), run in groupby(
            chunk, key=lambda i: (batch[i].priority, dues[i], batch[i].version is not None)):
        messages = [batch[i] for i in run]
        if versioned:
            args += (priority, due, -len(messages), *(m.version for m in messages))
        else:
            args += (priority, due, len(messages))
        args += (m.member for m in messages)
    return args


def close(topic: str, generation: str, groups: Sequence[str], tx_id: str, slots: Sequence[int],
          commit: bool, now: int, retention: float, heads: bool, filters: str = "",
          trace: str = "", *, topic_record: bool, by_key: bool, stops: str = "",
          version_retention: int) -> Op[list[SlotOutcome]]:
    """Commit (``commit``) or roll back ``tx_id`` in each of ``slots``: one script call per
    slot, pipelined, each atomic and idempotent. ``groups``, ``heads``, ``filters``,
    ``trace``: as for ``send``. ``topic_record``: each call also checks and writes the
    topic's record of closed ids (a single node; on a cluster ``record_close`` comes
    first). ``by_key``: the topic merges by key (a commit merges as a send does);
    ``stops``: the groups' supersede (``TopicInfo.stop_argument``), as for ``send``. Raises
    TopicGone as ``send`` does (a slot of a gone topic closes nothing)."""
    record = [TxTopicKeys(topic).closed] if topic_record else []
    tx = TxArgs(tx_id=tx_id, now=now, retention_ms=to_ms(retention), generation=generation)
    calls = [_commit_call(topic, tx, groups, slot, heads, filters, trace, topic_record, by_key,
                          stops, version_retention)
             if commit else
             script_call(script("tx_rollback"),
                         [SlotKeys(topic, slot).generation, *TxSlotKeys(topic, slot).of(tx_id),
                          *record], tx)
             for slot in slots]
    replies = yield calls
    for reply in replies:
        check_stored(topic, reply)
    return [SlotOutcome(slot, int(r[0]), int(r[1]), int(r[2]) if commit else 0,
                        int(r[3]) if commit and len(r) > 3 else 0)
            for slot, r in zip(slots, replies, strict=True)]


def _commit_call(topic: str, tx: TxArgs, groups: Sequence[str], slot: int, heads: bool,
                 filters: str, trace: str, topic_record: bool, by_key: bool, stops: str,
                 version_retention: int) -> Call:
    head, groups_keys = _commit_keys(topic, slot, tuple(groups), heads, trace != "", by_key)
    record = (TxTopicKeys(topic).closed,) if topic_record else ()
    # tx_commit.lua's own arguments: channel, heads_slot, filters, trace, topic_record,
    # by_key (merging by key, the halves' versions are checked), stops
    return Call((*tx, wake_channel(topic), slot if heads else "", filters, trace,
                 "1" if topic_record else "", f"v{version_retention}" if by_key else "",
                 stops),
                script("tx_commit"),
                (*head, *TxSlotKeys(topic, slot).of(tx.tx_id), *record, *groups_keys))


def record_close(topic: str, tx_id: str, commit: bool, now: int, retention: float) -> Op[int]:
    """Record in the topic that ``tx_id`` closes (commits when ``commit``), before its slots
    close (tx_decide.lua): DONE when the close stands (recorded now or the same way
    before), else COMMITTED or ROLLED_BACK, how it was closed before."""
    tx = TxArgs(tx_id=tx_id, now=now, retention_ms=to_ms(retention))
    # tx_decide.lua's own argument: commit
    (reply,) = yield [script_call(script("tx_decide"), [TxTopicKeys(topic).closed],
                                  (*tx, "1" if commit else "0"))]
    return int(reply)


def closed_state(topic: str, tx_id: str, now: int, retention: float) -> Op[str | None]:
    """How the topic closed ``tx_id`` ("committed", "rolled_back"), or None: open, never
    seen, or closed longer ago than ``retention``. One round trip."""
    (score,) = yield [command("ZSCORE", TxTopicKeys(topic).closed, tx_id)]
    return _closed_as(score, now - to_ms(retention))


def _closed_as(score: bytes | str | float | None, forgotten_before: int = 0) -> str | None:
    """A record of closed ids' score (``closed_ms * 2 + 1`` committed, ``+ 0`` not) as the
    state it records, None when absent or closed before ``forgotten_before``."""
    if score is None:
        return None
    value = int(float(score))
    if value // 2 < forgotten_before:
        return None
    return "committed" if value % 2 else "rolled_back"


@lru_cache(maxsize=4096)
def _commit_keys(topic: str, slot: int, groups: tuple[str, ...], heads: bool, traced: bool,
                 versioned: bool) -> tuple[tuple[str, str], tuple[str, ...]]:
    """What every commit into ``slot`` shares: the slot's generation and clock, and the
    groups' keys (and the versions', and the trace's) as enqueue.lua takes them
    (send.py)."""
    slot_keys = SlotKeys(topic, slot)
    keys: list[str] = []
    for group in groups:
        keys += slot_keys.group(group).all()
        if heads:
            keys += (HeadsKeys(topic, group).ready, HeadsKeys(topic, group).delayed)
    if versioned:
        keys += (slot_keys.versions, slot_keys.versions_seen)
    if traced:
        keys.append(slot_keys.trace_log)
    return (slot_keys.generation, slot_keys.clock), tuple(keys)


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A transaction with half messages still held: its ``slots``, the ``halves`` held there,
    when its first and last half sends were (epoch ms, Redis's clock), the ``checks`` asked
    so far, when the check-back may ask next (``check_due_at``: check_after after the last
    half send, or the lease or interval of the last check), and ``closing``: "committed"
    or "rolled_back" when some slot closed it already (a commit or rollback cut off
    midway, which the check-back finishes without asking), else None."""

    id: str
    slots: tuple[int, ...]
    halves: int
    opened_at: int
    last_send_at: int
    checks: int
    check_due_at: int
    closing: str | None = None
    abandoned: bool = False

    def age_ms(self, now: int) -> int:
        return max(0, now - self.opened_at)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "slots": list(self.slots), "halves": self.halves,
                "opened_at": self.opened_at, "last_send_at": self.last_send_at,
                "checks": self.checks, "check_due_at": self.check_due_at,
                "closing": self.closing, "abandoned": self.abandoned}


def open_transactions(topic: str, slots: int, check_after: float,
                      forgotten_before: int = 0) -> Op[list[OpenTransaction]]:
    """Every open transaction of the topic, oldest first: one round trip over the slots'
    open indexes and the check records, a second (only when some are open) for their sizes
    and whether the topic or another slot closed them already (an id closed before
    ``forgotten_before``, epoch ms, is a new transaction)."""
    tx_keys = TxTopicKeys(topic)
    replies = yield [*(command("ZRANGE", TxSlotKeys(topic, s).open, 0, -1, "WITHSCORES")
                       for s in range(slots)), command("HGETALL", tx_keys.checks)]
    by_id: dict[str, dict[int, int]] = defaultdict(dict)
    for slot, reply in enumerate(replies[:slots]):
        for raw, score in scored_pairs(reply):
            by_id[raw.decode()][slot] = int(score)
    records = {k.decode(): v.decode() for k, v in replies[slots].items()}
    if not by_id:
        return []
    ids = sorted(by_id)
    # each slot's closed ids, then the topic's (which decides when the two differ)
    details = yield [*(command("HGETALL", TxSlotKeys(topic, slot).parts(tx_id))
                       for tx_id in ids for slot in by_id[tx_id]),
                     *(command("ZMSCORE", TxSlotKeys(topic, s).closed, *ids)
                       for s in range(slots)),
                     command("ZMSCORE", tx_keys.closed, *ids)]
    closing: dict[str, str] = {}
    for flat in details[len(details) - slots - 1 :]:
        for tx_id, score in zip(ids, flat, strict=True):
            state = _closed_as(score, forgotten_before)
            if state is not None:
                closing[tx_id] = state
    at = 0
    out = []
    for tx_id in ids:
        opened, halves, last = [], 0, 0
        for sent_at in by_id[tx_id].values():
            parts = details[at]  # part -> halves it stored; ":opened" -> first half send
            at += 1
            first = parts.pop(b":opened", None)
            opened.append(int(first) if first is not None else sent_at)
            halves += sum(int(n) for n in parts.values())
            last = max(last, sent_at)
        checks, next_at, abandoned = _record(records.get(tx_id))
        out.append(OpenTransaction(
            tx_id, tuple(sorted(by_id[tx_id])), halves, min(opened), last, checks,
            max(last + to_ms(check_after), next_at), closing.get(tx_id), abandoned))
    return sorted(out, key=lambda t: (t.opened_at, t.id))


def state_of(topic: str, tx_id: str, slots: int,
             forgotten_before: int = 0) -> Op[tuple[list[int], str | None]]:
    """Where ``tx_id`` is open (its slots), and how the topic or some slot closed it already
    ("committed", "rolled_back", or None; a close before ``forgotten_before``, epoch ms, is
    forgotten): one round trip over every slot."""
    replies = yield [*(call for s in range(slots) for call in (
        command("ZSCORE", TxSlotKeys(topic, s).open, tx_id),
        command("ZSCORE", TxSlotKeys(topic, s).closed, tx_id))),
        command("ZSCORE", TxTopicKeys(topic).closed, tx_id)]
    open_slots = [s for s in range(slots) if replies[2 * s] is not None]
    closing = None
    for score in (*replies[1 : 2 * slots : 2], replies[-1]):  # the slots', then the topic's
        closing = _closed_as(score, forgotten_before) or closing
    return open_slots, closing


def _record(text: str | None) -> tuple[int, int, bool]:
    """A check record ``"checks,next_ms[,a]"`` (lua/tx_check.lua)."""
    if not text:
        return 0, 0, False
    parts = text.split(",")
    return int(parts[0]), int(parts[1]), parts[-1] == "a"


class CheckTurn(NamedTuple):
    """What tx_check.lua granted: ``action`` "check" (ask the checker: the ``checks``-th
    time), "wait", or "abandon" (``counted``: this call counted it abandoned)."""

    action: str
    checks: int
    counted: bool = False


def check_turn(topic: str, tx_id: str, now: int, mode: str, interval: float,
               max_checks: int) -> Op[CheckTurn]:
    """The check-back's lease on ``tx_id``: ``mode`` "begin", "unknown" or "done"."""
    keys = TxTopicKeys(topic)
    # tx_check.lua's own arguments: mode, interval, max_checks
    (reply,) = yield [script_call(script("tx_check"), [keys.checks, keys.abandoned],
                                  (*TxArgs(tx_id=tx_id, now=now), mode, to_ms(interval),
                                   max_checks))]
    action = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
    if action == "ok":
        return CheckTurn("ok", 0)
    return CheckTurn(action, int(reply[1]), action == "abandon" and int(reply[2]) == 1)


@dataclass(frozen=True, slots=True)
class SlotTransactions:
    """One slot: open transactions, half messages held, transactions closed here."""

    slot: int
    open: int
    halves: int
    committed: int
    rolled_back: int


@dataclass(frozen=True, slots=True)
class TransactionStats:
    """A topic's transactions (``stats(topic).transactions``): open ones and their half
    messages now, counts of slot commits and rollbacks, and the transactions abandoned
    (rolled back after ``max_checks`` unanswered checks); per slot in ``slots``."""

    open: int = 0
    halves: int = 0
    committed: int = 0
    rolled_back: int = 0
    abandoned: int = 0
    slots: list[SlotTransactions] = field(default_factory=list)


def stats(topic: str, slots: int) -> Op[TransactionStats]:
    """The topic's transaction figures: one round trip."""
    calls: list[Call] = []
    for s in range(slots):
        keys = TxSlotKeys(topic, s)
        calls += (command("ZRANGE", keys.open, 0, -1),
                  command("HMGET", keys.counts, "halves", "committed", "rolled_back"))
    replies = yield [*calls, command("GET", TxTopicKeys(topic).abandoned)]
    per_slot = []
    ids: set[bytes] = set()
    for s in range(slots):
        open_ids = replies[2 * s]
        ids.update(open_ids)
        halves, committed, rolled_back = (int(v or 0) for v in replies[2 * s + 1])
        per_slot.append(SlotTransactions(s, len(open_ids), halves, committed, rolled_back))
    return TransactionStats(
        open=len(ids), halves=sum(p.halves for p in per_slot),
        committed=sum(p.committed for p in per_slot),
        rolled_back=sum(p.rolled_back for p in per_slot),
        abandoned=int(replies[-1] or 0), slots=per_slot)


HALVES = ""  # the "group" of a snapshot's half messages: they belong to no group yet


def snapshot_halves(topic: str, slot: int, now: int) -> Op[list[SnapshotRow]]:
    """The half messages held in ``slot`` as snapshot rows (state "half", the transaction's
    id in ``id``), transaction by transaction, in send order: two round trips."""
    keys = TxSlotKeys(topic, slot)
    (ids,) = yield [command("ZRANGE", keys.open, 0, -1)]
    names = [raw.decode() for raw in ids]
    lists = yield [command("LRANGE", keys.halves(name), 0, -1) for name in names]
    rows = []
    for name, flat in zip(names, lists, strict=True):
        at = 0
        while at < len(flat):
            priority, due, n = int(flat[at]), flat[at + 1].decode(), int(flat[at + 2])
            due_at = now + int(due[1:]) if due.startswith("+") else int(due)
            if n < 0:  # a run carrying versions: n of them before its members
                n = -n
                at += n
            for member in flat[at + 3 : at + 3 + n]:
                body, key, tag, properties = decode_parts(member)
                rows.append(SnapshotRow(topic, HALVES, slot, "half", priority, due_at, 0, key,
                                        body, name, tag=tag, properties=properties,
                                        message_id=message_id_of(topic, member)))
            at += 3 + n
    return rows


def topic_keys(topic: str, slots: int) -> Op[list[str]]:
    """Every transaction key of the topic (what ``delete_topic`` removes): one round trip
    to find the open transactions' keys."""
    replies = yield [command("ZRANGE", TxSlotKeys(topic, s).open, 0, -1) for s in range(slots)]
    keys = list(TxTopicKeys(topic).all())
    for s, ids in enumerate(replies):
        tx = TxSlotKeys(topic, s)
        keys += (tx.open, tx.closed, tx.counts)
        keys += [k for raw in ids for k in (tx.halves(raw.decode()), tx.parts(raw.decode()))]
    return keys
