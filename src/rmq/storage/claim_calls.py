"""What every claim script shares, on the client's side: the KEYS of a slot claimed from,
the leading ARGV (``lua/includes/claim_args.lua`` reads them), and the claimed messages
in the reply (``lua/includes/take.lua``'s ``take_chosen``), and those of them the client
cannot decode (``Undecodable``), which the claim dead-letters (``dead.dead_letter``)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from ..message import Message, UnfrozenMessage, claimed_message
from ..settings import TopicSettings
from .codec import DECODE_ERRORS, decode_parts, decode_problem
from .keys import SlotKeys
from .limits import ClaimLimit, claim_limit_keys

__all__ = ["claim_keys", "limited_claim_keys", "ClaimArgs", "claim_args", "parse_claimed",
           "Undecodable", "SERIAL_SCAN", "PROMOTE_LIMIT"]

PROMOTE_LIMIT = 1000  # due delayed messages one slot promotes per call at most
# How deep a serial topic's claim looks past messages of keys in flight, per slot: a busy
# key's backlog up to this size does not hold back the keys queued behind it.
SERIAL_SCAN = 1000


@lru_cache(maxsize=4096)
def claim_keys(topic: str, group: str, slots: tuple[int, ...],
               traced: bool = False) -> tuple[str, ...]:
    """The first slot's generation, then per slot its delivery-id counter and group keys,
    and its trace log when ``traced``."""
    keys: list[str] = [SlotKeys(topic, slots[0]).generation]
    for slot in slots:
        slot_keys = SlotKeys(topic, slot)
        keys.append(slot_keys.seq)
        keys.extend(slot_keys.group(group).all())
        if traced:
            keys.append(slot_keys.trace_log)
    return tuple(keys)


@lru_cache(maxsize=4096)
def limited_claim_keys(topic: str, group: str, slots: tuple[int, ...],
                       traced: bool = False) -> tuple[str, ...]:
    """``claim_keys``, then the group's limit keys (a single node's claim: limit_claim.lua)."""
    return claim_keys(topic, group, slots, traced) + claim_limit_keys(topic, group)


class ClaimArgs(NamedTuple):
    """ARGV[1..14] of claim.lua and claim_heads.lua. The field order is
    ``lua/includes/claim_args.lua``'s ARGV order, and its header and locals use these
    names: the two change together (tests/test_script_loader.py checks that they agree).
    A script's own arguments follow them (``[*args, ...]``)."""

    now: int
    max_count: int
    lease_ms: int
    serial: int  # 1 if the topic is key-serial
    promote_limit: int
    scan: int  # serial topics: how deep to look into a slot's ready messages (>= count)
    generation: str
    holder: str
    limit_group: str  # "": the script applies no limits (a cluster's call)
    limit_waiter: str
    limit_wait_ms: int
    trace: str  # the topic's trace argument (``trace.trace_argument``)
    by_key: int  # 1 if the topic merges by key (its messages are in the groups' values)
    supersede: int  # 1 if the group supersedes (its deliveries are noted in `running`)

    def bounded(self, count: int) -> ClaimArgs:
        """The same claim, of at most ``count`` messages (a cluster's share of one slot)."""
        return self._replace(max_count=count, scan=_scan(bool(self.serial), count))


def claim_args(settings: TopicSettings, *, generation: str, now: int, count: int,
               lease_ms: int, holder: str, group: str, limit: ClaimLimit | None,
               trace: str = "", supersede: bool = False) -> ClaimArgs:
    """A claim's arguments; ``limit``: the group's limits, applied by the script itself (a
    single node), or None (a cluster's call)."""
    serial = settings.serial_keys
    limit_group, limit_waiter, limit_wait_ms = (
        ("", "", 0) if limit is None else (group, limit.waiter, limit.wait_ms))
    # In the fields' order: one is built per claim, and by keyword it takes twice the time
    # (tests/test_script_loader.py checks that each argument lands in its field).
    return ClaimArgs(now, count, lease_ms, int(serial), PROMOTE_LIMIT, _scan(serial, count),
                     generation, holder, limit_group, limit_waiter, limit_wait_ms, trace,
                     int(settings.merge == "key"), int(supersede))


def _scan(serial: bool, count: int) -> int:
    return max(count, SERIAL_SCAN) if serial else count


class Undecodable(NamedTuple):
    """A claimed delivery whose stored message the client cannot decode: its ``message``
    (the member whole as its body) and what is wrong (``error``)."""

    message: Message
    error: str


def parse_claimed(topic: str, generation: str, group: str, slots: Sequence[int],
                  reply: list[Any], lease_until: int, trace: str = "", *,
                  undecodable: list[Undecodable], by_key: bool = False) -> list[Message]:
    """The messages of a claim's reply (take.lua's take_chosen), after its first field, each
    carrying the generation it was claimed under (what settling it checks) and the trace
    argument its settles pass. A message that cannot be decoded is not among them: it goes
    to ``undecodable``, for the claim to dead-letter, so it strands none of the others.
    ``by_key``: the topic merges by key, so a message's id hashes its identity (its key,
    else its body) rather than all of it."""
    shares = reply[1]
    at = 2 + 2 * shares
    seqs = dict(zip(reply[2:at:2], reply[3:at:2], strict=True))  # slot index -> next id
    out: list[Message] = []
    append = out.append
    while at < len(reply):
        # a run of messages that share priority, attempts and due time
        n, priority, attempts, due = reply[at:at + 4]
        at += 4
        fields = iter(reply[at:at + 2 * n])
        at += 2 * n
        for index, member in zip(fields, fields, strict=True):
            seq = seqs[index]
            seqs[index] = seq + 1
            # most members are the bare body (codec.encode_member): no call for those
            if member[:1] == b"\x00":
                try:  # (costs nothing until it catches)
                    body, key, tag, properties = decode_parts(member)
                except DECODE_ERRORS as error:
                    undecodable.append(Undecodable(claimed_message(
                        topic, group, slots[index - 1], seq, member, priority, attempts, due,
                        None, lease_until, generation, trace=trace), decode_problem(error)))
                    continue
                out.append(claimed_message(topic, group, slots[index - 1], seq, body,
                                           priority, attempts, due, key, lease_until,
                                           generation, tag, properties, member, trace))
            else:
                # claimed_message(...) written out: the call cost a third of this
                message: Any = UnfrozenMessage()
                message.topic = topic
                message.group = group
                message.slot = slots[index - 1]
                message.seq = seq
                message.body = member
                message.priority = priority
                message.attempts = attempts
                message.due_at = due
                message.key = None
                message.lease_until = lease_until
                message.generation = generation
                message.tag = None
                message.properties = {}
                message._member = member
                message._trace = trace
                message._links = ()
                message._stop = None
                message.__class__ = Message
                append(message)
    if by_key:
        for message in out:
            object.__setattr__(message, "_member",
                               message.body if message.key is None else message.key)
    return out
