"""``rmq trace TOPIC [MESSAGE_ID] [--body BODY] [--key KEY]``: print a message's trace, its
recorded state changes oldest first (docs/trace.md). On a topic merging by key, ``--key``
alone names the message."""

from __future__ import annotations

import argparse
import os
from datetime import datetime
from typing import Any

from .common import CommandError, open_client, print_json, table

__all__ = ["add_parsers", "trace"]


def _when(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def _detail(event: Any) -> str:
    """What an event adds to its name: the merges it counts, why a delivery was told to
    stop, or the error."""
    if event.event == "merged":
        return f"{event.count} send(s), the last at {_when(event.last_time)}"
    if event.event == "superseded":
        return "a newer send told this delivery to stop"
    if event.event == "cancelled":
        return "told to stop" if event.delivery_id else "removed while pending"
    if event.event == "outdated":
        return "a send older than its key's version, dropped"
    return event.error or ""


def trace(args: argparse.Namespace) -> None:
    if args.message_id is None and args.body is None and args.key is None:
        raise CommandError("give a MESSAGE_ID, or --body (and --key) of the message, or "
                           "--key of a message of a topic merging by key")
    with open_client(args) as client:
        events = client.trace(args.topic, args.message_id,
                              body=None if args.body is None else os.fsencode(args.body),
                              key=None if args.key is None else os.fsencode(args.key))
        traced = client.topic(args.topic).settings.trace
    if args.json:
        for event in events:
            print_json(event.to_dict())
    elif events:
        print(f"message {events[0].message_id} of topic {args.topic!r}:")
        print(table(["time", "event", "group", "delivery", "attempt", "consumer", "detail"], [
            [_when(e.time), e.event, e.group, e.delivery_id or "", e.attempt or "",
             e.consumer or "", _detail(e)] for e in events]))
    else:
        state = "" if traced else " (its trace is off: rmq topic alter --trace turns it on)"
        print(f"no trace of that message in topic {args.topic!r}{state}")


def add_parsers(commands: Any) -> None:
    p = commands.add_parser("trace", help="show a message's trace: its state changes",
                            description="Show the recorded state changes of a message of a "
                                        "topic with --trace on, oldest first.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("message_id", metavar="MESSAGE_ID", nargs="?",
                   help="the message id (as send and the console show it)")
    p.add_argument("--body", metavar="BODY", help="the body the message was sent with")
    p.add_argument("--key", metavar="TEXT",
                   help="the key it was sent with (with --body; alone, on a topic merging "
                        "by key: its key's message)")
    p.add_argument("--json", action="store_true", help="print JSON lines")
    p.set_defaults(run=trace)
