"""A group's binding to a topic and its filters, in the registry: ``bind`` and ``unbind``,
and reading the bound groups' filters into what the send script takes (docs/storage.md,
"Filters at send time"). Sans-IO operations, like ``registry.py``.
"""

from __future__ import annotations

import json

from ..errors import CorruptRegistry
from ..filters import Filter
from .calls import Op, command, script_call
from .keys import RegistryKeys, stop_channel
from .scripts import script

__all__ = ["bind", "unbind", "group_filters", "filter_argument", "group_supersede",
           "stop_argument", "KEEP_SUPERSEDE"]

KEEP_SUPERSEDE = -1  # bind's supersede: keep a bound group's as it is


def bind(name: str, group: str, filters: Filter | None,
         supersede: int | None = KEEP_SUPERSEDE) -> Op[bool]:
    """Bind ``group`` to the topic with ``filters`` (an empty Filter: none), replacing the
    ones it had; ``filters=None`` keeps a bound group's filters as they are (what a starting
    consumer does). ``supersede``: its supersede_limit (supersede on), None (off), or
    KEEP_SUPERSEDE (a bound group keeps its own). Returns False if it was bound already.

    A first round only reads: when nothing changes, nothing is written, so a consumer whose
    group is bound starts even on a Redis that is out of memory and refuses writes. The
    change itself is one script (``lua/bind.lua``), which decides again on what it finds:
    a bind keeping the filters that races one setting them can then not erase them. The
    filters are written with the binding, so a client that reads the group bound reads its
    filters too."""
    keys = RegistryKeys(name)
    bound, unbound, stored, limit = yield [command("SISMEMBER", keys.groups, group),
                                           command("SISMEMBER", keys.unbound, group),
                                           command("HGET", keys.filters, group),
                                           command("HGET", keys.supersede, group)]
    record = None if filters is None else _filter_record(filters)
    keeps_supersede = supersede == KEEP_SUPERSEDE or supersede == (
        None if limit is None else int(limit))
    if bool(bound) and not unbound and (filters is None or record == stored) \
            and keeps_supersede:
        return False
    (added,) = yield [script_call(
        script("bind"), [keys.groups, keys.unbound, keys.filters, keys.supersede],
        [group, "keep" if filters is None else "set", record or b"",
         "keep" if supersede == KEEP_SUPERSEDE else "" if supersede is None else supersede])]
    return bool(added)


def _filter_record(filters: Filter) -> bytes | None:
    if not filters.program:
        return None
    return json.dumps({"tags": filters.tags, "where": filters.where,
                       "program": filters.program}, ensure_ascii=False,
                      sort_keys=True).encode("utf-8")


def unbind(name: str, group: str) -> Op[bool]:
    """Unbind ``group``; it is remembered as unbound, so that stats, recovery and
    delete_topic still reach the messages it holds. Its filters and supersede go with the
    binding."""
    keys = RegistryKeys(name)
    (removed,) = yield [command("SREM", keys.groups, group)]
    if removed:
        yield [command("SADD", keys.unbound, group), command("HDEL", keys.filters, group),
               command("HDEL", keys.supersede, group)]
    return bool(removed)


def group_filters(name: str, bound: tuple[str, ...],
                  stored: dict[bytes, bytes]) -> tuple[tuple[str, Filter], ...]:
    """The bound groups' filters as stored by ``bind`` (an entry of a group not bound, left
    by an unbind, is not one)."""
    out = []
    for raw_group, raw in stored.items():
        group = raw_group.decode("utf-8", "replace")
        if group not in bound:
            continue
        out.append((group, _parse_filter(name, group, raw)))
    return tuple(sorted(out))


def _parse_filter(name: str, group: str, raw: bytes) -> Filter:
    try:
        record = json.loads(raw)
        found = Filter(record["tags"], record["where"], record["program"])
        if not isinstance(found.program, str) or not found.program:
            raise ValueError("no program")
        json.loads(found.program)
    except (ValueError, TypeError, KeyError) as exc:
        raise CorruptRegistry(name, f"the filters of group {group!r} are not RMQ's: "
                                    f"{exc}") from None
    return found


def filter_argument(groups: tuple[str, ...], filters: tuple[tuple[str, Filter], ...]) -> str:
    """enqueue.lua's ARGV[5]: one program (or 0) per group in send order, "" if none."""
    if not filters:
        return ""
    programs = dict(filters)
    return "[" + ",".join(programs[g].program if g in programs else "0" for g in groups) + "]"


def group_supersede(name: str, bound: tuple[str, ...],
                    stored: dict[bytes, bytes]) -> tuple[tuple[str, int], ...]:
    """The bound groups with supersede on, each with its supersede_limit, as ``bind``
    stored them."""
    out = []
    for raw_group, raw in stored.items():
        group = raw_group.decode("utf-8", "replace")
        if group not in bound:
            continue
        try:
            limit = int(raw)
        except ValueError:
            raise CorruptRegistry(name, f"the supersede_limit of group {group!r} is not "
                                        f"RMQ's: {raw!r}") from None
        out.append((group, limit))
    return tuple(sorted(out))


def stop_argument(name: str, groups: tuple[str, ...],
                  supersede: tuple[tuple[str, int], ...]) -> str:
    """enqueue.lua's ARGV[8]: "" when no group supersedes, else the stop channel and, per
    group in send order, [name, supersede_limit] or 0 (lua/includes/running.lua)."""
    if not supersede:
        return ""
    limits = dict(supersede)
    return json.dumps({"channel": stop_channel(name),
                       "groups": [[g, limits[g]] if g in limits else 0 for g in groups]},
                      ensure_ascii=False)
