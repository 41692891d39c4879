"""``rmq topic create|list|show|alter|delete|pause|resume|bind|unbind|limits|transactions``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import TopicConflict
from ..filters import compile_filter
from ..settings import TopicSettings
from . import limits, transactions
from .common import CommandError, at_least_one, open_client, print_json, table

__all__ = ["add_parsers"]

# (option, type, help) for each topic setting; the setting is the option's name with "_".
# Integers are counts or bytes, floats are seconds.
_SETTINGS: list[tuple[str, Any, str]] = [
    ("--slots", int, "shards of the topic, a power of two from 1 to 1024 (default 8); "
                     "fixed at creation"),
    ("--max-retries", int, "deliveries after the first before dead-lettering (default 16)"),
    ("--visibility-timeout", float, "lease of a claim, in seconds (default 30)"),
    ("--max-message-bytes", int, "largest message accepted: body, tag and properties as "
                                 "stored, in bytes (default 4 MiB)"),
    ("--max-delay", float, "how far ahead a delay or deliver-at may point, in seconds "
                           "(default 30 days)"),
    ("--retry-backoff", float, "seconds before the first retry, doubling after (default 1)"),
    ("--retry-backoff-max", float, "cap of the retry backoff, in seconds (default 300)"),
    ("--check-after", float, "seconds after a transaction's last half send before its "
                             "checker is asked (default 6)"),
    ("--check-interval", float, "seconds between two checks of a transaction (default 30)"),
    ("--max-checks", int, "checks of a transaction before it is abandoned (default 15)"),
    ("--tx-retention", float, "seconds a closed transaction's id is remembered "
                              "(default 86400)"),
    ("--trace-retention", float, "how long the trace keeps an event, in seconds (default "
                                 "86400)"),
    ("--trace-cap", int, "at most this many traced events per slot (default 10000)"),
    ("--version-retention", float, "merging by key, how long a key's highest version is "
                                   "remembered after its last versioned send, in seconds "
                                   "(default 86400)"),
]


def _add_settings(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("settings")
    for option, kind, text in _SETTINGS:
        group.add_argument(option, type=kind, metavar="N" if kind is int else "SECONDS",
                           help=text)
    group.add_argument("--serial-keys", action=argparse.BooleanOptionalAction, default=None,
                       help="never run two messages with the same key at once (default off)")
    group.add_argument("--merge", choices=("body", "key"), default=None,
                       help="what merges two pending messages: the same body, key, tag and "
                            "properties (body, the default), or the same key, the newest "
                            "value winning (key); fixed at creation")
    group.add_argument("--trace", action=argparse.BooleanOptionalAction, default=None,
                       help="record every state change of every message (rmq trace; "
                            "default off)")


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    names = [option[2:].replace("-", "_") for option, _, _ in _SETTINGS] + ["serial_keys",
                                                                          "trace", "merge"]
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _describe(settings: TopicSettings) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.to_dict().items())


def _report(args: argparse.Namespace, settings: TopicSettings) -> None:
    if args.json:
        print_json({"name": args.name, "settings": settings.to_dict()})
    else:
        print(f"topic {args.name!r}: {_describe(settings)}")


def create(args: argparse.Namespace) -> None:
    with open_client(args) as client:
        try:
            settings = client.create_topic(args.name, **_settings(args))
        except TopicConflict as exc:
            raise CommandError(_conflict(exc)) from None
    _report(args, settings)


def _option(name: str, value: Any) -> str:
    flag = f"--{name.replace('_', '-')}"
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    return f"{flag} {value}"


def _conflict(exc: TopicConflict) -> str:
    """What to tell a CLI user whose ``topic create`` met the topic with other values of
    the settings given: each difference, and the command that changes them."""
    name, differences = exc.topic, exc.differences
    listed = "; ".join(f"{key} {old}, not {new}" for key, (old, new) in differences.items())
    text = f"topic {name!r} exists with other settings ({listed})"
    alter = [_option(key, new) for key, (_, new) in differences.items() if key not in exc.fixed]
    if alter:
        text += f": `rmq topic alter {name} {' '.join(alter)}` changes them"
    if exc.fixed:
        keep = " ".join(_option(key, old) for key, (old, _) in differences.items()
                        if key in exc.fixed)
        text += (f"{';' if alter else ':'} {' and '.join(exc.fixed)} cannot change after "
                 f"creation (create it with {keep}, or delete the topic and its messages "
                 "first)")
    return text


def alter(args: argparse.Namespace) -> None:
    changes = _settings(args)
    if not changes:
        raise CommandError("nothing to change: give at least one setting option (see --help)")
    with open_client(args) as client:
        _report(args, client.alter_topic(args.name, **changes))


def list_topics(args: argparse.Namespace) -> None:
    with open_client(args) as client:
        found = client.each_topic(lambda info: info)
    for name, problem in found.broken.items():  # one broken topic hides no other
        print(f"rmq: warning: skipping topic {name!r}: {problem}", file=sys.stderr)
    if args.json:
        print_json(list(found.results))
        return
    rows: list[list[object]] = [
        [info.name, info.settings.slots, ",".join(info.groups),
         "paused" if info.paused else "active"] for info in found.results.values()]
    rows += [[name, "?", "", "broken"] for name in found.broken]
    if rows:
        print(table(["topic", "slots", "groups", "state"], sorted(rows, key=lambda r: str(r[0]))))


def show(args: argparse.Namespace) -> None:
    with open_client(args) as client:
        info = client.topic(args.name, fresh=True)
    filters = {group: {"tags": f.tags, "where": f.where} for group, f in info.filters}
    limited = {group: info.limits(group) for group in sorted(info.group_limits)}
    superseding = dict(info.supersede)
    data = {"name": info.name, "groups": list(info.groups), "paused": info.paused,
            "settings": info.settings.to_dict(), "filters": filters,
            "supersede": superseding,
            "limits": {group: limits.as_json(value) for group, value in limited.items()}}
    if args.json:
        print_json(data)
        return
    print(f"topic:   {info.name}{'  (paused)' if info.paused else ''}")
    print(f"groups:  {', '.join(info.groups)}")
    for group in sorted(set(filters) | set(superseding)):
        f, limit = info.filter_of(group), superseding.get(group)
        shown = [f"tags {f.tags}" if f.tags else "", f"where {f.where}" if f.where else "",
                 "" if limit is None else _supersede(limit)]
        print(f"  {group}: {'; '.join(part for part in shown if part)}")
    for name, value in info.settings.to_dict().items():
        print(f"  {name:<20} {value}")
    for group, value in limited.items():
        print(f"limits of {group}: {limits.describe(value)}")


def delete(args: argparse.Namespace) -> None:
    if not args.yes:
        raise CommandError(f"deleting topic {args.name!r} drops every message it holds; "
                           "add --yes to confirm")
    with open_client(args) as client:
        client.delete_topic(args.name)
    print(f"deleted topic {args.name!r}")


def pause(args: argparse.Namespace) -> None:
    with open_client(args) as client:
        client.pause(args.name)
    print(f"paused topic {args.name!r}: consumers stop claiming; sends are still accepted")


def resume(args: argparse.Namespace) -> None:
    with open_client(args) as client:
        client.resume(args.name)
    print(f"resumed topic {args.name!r}")


def bind(args: argparse.Namespace) -> None:
    supersede = args.supersede
    if args.supersede_limit is not None:
        if supersede is False:
            raise CommandError("--supersede-limit goes with --supersede, not --no-supersede")
        supersede = True  # a limit of supersedes in a row: supersede is on
    if args.keep_filters and (args.tags is not None or args.where is not None):
        raise CommandError("--keep-filters keeps the group's filters: give no --tags or "
                           "--where with it")
    with open_client(args) as client:
        added = client.bind(args.name, args.group, tags=args.tags, where=args.where,
                            keep_filters=args.keep_filters, supersede=supersede,
                            supersede_limit=args.supersede_limit)
        info = client.topic(args.name, fresh=True)  # the binding as stored now
    filtered = " with its filters" if info.filter_of(args.group).program else " (no filter)"
    limit = info.supersede_limit(args.group)
    said = "" if limit is None and supersede is None else f"; {_supersede(limit)}"
    print(f"group {args.group!r} {'bound to' if added else 'was already bound to'} "
          f"topic {args.name!r}{filtered}{said}")
    for note in compile_filter(args.tags, args.where).notes():
        print(f"note: in --where, {note}")


def _supersede(limit: int | None) -> str:
    """A group's supersede setting in words (SPEC §14)."""
    return "supersede off" if limit is None else f"supersede on, limit {limit}"


