"""A group's fleet-wide limits at claim (SPEC §10, docs/limits.md): sans-IO operations over
the group's limit keys (``keys.LimitKeys``), which live beside the registry entry on the
topic's tag, so one node holds them on a cluster as on a single node.

A limited group's claim takes three round trips: ``reserve`` grants units of capacity (and
holds them with placeholder permits), the claim takes at most that many messages, and
``settle`` turns the placeholders into the deliveries' permits and gives back what the
claim did not take. A permit's score is its delivery's lease deadline, so a crashed
consumer's capacity returns when its leases expire; settling a delivery (``free``) returns
it at once, with one token per unit on the wake list for one waiting consumer each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from ..message import Message
from .calls import Op, command, script_call
from .keys import LimitKeys
from .scripts import script

__all__ = ["Reservation", "reserve", "settle", "free", "extend", "wake_key"]


class Reservation(NamedTuple):
    """What ``reserve`` granted: ``units`` the claim may take; when fewer than wanted,
    ``wake_at`` (epoch ms, or None) when more may be granted with no settle in between;
    ``held``: whether placeholder permits hold the units (a max_in_flight is set)."""

    token: str
    units: int
    wake_at: int | None
    held: bool


def reserve(topic: str, group: str, wanted: int, now: int, lease_ms: int, token: str,
            waiter: str, wait_ms: int) -> Op[Reservation]:
    """Grant up to ``wanted`` units for one claim whose leases run ``lease_ms`` from
    ``now``. ``waiter`` is registered as waiting (for up to ``wait_ms``) when held back."""
    keys = LimitKeys(topic, group)
    (reply,) = yield [script_call(
        script("limit_reserve"), [keys.limits, keys.permits, keys.rate, keys.waiters],
        [group, wanted, now, now + lease_ms, token, waiter, wait_ms])]
    units, wake_at, held = (int(v) for v in reply)
    return Reservation(token, units, None if wake_at < 0 else wake_at, bool(held))


def settle(topic: str, group: str, reservation: Reservation, now: int, lease_until: int,
           claimed: Sequence[Message]) -> Op[int]:
    """After the claim: permits for the ``claimed`` deliveries (until ``lease_until``), the
    rate log counting them, the unused units given back. Returns the units given back."""
    keys = LimitKeys(topic, group)
    (given_back,) = yield [script_call(
        script("limit_settle"),
        [keys.permits, keys.rate, keys.waiters, keys.wake],
        [now, reservation.token, reservation.units, lease_until, int(reservation.held),
         *(m.id for m in claimed)])]
    return int(given_back)


def _by_group(messages: Iterable[Message]) -> dict[tuple[str, str], list[str]]:
    ids: dict[tuple[str, str], list[str]] = defaultdict(list)
    for m in messages:
        ids[(m.topic, m.group)].append(m.id)
    return ids


def free(messages: Iterable[Message], now: int) -> Op[int]:
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


def extend(messages: Iterable[Message], until_ms: int) -> Op[None]:
    """The permits of deliveries whose leases were extended follow them to ``until_ms``
    (only a permit still held: XX never brings a given back one back)."""
    calls = []
    for (topic, group), ids in _by_group(messages).items():
        pairs: list[object] = []
        for delivery in ids:
            pairs += (until_ms, delivery)
        calls.append(command("ZADD", LimitKeys(topic, group).permits, "XX", *pairs))
    if calls:
        yield calls


def wake_key(topic: str, group: str) -> str:
    """The list a consumer held back by the group's limits BLPOPs a token from."""
    return LimitKeys(topic, group).wake
