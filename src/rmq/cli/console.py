"""``rmq console`` (the web console) and ``rmq metrics`` (Prometheus metrics alone)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..extras import require
from .common import open_client

__all__ = ["add_parsers"]

DEFAULT_PORT = 8270
DEFAULT_METRICS_PORT = 9270


def _serve(args: argparse.Namespace, metrics_only: bool) -> None:
    require("console")  # a missing extra is named with its install command, before any work
    from ..console import serve
    token = args.token or os.environ.get("RMQ_CONSOLE_TOKEN") or None
    with open_client(args) as probe:
        probe.topics()  # an unreachable Redis fails here at once, in one line
    with open_client(args, patient=True) as client:  # rides out a Redis restart
        serve(client, host=args.host, port=args.port, token=token, metrics_only=metrics_only,
              refresh=getattr(args, "refresh", 2.0),
              announce=lambda text: print(text, file=sys.stderr, flush=True))


def console(args: argparse.Namespace) -> None:
    _serve(args, metrics_only=False)


def metrics(args: argparse.Namespace) -> None:
    _serve(args, metrics_only=True)


def _seconds(text: str) -> float:
    value = float(text)
    if not 0.2 <= value <= 60:
        raise argparse.ArgumentTypeError(f"must be from 0.2 to 60 seconds, got {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {text}")
    return value


def add_parsers(commands: Any) -> None:
    p = commands.add_parser(
        "console", help="run the web console",
        description="Serve the web console: topics, backlog, charts, consumers, dead letters, "
                    "a message finder and forms, plus /metrics and the JSON API under /api. "
                    "Binds 127.0.0.1 unless told otherwise; any other address needs a token.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; others need --token)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--token", help="ask every request for this token (default: "
                                   "$RMQ_CONSOLE_TOKEN); required beyond loopback")
    p.add_argument("--refresh", type=_seconds, default=2.0, metavar="SECONDS",
                   help="how often the pages update themselves (default 2)")
    p.set_defaults(run=console)

    p = commands.add_parser(
        "metrics", help="serve Prometheus metrics only",
        description="Serve /metrics (Prometheus text format) without the console: backlog "
                    "by state and priority, counters, oldest ready age and consumers alive, "
                    "per topic and group, read from Redis at each scrape.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=DEFAULT_METRICS_PORT,
                   help=f"port (default {DEFAULT_METRICS_PORT})")
    p.add_argument("--token", help="ask scrapes for 'Authorization: Bearer TOKEN' (default: "
                                   "$RMQ_CONSOLE_TOKEN)")
    p.set_defaults(run=metrics)
