"""``rmq cancel TOPIC MESSAGE_ID [--group G] [--json]``: cancel a message by its id (SPEC §14):
removed where it is pending, its running deliveries told to stop."""

from __future__ import annotations

import argparse
import re
from typing import Any

from .common import check_group, open_client, print_json

__all__ = ["add_parsers", "cancel"]

_MESSAGE_ID = re.compile(r"[0-9a-f]{16}")


def message_id(text: str) -> str:
    """An argparse type: a message id, 16 hex digits (refused while parsing, so a mistyped
    id exits 2 without contacting Redis)."""
    if not _MESSAGE_ID.fullmatch(text.lower()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a message id: 16 hex digits, as "
                                         "rmq send prints it")
    return text.lower()


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def cancel(args: argparse.Namespace) -> None:
    with open_client(args) as client:
        if args.group is not None:
            check_group(client, args.topic, args.group)
        done = client.cancel(args.topic, args.message_id, args.group)
    if args.json:
        print_json({"topic": args.topic, "message_id": args.message_id, "group": args.group,
                    "pending": done.pending, "running": done.running})
        return
    where = "every group" if args.group is None else f"group {args.group!r}"
    print(f"cancelled message {args.message_id} of topic {args.topic!r} in {where}: "
          f"removed {_count(done.pending, 'pending message', 'pending messages')}, told "
          f"{_count(done.running, 'running delivery', 'running deliveries')} to stop")


def add_parsers(commands: Any) -> None:
    p = commands.add_parser("cancel", help="cancel a message: remove it where pending, stop "
                                           "its running deliveries",
                            description="Cancel a message by its id: where it is pending it "
                                        "is removed; a running delivery of it is told to stop "
                                        "(message.superseded) and is dropped, not retried, "
                                        "however it ends. Both are counted cancelled.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("message_id", metavar="MESSAGE_ID", type=message_id,
                   help="the message id (16 hex digits, as rmq send and the console show it)")
    p.add_argument("--group", metavar="GROUP", default=None,
                   help="cancel it in this consumer group only (default: every group)")
    p.add_argument("--json", action="store_true",
                   help="print JSON: the counts of pending messages removed and running "
                        "deliveries told to stop")
    p.set_defaults(run=cancel)
