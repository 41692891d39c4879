"""The ``rmq`` command (SPEC §5).

Subcommands: ``server [start|status|stop]``, ``topic ...``, ``send``, ``cancel``, ``trace``,
``worker``, ``stats``, ``dead ...``, ``consumers``, ``console``, ``metrics``, and ``demo`` and
``bench``, which hand their arguments to ``main(argv)`` of the module of that name. Errors end
the command with one line on stderr and a non-zero status: 1 for a failure, 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from ..errors import RMQError
from ..extras import extra_of, install_hint
from . import cancel, console, messages, runtime, server, stats, topics, tracing
from .advice import error_line, first_line, unrecognized
from .common import CommandError, add_replication_options
from .notices import show_once

__all__ = ["main", "build_parser"]

# Subcommand -> (module, what it does); the module is imported only when used.
PASS_THROUGH = {
    "demo": ("rmq.demo", "run the founding-case demo (SPEC §8)"),
    "bench": ("rmq.bench", "run the benchmark"),
}


class Parser(argparse.ArgumentParser):
    """Bad arguments are reported in one line (``--help`` shows the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> Parser:
    parser = Parser(prog="rmq", description="RMQ: a Redis message queue that merges duplicate "
                                            "pending messages and serves them by priority.")
    parser.add_argument("--url", default=None,
                        help="Redis URL (redis://, rediss://, unix://); default: $RMQ_REDIS_URL, "
                             "else the embedded server")
    add_replication_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    runtime.add_parsers(commands)
    server.add_parsers(commands)
    topics.add_parsers(commands)
    messages.add_parsers(commands)
    cancel.add_parsers(commands)
    tracing.add_parsers(commands)
    stats.add_parsers(commands)
    console.add_parsers(commands)
    for name, (module, text) in PASS_THROUGH.items():
        # No options of its own: everything after the name goes to the module's main().
        sub = commands.add_parser(name, help=text, add_help=False,
                                  description=f"{text[0].upper()}{text[1:]} ({module}).")
        sub.set_defaults(run=None, module=module)
    return parser


def _pass_through(args: argparse.Namespace, argv: list[str]) -> int:
    if args.url:
        os.environ["RMQ_REDIS_URL"] = args.url  # the module's clients pick it up
    try:
        module = importlib.import_module(args.module)
    except ImportError as exc:
        reason = _unavailable(args.module, exc)
        if {"-h", "--help"} & set(argv):
            # --help still helps: what the command is, and what it takes to have it.
            text = dict(PASS_THROUGH.values())[args.module]
            print(f"usage: rmq {args.command} [ARGUMENTS ...]\n\n{text[0].upper()}{text[1:]} "
                  f"({args.module}).\n\nNot available here: {reason}.")
            return 0
        raise CommandError(f"not available: {reason}") from None
    entry = getattr(module, "main", None)
    if entry is None:
        raise CommandError(f"not available: {args.module} has no main()")
    result = entry(argv)
    return result if isinstance(result, int) else 0


def _unavailable(module: str, error: ImportError) -> str:
    """Why ``module`` cannot be imported, naming the install command when an extra is missing."""
    missing = error.name or ""
    if missing == module or module.startswith(f"{missing}.") or missing.startswith(
            f"{module}."):
        return f"{module} is not part of this installation of RMQ"
    extra = extra_of(missing)
    if extra is not None:
        return f"{module} needs the {extra!r} extra ({error}): {install_hint(extra)}"
    return f"{module} cannot import {missing or 'a module'} ({error})"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rmq`` with ``argv`` (default: the process's arguments); returns the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else list(argv))
    late = getattr(args, "late_positional", None)
    if late and getattr(args, late) is None and len(extra) == 1 and extra[0][:1] != "-":
        # Python 3.11's argparse leaves an optional positional given after options unparsed.
        setattr(args, late, extra.pop())
    if args.run is not None and extra:
        parser.error(unrecognized(parser, args, extra))
    if args.url is not None and not args.url.strip():
        parser.error("--url is empty: give a Redis URL, or leave --url out to use "
                     "$RMQ_REDIS_URL or the embedded server")
    name = " ".join(filter(None, ["rmq", args.command, getattr(args, "action", None)]))
    try:
        with warnings.catch_warnings():
            warnings.showwarning = show_once
            if args.run is None:
                return _pass_through(args, extra)
            status = args.run(args)
    except (CommandError, RMQError) as exc:
        print(f"{name}: error: {error_line(exc, args)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `rmq stats --watch | head` closed its reader
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 1
    except Exception as exc:  # a bug, or a failure no RMQError names: still one line
        if os.environ.get("RMQ_DEBUG"):
            raise
        print(f"{name}: unexpected error: {type(exc).__name__}: {first_line(exc)} "
              "(RMQ_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
    return status if isinstance(status, int) else 0
