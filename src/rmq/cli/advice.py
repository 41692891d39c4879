"""The one line an ``rmq`` command prints for an error: the library's message, told in the
command line's words and ending with the fix (a library message names library calls, such as
``create_topic()``; a CLI user needs the ``rmq`` command)."""

from __future__ import annotations

import argparse
import difflib
import os

from ..errors import RedisUnavailable, UnboundGroup, UnknownMessage, UnknownTopic

__all__ = ["error_line", "unrecognized"]

PASSWORD_REFUSALS = ("HELLO must be called", "NOAUTH", "Authentication required")


def error_line(exc: BaseException, args: argparse.Namespace) -> str:
    """``exc`` as one line for the user of ``rmq args.command``."""
    if isinstance(exc, UnknownTopic):
        if getattr(args, "action", None) == "delete":
            return f"unknown topic {exc.topic!r}: nothing to delete (`rmq topic list` lists " \
                   "the topics)"
        return f"unknown topic {exc.topic!r}: create it with `rmq topic create {exc.topic}`"
    if isinstance(exc, UnboundGroup):
        return first_line(UnboundGroup(exc.topic, exc.group, exc.bound, fix=(
            f"bind it first with `rmq topic bind {exc.topic} {exc.group}`")))
    line = first_line(exc)
    if isinstance(exc, UnknownMessage):
        # what else becomes of a message: handled, or dead-lettered (cancel takes neither)
        return f"{line}: handled already, or dead-lettered (`rmq dead list` shows those)"
    if isinstance(exc, RedisUnavailable):
        url = getattr(args, "url", None) or os.environ.get("RMQ_REDIS_URL") or ""
        if any(text in line for text in PASSWORD_REFUSALS):
            return ("Redis refused the connection: it requires a password; give it in the URL "
                    "(redis://:PASSWORD@HOST:PORT, or redis://USER:PASSWORD@HOST:PORT for an "
                    "ACL user)")
        if "invalid username-password pair" in line:
            return f"{line.rstrip('.')}; check the user name and password in the URL"
        if "Timeout" in line and url.startswith("rediss://"):
            return (f"{line}; does that port speak TLS? rediss:// needs a server with TLS on "
                    "it (redis:// is plain)")
    return line


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (the rest, such as a log's tail, is for logs)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def unrecognized(parser: argparse.ArgumentParser, args: argparse.Namespace,
                 extra: list[str]) -> str:
    """The error of arguments no option of the command took, with the option meant for a
    misspelt one (``--grup``: "did you mean --group?"), among the command's own options."""
    line = f"unrecognized arguments: {' '.join(extra)}"
    options = _options_of(_command_parser(parser, args))
    for word in extra:
        if word.startswith("-") and word not in options:
            close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1)
            if close:
                return f"{line}; did you mean {close[0]}?"
    return line


def _command_parser(parser: argparse.ArgumentParser,
                    args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` ran: ``rmq topic create``'s, not ``rmq``'s."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _command_parser(chosen, args)
    return parser


def _options_of(parser: argparse.ArgumentParser) -> list[str]:
    return [option for action in parser._actions for option in action.option_strings
            if option.startswith("--")]
