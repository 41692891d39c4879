"""A group's fleet-wide limits at claim (SPEC §10, docs/limits.md): sans-IO operations over
the group's limit keys (``keys.LimitKeys``), which live beside the registry entry on the
topic's tag, so one node holds them on a cluster as on a single node.

Every claim applies the limits as Redis holds them, and says what it found (``Verdict``).
On a single node the claim script does it itself (``lua/includes/limit_claim.lua``): it
takes the group's limit keys (``claim_limit_keys``) and what a held-back claimer registers
(``ClaimLimit``). On a cluster, where the limit keys live on the topic's tag and the slots
on their own, ``reserve_call`` grants units of capacity with the claim's first round (and
holds them with placeholder permits), the claim takes at most that many messages, and
``settle`` turns the placeholders into the deliveries' permits and gives back what the
claim did not take (``storage/claim.py``).

Under a ``max_batches`` a claim takes one unit whatever its count, and holds it while one of
its deliveries holds its permit (every delivery of such a group holds one): the claim names
its deliveries in the group's batches hash, which the next claim reads
(``lua/includes/limit_grant.lua``), so settling and extending need nothing more than the
permits' own.

A permit's score is its delivery's lease deadline, so a crashed consumer's capacity returns
when its leases expire; settling a delivery returns it at once (on a single node an ack in
its own call: ``settle.ack``; otherwise ``free``), with one token per unit on the wake list
for one waiting consumer each. Extending a lease moves its permit with it, and extends no
lease whose permit is gone (a claim may have taken its unit): on a single node in the
lease's own script call (``settle.extend``), on a cluster with ``extend`` first.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from ..errors import CorruptRegistry
from ..message import Message
from ..settings import DEFAULT_GROUP, GroupLimits
from .calls import Call, Op, script_call
from .keys import LimitKeys, RegistryKeys
from .scripts import script

__all__ = ["ClaimLimit", "Verdict", "Reservation", "claim_limit_keys", "parse_verdict",
           "reserve_call", "settle", "free", "extend", "wake_key", "set_limits",
           "LIMIT_NAMES"]

LIMIT_NAMES = ("max_in_flight", "rate", "max_batches")  # GroupLimits' fields, in order


def set_limits(name: str, group: str, changes: Mapping[str, Any]) -> Op[GroupLimits | None]:
    """Change the group's limits named in ``changes`` (``LIMIT_NAMES``; a value of None
    removes that limit), keeping the others as Redis holds them, in one script
    (``lua/set_limits.lua``): concurrent changes of different limits all hold. Returns the
    limits now stored, or None when it would set a limit of a group that is not bound
    (writing nothing). No limit left removes the group's entry, so an unlimited group costs
    its claims nothing. The values must be checked (``GroupLimits``) before."""
    keys = RegistryKeys(name)
    (stored,) = yield [script_call(
        script("set_limits"), [keys.limits, keys.groups],
        [group, *(json.dumps(_stored_value(changes[limit]), separators=(",", ":"))
                  if limit in changes else "keep" for limit in LIMIT_NAMES), DEFAULT_GROUP])]
    if isinstance(stored, list):
        if stored[0] == b"unbound":
            return None
        raise CorruptRegistry(name, f"the limits of group {group!r} are not RMQ's")
    return GroupLimits.from_json(stored) if stored else GroupLimits()


def _stored_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


class ClaimLimit(NamedTuple):
    """What a claim passes for its group's limits: the ``waiter`` registered as waiting (for
    up to ``wait_ms``) when the limits grant nothing."""

    waiter: str
    wait_ms: int


class Verdict(NamedTuple):
    """What a claim found of its group's limits: whether it has any (``limited``), whether
    its deliveries hold permits that settling frees (``permits``: a max_in_flight or a
    max_batches), the
    units it could take (``granted``) and, when fewer than it asked for, when more may be
    granted with no settle in between (``wake_at``, epoch ms, or None)."""

    limited: bool
    permits: bool
    granted: int
    wake_at: int | None


@lru_cache(maxsize=4096)
def claim_limit_keys(topic: str, group: str) -> tuple[str, ...]:
    """The 5 keys a single node's claim script takes last (limit_claim.lua)."""
    keys = LimitKeys(topic, group)
    return (keys.limits, keys.permits, keys.rate, keys.waiters, keys.batches)


