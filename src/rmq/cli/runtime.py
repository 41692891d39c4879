"""Long-running commands: ``rmq worker module:function TOPIC`` and ``rmq server``."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import RMQError
from .common import CommandError, open_client

__all__ = ["add_parsers", "load_handler"]

REPORT_EVERY = 10.0  # seconds between a worker's progress lines


def load_handler(target: str) -> Callable[..., Any]:
    """The function named by ``module:function`` (``module`` importable from the current
    directory too, like ``python -m`` does)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise CommandError(f"expected module:function, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever the import raised, one clear line
        raise CommandError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        found = getattr(found, part, None)
    if not callable(found):
        raise CommandError(f"{target!r} is not a function of module {module_name!r}")
    return found


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def worker(args: argparse.Namespace) -> None:
    from ..runtime.consumer import Consumer

    handler = load_handler(args.target)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open_client(args, patient=True) as client:
        client.topic(args.topic, fresh=True)
        consumer = Consumer(client, args.topic, handler, group=args.group,
                            concurrency=args.concurrency, prefetch=args.prefetch,
                            lease=args.lease, grace=args.grace)
        print(f"worker {consumer.id}: {args.target} on {args.topic!r}, group {args.group!r}, "
              f"concurrency {args.concurrency}; Ctrl-C or SIGTERM stops it", file=sys.stderr,
              flush=True)
        stopped = threading.Event()
        reporter = threading.Thread(target=_report, args=(consumer, stopped), daemon=True)
        reporter.start()
        try:
            consumer.run()
        finally:
            stopped.set()
    print(f"worker stopped: {consumer.handled} handled, {consumer.failed} failed",
          file=sys.stderr, flush=True)


def _report(consumer: Any, stopped: threading.Event) -> None:
    last = (0, 0)
    while not stopped.wait(REPORT_EVERY):
        now = (consumer.handled, consumer.failed)
        if now != last:
            last = now
            print(f"worker: {now[0]} handled, {now[1]} failed", file=sys.stderr, flush=True)


def server(args: argparse.Namespace) -> None:
    from ..server import RedisServer, embedded_server

    home = embedded_server(Path(args.data_dir) if args.data_dir else None)
    if home.answers():
        raise CommandError(f"a server already answers on {home.url}; stop it first or use "
                           "another --data-dir")
    process = RedisServer(args.port, unixsocket=home.unixsocket, data_dir=home.data_dir,
                          appendfsync=args.fsync)
    where = home.url + (f" and redis://127.0.0.1:{args.port}" if args.port else "")
    print(f"rmq server: data in {process.data_dir}, serving {where}; Ctrl-C stops it",
          file=sys.stderr, flush=True)
    try:
        code = process.run_foreground()
    except RMQError as exc:
        # The error ends with the log's tail, whose last line says why (a port in use...).
        first, *log = str(exc).splitlines()
        reason = f" {log[-1].strip()}" if log else ""
        raise CommandError(f"{first}{reason} (log: {process.log_path})") from None
    if code not in (0, None):
        raise CommandError(f"the server exited with status {code} (log: {process.log_path})")
    print("rmq server: stopped", file=sys.stderr)


def add_parsers(commands: Any) -> None:
    p = commands.add_parser("worker", help="run a handler over a topic's messages",
                            description="Import module:function and run it for each message "
                                        "of TOPIC until SIGINT/SIGTERM; returning acknowledges, "
                                        "raising retries. Unstarted messages are given back "
                                        "at once on shutdown.")
    p.add_argument("target", metavar="module:function")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--group", default="default", help="consumer group (default: default)")
    p.add_argument("--concurrency", type=_positive, default=8, metavar="N",
                   help="handlers running at once (default 8)")
    p.add_argument("--prefetch", type=_positive, metavar="N",
                   help="messages held at once, running or waiting (default 2 x concurrency)")
    p.add_argument("--lease", type=float, metavar="SECONDS",
                   help="lease of each claim (default: the topic's visibility timeout)")
    p.add_argument("--grace", type=float, default=30.0, metavar="SECONDS",
                   help="time running handlers get to finish at shutdown (default 30)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(run=worker)

    p = commands.add_parser("server", help="run the embedded Redis server in the foreground",
                            description="Run the Redis server that clients without a URL use "
                                        "(a unix socket in the data directory, append-only "
                                        "persistence) in the foreground until Ctrl-C.")
    p.add_argument("--data-dir", metavar="DIR",
                   help="data directory (default: $RMQ_HOME, else ~/.rmq)")
    p.add_argument("--port", type=int, default=0, metavar="PORT",
                   help="also listen on 127.0.0.1:PORT (default: unix socket only)")
    p.add_argument("--fsync", choices=["always", "everysec"], default="everysec",
                   help="appendfsync: 'always' loses nothing on a crash, 'everysec' (default) "
                        "at most a second")
    p.set_defaults(run=server)
