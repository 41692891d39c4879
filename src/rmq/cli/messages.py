"""``rmq send``, ``rmq dead list|requeue|purge`` and ``rmq consumers``."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from rmq import ConsumerInfo, TopicInfo

from ..errors import InputError
from ..message import Priority
from .common import (
    CommandError,
    Progress,
    check_group,
    open_client,
    print_json,
    priority_name,
    table,
    text_of,
)

__all__ = ["add_parsers"]


def _priority(text: str) -> int:
    named = Priority.__members__.get(text.upper())
    if named is not None:
        return int(named)
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an integer 0-255 nor low, medium, high") from None


def _deliver_at(text: str) -> int:
    """Epoch milliseconds, or ISO-8601 (local time when it names no zone)."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    return int(when.astimezone().timestamp() * 1000)


def _raw(text: str | None) -> bytes | None:
    # The bytes as given on the command line, also when they are not UTF-8 (Python decodes
    # argv with surrogateescape; fsencode gives the original bytes back).
    return None if text is None else os.fsencode(text)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    options = {"priority": args.priority, "delay_ms": args.delay_ms,
               "deliver_at": args.deliver_at, "slot_basis": _raw(args.slot_basis),
               "key": _raw(args.key), "tag": args.tag,
               "properties": dict(args.property) if args.property else None,
               "version": args.version}
    return {name: value for name, value in options.items() if value is not None}


def _property(text: str) -> tuple[str, Any]:
    """``name=value``: a value that reads as a JSON number, true/false or "string" is that;
    anything else is the string as given."""
    name, equals, raw = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except ValueError:
        return name, raw
    return name, value if isinstance(value, str | int | float | bool) else raw


def _item(body: bytes, as_json: bool, where: str) -> dict[str, Any]:
    if not as_json:
        return {"body": body}
    try:
        return {"json": json.loads(body, parse_constant=_no_constant)}
    except ValueError as exc:
        raise CommandError(f"{where} is not valid JSON: {exc}") from None
    except RecursionError:
        raise CommandError(f"{where} is JSON nested too deeply") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _lines(path: str) -> Iterator[bytes]:
    try:
        stream = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None
    with stream:
        for line in stream:
            line = line.rstrip(b"\r\n")
            if line:
                yield line


def _send_file(client: Any, topic: str, path: str, as_json: bool,
               options: dict[str, Any]) -> Any:
    """Send each line of ``path`` as one batch: every line is read and checked first (a bad
    line is named and nothing is written), then the batch is stored (send_many: one script
    call per slot and 500 messages)."""
    progress = Progress()
    items: list[dict[str, Any]] = []
    numbers: list[int] = []  # the line number of each item (blank lines are skipped)
    for number, line in enumerate(_lines(path), 1):
        items.append({**_item(line, as_json, f"line {number}"), **options})
        numbers.append(number)
        if len(items) % 10_000 == 0:
            progress.update(f"read {len(items):,} lines")
    progress.clear()
    try:
        return client.send_many(topic, items)
    except InputError as exc:  # "batch item N: ..." names the item; say which line it is
        found = re.match(r"batch item (\d+): (.*)", str(exc), re.S)
        if found is None:
            raise
        raise CommandError(f"line {numbers[int(found.group(1))]}: {found.group(2)}; nothing "
                           "was sent") from None


def send(args: argparse.Namespace) -> None:
    if (args.body is None) == (args.file is None):
        raise CommandError("give either a BODY or --file (use --file - for stdin)")
    options = _options(args)
    with open_client(args) as client:
        if args.body is not None:
            item = _item(os.fsencode(args.body), args.json, "BODY")
            result = client.send(args.topic, **item, **options)
            what = ("dropped as outdated: its key has a higher version" if result.outdated
                    else "merged into a pending message" if result.merged else "sent")
            print(f"{what} (topic {args.topic!r}, slot {result.slot}, "
                  f"message id {result.message_id})")
            _say_filtered(client.topic(args.topic), options, "it")
            return
        info = client.topic(args.topic)  # an unknown topic fails before reading any input
        started = time.monotonic()
        counts = _send_file(client, args.topic, args.file, args.json, options)
        sent, merged = counts.sent, counts.merged
    elapsed = time.monotonic() - started
    share = 100 * merged / sent if sent else 0.0
    dropped = f", {counts.outdated} dropped as outdated" if counts.outdated else ""
    print(f"sent {sent} messages to {args.topic!r}, {merged} merged ({share:.1f}%){dropped} "
          f"in {elapsed:.2f}s")
    _say_filtered(info, options, "them")