def parse_verdict(tail: Any, granted: int) -> Verdict:
    """What limit_reserve.lua returns, or the limit's part of a claim script's reply
    (limit_close): 0 for a group without limits (then all of ``granted`` was), else
    [granted, wake_at, permits]."""
    if tail == 0:
        return Verdict(False, False, granted, None)
    units, wake_at, permits = tail
    return Verdict(True, bool(permits), int(units), None if wake_at < 0 else int(wake_at))


class Reservation(NamedTuple):
    """What ``limit_reserve.lua`` granted under ``token``: ``units`` the claim may take;
    ``held``: whether placeholder permits hold them (a max_in_flight or a max_batches is
    set)."""

    token: str
    units: int
    held: bool


def reserve_call(topic: str, group: str, wanted: int, now: int, lease_ms: int, token: str,
                 limit: ClaimLimit) -> Call:
    """``limit_reserve.lua``: grant up to ``wanted`` units for one claim whose leases run
    ``lease_ms`` from ``now`` (its reply: ``parse_verdict``). ``limit.waiter`` is registered
    as waiting (for up to ``limit.wait_ms``) when held back."""
    keys = LimitKeys(topic, group)
    return script_call(script("limit_reserve"),
                       [keys.limits, keys.permits, keys.rate, keys.waiters, keys.batches],
                       [group, wanted, now, now + lease_ms, token, limit.waiter, limit.wait_ms])


def settle(topic: str, group: str, reservation: Reservation, now: int, lease_until: int,
           claimed: Sequence[Message]) -> Op[int]:
    """After the claim: permits for the ``claimed`` deliveries (until ``lease_until``), the
    rate log counting them, the unused units given back. Returns the units given back."""
    keys = LimitKeys(topic, group)
    (given_back,) = yield [script_call(
        script("limit_settle"),
        [keys.permits, keys.rate, keys.waiters, keys.wake, keys.batches],
        [now, reservation.token, reservation.units, lease_until, int(reservation.held),
         *(m.id for m in claimed)])]
    return int(given_back)


def _by_group(messages: Sequence[Message]) -> dict[tuple[str, str], list[str]]:
    if not messages:
        return {}
    topic, group = messages[0].topic, messages[0].group
    if all(m.topic == topic and m.group == group for m in messages):  # (most batches)
        return {(topic, group): [f"{m.slot}-{m.seq}" for m in messages]}
    ids: dict[tuple[str, str], list[str]] = defaultdict(list)
    for m in messages:
        ids[(m.topic, m.group)].append(m.id)
    return ids


def free(messages: Sequence[Message], now: int) -> Op[int]:
    """The permits of settled deliveries given back (each group's in one call); returns how
    many still held one."""
    calls = []
    for (topic, group), ids in _by_group(messages).items():
        keys = LimitKeys(topic, group)
        calls.append(script_call(script("limit_free"), [keys.permits, keys.waiters, keys.wake],
                                 [now, *ids]))
    if not calls:
        return 0
    freed = yield calls
    return sum(int(n) for n in freed)


def extend(messages: Sequence[Message], until_ms: int) -> Op[list[bool]]:
    """On a cluster, ahead of the leases: the permits of ``messages`` still held move to
    ``until_ms`` (never earlier than they were); per message, whether its permit was held.
    Only those leases may then be extended (``lua/limit_extend.lua``)."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for at, m in enumerate(messages):
        groups[(m.topic, m.group)].append(at)
    calls = [script_call(script("limit_extend"), [LimitKeys(topic, group).permits],
                         [until_ms, *(messages[at].id for at in ats)])
             for (topic, group), ats in groups.items()]
    if not calls:
        return []
    replies = yield calls
    held = [False] * len(messages)
    for ats, flags in zip(groups.values(), replies, strict=True):
        for at, flag in zip(ats, flags, strict=True):
            held[at] = bool(flag)
    return held


def wake_key(topic: str, group: str) -> str:
    """The list a consumer held back by the group's limits BLPOPs a token from."""
    return LimitKeys(topic, group).wake