def unbind(args: argparse.Namespace) -> None:
    with open_client(args) as client:
        removed = client.unbind(args.name, args.group)
    print(f"group {args.group!r} {'unbound from' if removed else 'was not bound to'} "
          f"topic {args.name!r}")


def add_parsers(commands: Any) -> None:
    topic = commands.add_parser("topic", help="create, inspect and change topics",
                                description="Create, inspect and change topics.")
    sub = topic.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, run: Any, text: str, *, group: bool = False) -> Any:
        parser = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        if name != "list":
            parser.add_argument("name", metavar="TOPIC", help="topic name")
        if group:
            parser.add_argument("group", metavar="GROUP", help="consumer group name")
        parser.set_defaults(run=run)
        return parser

    for name, run, text in (("create", create, "register a topic (idempotent for equal "
                                               "settings)"),
                            ("alter", alter, "change settings of a topic (not --slots)")):
        parser = action(name, run, text)
        _add_settings(parser)
        parser.add_argument("--json", action="store_true", help="print the settings as JSON")
    action("list", list_topics, "list topics").add_argument(
        "--json", action="store_true", help="print names as a JSON list")
    action("show", show, "show a topic's settings, groups and state").add_argument(
        "--json", action="store_true", help="print JSON")
    action("delete", delete, "delete a topic and every message it holds").add_argument(
        "--yes", action="store_true", help="confirm the deletion")
    action("pause", pause, "stop consumers claiming from a topic")
    action("resume", resume, "let consumers claim from a paused topic again")
    parser = action("bind", bind, "bind a group: it receives every message sent from now on "
                    "that its filters accept (binding again replaces them, unless --keep-filters)",
                    group=True)
    parser.add_argument("--tags", metavar="EXPR",
                        help="tag expression: '*' or 'a || b' (default: no tag filter)")
    parser.add_argument("--where", metavar="EXPR",
                        help="SQL condition on properties and TAG, e.g. "
                             "\"region = 'eu' AND price > 10\" (default: none)")
    parser.add_argument("--keep-filters", action="store_true",
                        help="keep a bound group's filters (to change only its supersede)")
    parser.add_argument("--supersede", action=argparse.BooleanOptionalAction, default=None,
                        help="a send of a message one of the group's consumers is running "
                             "tells that delivery to stop (default: a bound group keeps its "
                             "setting, a new one is off)")
    parser.add_argument("--supersede-limit", type=at_least_one, metavar="N",
                        help="with --supersede: after N supersedes in a row of one message, "
                             "its next delivery runs to its end (default 3)")
    action("unbind", unbind, "unbind a group: it receives no new messages", group=True)
    limits.configure(action("limits", limits.limits,
                            "show or set a group's fleet-wide limits (held by all its "
                            "consumers together)"))
    transactions.configure(action("transactions", transactions.transactions,
                                  "list a topic's open transactions (their age, half "
                                  "messages and checks), or commit or roll one back"))
