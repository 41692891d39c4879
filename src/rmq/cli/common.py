"""What every ``rmq`` subcommand shares: the client, tables, JSON, progress on stderr."""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from ..client import Client
from ..client.retry import Retry
from ..message import Priority
from ..settings import DEFAULT_GROUP

__all__ = ["CommandError", "open_client", "add_replication_options", "table", "print_json",
           "text_of", "age", "Progress", "seconds", "at_least_one", "at_least_zero",
           "priority_name", "check_group"]

QUICK_RETRIES = 5  # reconnect attempts of one-shot commands: 50 ms doubling, about 1.5 s
# A one-shot command's longest wait for one reply (the library's is 30 s). A timeout is not
# retried: it has waited that long already, and retrying turns a wrong URL (rediss:// to a
# server without TLS hangs in the handshake) into minutes of silence.
QUICK_TIMEOUT = 10.0


class CommandError(Exception):
    """A failure the command reports as one line and exit status 1."""


def open_client(args: argparse.Namespace, *, patient: bool = False) -> Client:
    """The client of ``--url`` (else ``RMQ_REDIS_URL``, else the embedded server).

    A one-shot command gives up on an unreachable Redis after about 1.5 s and on a silent
    one after 10 s; a ``patient`` one (the worker) keeps the library's longer reconnect
    policy, to ride out a restart.
    """
    replication = {"replicas": args.replicas, "replica_timeout": args.replica_timeout,
                   "replica_fsync": args.replica_fsync}
    if patient:
        return Client(args.url, **replication)
    return Client(args.url, **replication, socket_timeout=QUICK_TIMEOUT,
                  retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), QUICK_RETRIES,
                              supported_errors=(RedisConnectionError, ConnectionError)))


def check_group(client: Client, topic: str, group: str) -> None:
    """CommandError naming the topic's groups when ``group`` is none of them: neither bound
    nor unbound with its messages kept, nor ``default`` (a typo would read as an empty
    group). UnknownTopic for a topic that does not exist."""
    info = client.topic(topic)
    groups = sorted({*info.groups, *info.unbound_groups})
    if group in groups or group == DEFAULT_GROUP:
        return
    close = difflib.get_close_matches(group, groups, n=1)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    raise CommandError(f"topic {topic!r} has no group {group!r} (its groups: "
                       f"{', '.join(groups)}){guess}")


def add_replication_options(parser: argparse.ArgumentParser) -> None:
    """The global options of replicated writes (docs/reliability.md, "Replicated writes"),
    defaulting to ``RMQ_REPLICAS``, ``RMQ_REPLICA_TIMEOUT`` and ``RMQ_REPLICA_FSYNC``."""
    parser.add_argument("--replicas", type=at_least_zero, metavar="N",
                        default=os.environ.get("RMQ_REPLICAS") or "0",
                        help="every write returns once N replicas hold it, else fails "
                             "(default: $RMQ_REPLICAS, else 0: the primary alone)")
    parser.add_argument("--replica-timeout", type=seconds(0.001), metavar="S",
                        default=os.environ.get("RMQ_REPLICA_TIMEOUT") or "1",
                        help="how long a write waits for its replicas (default: "
                             "$RMQ_REPLICA_TIMEOUT, else 1 s)")
    parser.add_argument("--replica-fsync", action="store_true",
                        default=os.environ.get("RMQ_REPLICA_FSYNC", "") not in ("", "0"),
                        help="wait until the write is on the append-only file's disk of the "
                             "primary and of the replicas (Redis 7.2+; default: "
                             "$RMQ_REPLICA_FSYNC=1)")


def at_least_zero(text: str) -> int:
    """An argparse type: an integer of at least 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def seconds(low: float, high: float = math.inf) -> Any:
    """An argparse type: a finite number of seconds from ``low`` to ``high``, so ``nan``,
    ``inf`` and values out of range are refused while parsing."""
    bound = f"of at least {low:g}" if high == math.inf else f"from {low:g} to {high:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be a finite number of seconds {bound}, "
                                             f"got {text!r}")
        return value

    return parse


def at_least_one(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table; numbers are right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(isinstance(row[i], int | float) for row in rows) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric,
                                                                       strict=True)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def print_json(data: Any) -> None:
    print(json.dumps(data, sort_keys=True, default=_jsonable), flush=True)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return text_of(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def text_of(body: bytes | None, limit: int | None = None) -> str:
    """A body for display: UTF-8 with undecodable bytes escaped, cut to ``limit``."""
    if body is None:
        return ""
    text = body.decode("utf-8", errors="backslashreplace")
    if limit is not None and len(text) > limit:
        return text[: limit - 1] + "…"
    return text


def age(ms: float) -> str:
    """A duration in milliseconds as ``850ms``, ``12.5s``, ``3m04s`` or ``2h05m``."""
    if ms < 1000:
        return f"{int(ms)}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def priority_name(priority: int) -> str:
    """``HIGH``, ``MEDIUM`` or ``LOW`` for the named levels, the number for any other."""
    try:
        return Priority(priority).name
    except ValueError:
        return str(priority)


class Progress:
    """A progress line on stderr: redrawn in place on a terminal, otherwise printed every
    ``interval`` seconds, so logs of long runs stay short."""

    def __init__(self, interval: float = 2.0):
        self.tty = sys.stderr.isatty()
        self.interval = interval
        self._last = time.monotonic()

    def update(self, text: str) -> None:
        if self.tty:
            sys.stderr.write(f"\r{text}\x1b[K")
            sys.stderr.flush()
        elif time.monotonic() - self._last >= self.interval:
            self._last = time.monotonic()
            print(text, file=sys.stderr, flush=True)

    def clear(self) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
