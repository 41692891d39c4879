"""``rmq worker module:function TOPIC``: a handler run over a topic until SIGTERM, on each
message or (``--batch N``) on lists of up to N."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from .common import CommandError, at_least_one, at_least_zero, open_client, seconds

__all__ = ["add_parsers", "load_handler"]

REPORT_EVERY = 10.0  # seconds between a worker's progress lines
MOST_HELD = 10_000  # messages one claim can take (Client.claim's count)
MOST_BATCH_WAIT_MS = 3_600_000  # an hour: the Consumer's batch_wait_ms at most


def load_handler(target: str) -> Callable[..., Any]:
    """The function named by ``module:function`` (``module`` importable from the current
    directory too, like ``python -m`` does)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise CommandError(f"expected module:function, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: object = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever the import raised, one clear line
        raise CommandError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        found = getattr(found, part, None)
    if not callable(found):
        raise CommandError(f"{target!r} is not a function of module {module_name!r}")
    return found


def worker(args: argparse.Namespace) -> None:
    from ..runtime.checker import CheckBack
    from ..runtime.consumer import Consumer
    from ..runtime.signals import run_all
    from ..runtime.workers import is_async

    if args.prefetch is not None and args.prefetch > MOST_HELD:
        raise CommandError(f"this worker would hold {args.prefetch} messages at once "
                           f"(--prefetch); one claim takes at most {MOST_HELD}: give a "
                           "smaller --prefetch, or none (adaptive)")
    _check_batch(args)
    handler = load_handler(args.target)
    if args.cancel_superseded and not is_async(handler):
        raise CommandError(f"--cancel-superseded cancels an async handler's task: "
                           f"{args.target} is not async (a plain one reads "
                           "message.superseded)")
    checker = None if args.checker is None else load_handler(args.checker)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open_client(args, patient=True) as client:
        client.topic(args.topic, fresh=True)
        consumer = Consumer(client, args.topic, handler, group=args.group,
                            concurrency=args.concurrency, prefetch=args.prefetch,
                            lease=args.lease, grace=args.grace, batch=args.batch,
                            batch_wait_ms=args.batch_wait_ms or 0,
                            cancel_superseded=args.cancel_superseded)
        batches = "" if args.batch is None else (
            f", batches of up to {args.batch} (waiting up to {args.batch_wait_ms or 0} ms)")
        # The check-back runs beside the consumer, in this process: one checker at a time
        # asks about each open transaction, however many workers run one.
        check_back = None if checker is None else CheckBack(client, args.topic, checker)
        checks = "" if checker is None else f"; {args.checker} checks its open transactions"
        print(f"worker {consumer.id}: {args.target} on {args.topic!r}, group {args.group!r}, "
              f"concurrency {args.concurrency}{batches}{checks}; Ctrl-C or SIGTERM stops it",
              file=sys.stderr, flush=True)
        stopped = threading.Event()
        reporter = threading.Thread(target=_report, args=(consumer, stopped), daemon=True)
        reporter.start()
        try:
            run_all([consumer] if check_back is None else [consumer, check_back])
        finally:
            stopped.set()
    done = "" if check_back is None else f"; check-back: {_outcomes(check_back.outcomes)}"
    print(f"worker stopped: {_counts(consumer)}{done}", file=sys.stderr, flush=True)


def _outcomes(outcomes: dict[str, int]) -> str:
    """What the check-back did: "2 committed, 1 rolled_back", or "no transaction checked"."""
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items())) or (
        "no transaction checked")


def _check_batch(args: argparse.Namespace) -> None:
    """The batch options together, in the command's words."""
    if args.batch is None:
        if args.batch_wait_ms is not None:
            raise CommandError("--batch-wait-ms applies to batch handlers: give --batch N too")
        return
    if args.batch > MOST_HELD:
        raise CommandError(f"--batch {args.batch}: one claim takes at most {MOST_HELD} "
                           "messages; give a smaller --batch")
    if args.prefetch is not None:
        raise CommandError("--prefetch does not apply with --batch: a batch worker holds the "
                           "batches its handlers run (--concurrency), and one more being "
                           "claimed unless the group has a limit in flight")
    if args.batch_wait_ms is not None and args.batch_wait_ms > MOST_BATCH_WAIT_MS:
        raise CommandError(f"--batch-wait-ms {args.batch_wait_ms}: at most "
                           f"{MOST_BATCH_WAIT_MS} (an hour)")


def _counts(consumer: Any) -> str:
    """What a worker did so far: a message retried three times is one failed message and
    three failed attempts, not "3 failed"."""
    messages, attempts = consumer.failed_messages, consumer.failed
    return (f"{consumer.handled} handled, {messages} message{'' if messages == 1 else 's'} "
            f"failed ({attempts} failed attempt{'' if attempts == 1 else 's'})")


def _report(consumer: Any, stopped: threading.Event) -> None:
    last = ""
    while not stopped.wait(REPORT_EVERY):
        now = _counts(consumer)
        if now != last:
            last = now
            print(f"worker: {now}", file=sys.stderr, flush=True)


def add_parsers(commands: Any) -> None:
    p = commands.add_parser("worker", help="run a handler over a topic's messages",
                            description="Import module:function and run it for each message "
                                        "of TOPIC until SIGINT/SIGTERM; returning acknowledges, "
                                        "raising retries. With --batch N it is called with a "
                                        "list of up to N messages, and raising "
                                        "rmq.BatchFailed retries only those it names. "
                                        "Unstarted messages are given back at once on "
                                        "shutdown.")
    p.add_argument("target", metavar="module:function")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--group", default="default", help="consumer group (default: default)")
    p.add_argument("--concurrency", type=at_least_one, default=8, metavar="N",
                   help="handlers running at once (default 8); with --batch, batches")
    p.add_argument("--prefetch", type=at_least_one, metavar="N",
                   help="messages held at once, running or waiting (default: adaptive, about "
                        "concurrency + 1 for a slow handler, claims of up to 500 for a "
                        "fast one)")
    p.add_argument("--batch", type=at_least_one, metavar="N",
                   help="call the handler with a list of up to N messages of the group")
    p.add_argument("--batch-wait-ms", type=at_least_zero, metavar="MS",
                   help="with --batch: once a message is ready, wait up to MS more for the "
                        "batch to fill while its messages stay pending (default 0; a "
                        "message at HIGH priority or above is taken at once)")
    p.add_argument("--cancel-superseded", action="store_true",
                   help="cancel an async handler's task when its delivery is superseded or "
                        "cancelled (docs/semantics.md, \"Supersede and cancel\")")
    p.add_argument("--checker", metavar="module:function",
                   help="also run this transaction checker (fn(tx_id) -> True to commit, "
                        "False to roll back, None: unknown) on TOPIC's transactions left "
                        "open check_after seconds (docs/transactions.md)")
    p.add_argument("--lease", type=seconds(0.01, 7 * 86400), metavar="SECONDS",
                   help="lease of each claim (default: the topic's visibility timeout)")
    p.add_argument("--grace", type=seconds(0.0), default=30.0, metavar="SECONDS",
                   help="time running handlers get to finish at shutdown (default 30)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(run=worker)