def _say_filtered(info: TopicInfo, options: dict[str, Any], it: str) -> None:
    """Which groups' filters turned the message away (the filters run on the server as
    Filter.matches does here): what a user who sees a message go nowhere asks first."""
    tag, properties = options.get("tag"), options.get("properties") or {}
    refused = [group for group in info.groups
               if not info.filter_of(group).matches(tag, properties)]
    if not refused:
        return
    names = ", ".join(repr(group) for group in refused)
    if len(refused) == len(info.groups):
        print(f"stored for no group: the filters of {names} turned {it} away (rmq topic "
              f"show {info.name} shows them)")
    else:
        print(f"not stored for {names}: {'its' if len(refused) == 1 else 'their'} filters "
              f"turned {it} away")


def dead(args: argparse.Namespace) -> None:
    if args.action == "purge":
        _purge(args)
        return
    with open_client(args) as client:
        check_group(client, args.topic, args.group)
        if args.action == "requeue":
            count = client.requeue_dead(args.topic, args.group, args.ids)
            if args.json:
                print_json({"requeued": count})
            else:
                print(f"requeued {count} dead letter(s) of {args.topic!r}/{args.group}")
            return
        letters = client.dead_letters(args.topic, args.group)
    if args.ids:
        # an id as listed, or without its generation (slot-seq), as requeue takes it
        wanted = set(args.ids)
        letters = [d for d in letters if d.id in wanted or d.id.rsplit("-", 1)[0] in wanted]
    if args.json:
        for letter in letters:
            print_json({"id": letter.id, "message_id": letter.message_id,
                        "body": letter.body, "key": letter.key,
                        "priority": letter.priority, "attempts": letter.attempts,
                        "error": letter.error, "due_at": letter.due_at,
                        "dead_at": letter.dead_at, "tag": letter.tag,
                        "properties": dict(letter.properties)})
    elif letters:
        print(table(["id", "message id", "attempts", "priority", "died", "error", "body"], [
            [d.id, d.message_id, d.attempts, priority_name(d.priority), _when(d.dead_at),
             text_of(d.error.encode(), 40), text_of(d.body, 50)] for d in letters]))
    elif args.ids:
        print(f"none of the ids given is a dead letter of topic {args.topic!r}, "
              f"group {args.group!r}")
    else:
        print(f"no dead letters in topic {args.topic!r}, group {args.group!r}")


