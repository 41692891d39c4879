"""``rmq topic limits TOPIC [--group G] [--max-in-flight N|none] [--rate C/S|none]
[--max-batches N|none]``: show or set a group's fleet-wide limits (docs/limits.md)."""

from __future__ import annotations

import argparse
from typing import Any

from ..settings import DEFAULT_GROUP, GroupLimits
from .common import check_group, open_client, print_json

__all__ = ["configure", "describe", "as_json", "limits"]

_KEEP = object()  # an option not given: that limit stays as it is


def describe(limits: GroupLimits) -> str:
    """A group's limits in words, as the CLI prints them."""
    parts = []
    if limits.max_in_flight is not None:
        parts.append(f"max in flight {limits.max_in_flight}")
    if limits.rate is not None:
        count, seconds = limits.rate
        parts.append(f"rate {count} per {seconds:g}s")
    if limits.max_batches is not None:
        parts.append(f"max batches {limits.max_batches}")
    return ", ".join(parts) or "none"


def _count_or_none(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number or 'none', got {text!r}") from None


def _rate(text: str) -> tuple[int, float] | None:
    if text.lower() == "none":
        return None
    count, slash, seconds = text.partition("/")
    try:
        if not slash:
            raise ValueError
        return int(count), float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected COUNT/SECONDS (e.g. 100/60) or 'none', got {text!r}") from None


def as_json(limits: GroupLimits) -> dict[str, Any]:
    return {"max_in_flight": limits.max_in_flight,
            "rate": None if limits.rate is None else
            {"count": limits.rate[0], "seconds": limits.rate[1]},
            "max_batches": limits.max_batches}


def limits(args: argparse.Namespace) -> None:
    given = {name: getattr(args, name) for name in ("max_in_flight", "rate", "max_batches")
             if getattr(args, name) is not _KEEP}  # a limit left out keeps its value
    with open_client(args) as client:
        if not given:  # setting one, the library names a group not bound (and the fix)
            check_group(client, args.name, args.group)
        current = (client.set_limits(args.name, args.group, **given) if given
                   else client.limits(args.name, args.group))
    if args.json:
        print_json({"topic": args.name, "group": args.group, **as_json(current)})
    else:
        print(f"limits of group {args.group!r} of topic {args.name!r}: {describe(current)}")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--group", default=DEFAULT_GROUP,
                        help=f"the consumer group (default {DEFAULT_GROUP!r})")
    parser.add_argument("--max-in-flight", type=_count_or_none, default=_KEEP,
                        metavar="N|none",
                        help="at most N of the group's messages in flight at once, across "
                             "every consumer (1 to 1000000); 'none' removes the limit")
    parser.add_argument("--rate", type=_rate, default=_KEEP, metavar="C/S|none",
                        help="at most C of the group's messages claimed in any S seconds "
                             "(C 1 to 1000000, S 0.001 to 86400); 'none' removes the limit")
    parser.add_argument("--max-batches", type=_count_or_none, default=_KEEP,
                        metavar="N|none",
                        help="at most N of the group's claims in flight at once, across every "
                             "consumer: a batch consumer's batch (or any claim) takes one, "
                             "whatever its size (1 to 1000000); 'none' removes the limit")
    parser.add_argument("--json", action="store_true", help="print JSON")