def _purge(args: argparse.Namespace) -> None:
    """Purge after a confirmation: ``--yes``, else a "y" typed on the terminal; with no
    terminal to ask on (a script, a pipe), ``--yes`` is required."""
    if args.ids:
        raise CommandError("purge drops every dead letter of the group; it takes no --ids")
    where = f"topic {args.topic!r}, group {args.group!r}"
    if not args.yes and not sys.stdin.isatty():
        raise CommandError(f"purging deletes every dead letter of {where}; add --yes to "
                           "confirm (there is no terminal to ask on)")
    with open_client(args) as client:
        check_group(client, args.topic, args.group)
        if not args.yes:
            group = client.stats(args.topic).groups.get(args.group)
            held = group.dead if group is not None else 0
            if not held:
                print(f"no dead letters in {where}: nothing to purge")
                return
            # The question goes to stderr, so stdout stays the result (--json) alone.
            print(f"delete all {_count(held, 'dead letter')} of {where}? [y/N] ", end="",
                  file=sys.stderr, flush=True)
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                raise CommandError("purge cancelled: nothing was deleted")
        count = client.purge_dead(args.topic, args.group)
    if args.json:
        print_json({"purged": count})
    else:
        print(f"purged {_count(count, 'dead letter')} of {where}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _when(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000).isoformat(sep=" ", timespec="seconds")


def consumers(args: argparse.Namespace) -> None:
    with open_client(args) as client:
        found = client.consumers(args.topic)
        groups = client.topic(args.topic).groups  # the bound ones, or default if none is
        now = client.now()  # last_seen is the server's time, not this host's
    if args.json:
        for c in found:
            print_json({"id": c.id, "group": c.group, "host": c.host, "pid": c.pid,
                        "alive": c.alive, "concurrency": c.concurrency, "in_flight": c.in_flight,
                        "handled": c.handled, "failed": c.failed, "last_seen": c.last_seen,
                        "started_at": c.started_at})
        return
    if found:
        print(table(["id", "group", "host", "pid", "state", "concurrency", "in flight",
                     "handled", "failed", "last seen"], [
            [c.id, c.group, c.host, c.pid, "alive" if c.alive else "dead", c.concurrency,
             *_numbers(c), f"{(now - c.last_seen) / 1000:.1f}s ago"] for c in found]))
        if not all(c.alive for c in found):
            print(f"a dead consumer's numbers (*) are those of its last heartbeat; it is no "
                  f"longer listed {ConsumerInfo.FORGOTTEN_AFTER / 60:g} minutes after it")
        idle = [g for g in groups if not any(c.alive and c.group == g for c in found)]
        if idle:
            print(f"no consumer alive in group{'s' if len(idle) > 1 else ''} "
                  f"{', '.join(repr(g) for g in idle)} of topic {args.topic!r}")
    else:
        print(f"no consumers registered on {args.topic!r}")


def _numbers(consumer: ConsumerInfo) -> list[Any]:
    """A consumer's in flight, handled and failed: as they are while it lives, marked
    stale (``*``) once it is dead."""
    numbers = [consumer.in_flight, consumer.handled, consumer.failed]
    return numbers if consumer.alive else [f"{n}*" for n in numbers]


def add_parsers(commands: Any) -> None:
    p = commands.add_parser("send", help="send a message, or one per line of a file",
                            description="Send one message, or one per line of --file "
                                        "(blank lines are skipped), with the same options.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("body", metavar="BODY", nargs="?",
                   help="the message body (sent as the bytes given)")
    p.add_argument("--file", metavar="PATH", help="send each line of PATH ('-': stdin)")
    p.add_argument("--json", action="store_true",
                   help="bodies are JSON, sent canonically so equal objects merge")
    p.add_argument("--priority", type=_priority, metavar="P",
                   help="0-255 or low/medium/high (default medium=128); higher first")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--delay-ms", type=int, metavar="MS",
                      help="due in MS milliseconds; duplicates sent meanwhile merge into it")
    when.add_argument("--deliver-at", type=_deliver_at, metavar="TIME",
                      help="due at TIME: epoch ms or ISO-8601 (local time if no zone)")
    p.add_argument("--slot-basis", metavar="TEXT", help="hash this instead of the body")
    p.add_argument("--key", metavar="TEXT", help="the message key (serial topics)")
    p.add_argument("--tag", metavar="TAG", help="the message's tag (what --tags filters on)")
    p.add_argument("--version", type=int, metavar="N",
                   help="on a topic merging by key, the value's version: one older than the "
                        "highest sent for its key is dropped (0 <= N < 2**53)")
    p.add_argument("--property", type=_property, action="append", metavar="NAME=VALUE",
                   help="a property (repeatable) for the groups' --where filters: a JSON "
                        "number, true, false or \"string\" is that, anything else a string")
    p.set_defaults(run=send, late_positional="body")

    p = commands.add_parser("dead", help="list, requeue or purge dead letters",
                            description="List, requeue or purge a group's dead letters.")
    p.add_argument("action", choices=["list", "requeue", "purge"])
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--group", default="default", help="consumer group (default: default)")
    p.add_argument("--ids", nargs="+", metavar="ID",
                   help="dead-letter ids (as listed) to show or requeue; default all")
    p.add_argument("--json", action="store_true",
                   help="print JSON: the list as JSON lines, the count requeued or purged")
    p.add_argument("--yes", action="store_true",
                   help="purge without asking (required when not run on a terminal)")
    p.set_defaults(run=dead)

    p = commands.add_parser("consumers", help="list a topic's consumers and their liveness",
                            description="List the consumers registered on a topic.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--json", action="store_true", help="print JSON lines")
    p.set_defaults(run=consumers)
