"""A consumer process for fault tests: ``python -m chaos.worker --url ... --topic ...``.

It runs an :class:`rmq.Consumer` whose handler appends one line per completed handling to
``--log`` (``ok <body> <attempts> <late>``, or ``fail ...`` for a poison message it raises
on; ``late`` is how many ms after its due time the handler started, by the client's clock)
with a single unbuffered ``write``: a line is on its way to disk before the
handler returns, so a SIGKILL right after still leaves the record, and the ledger counts
the message as handled even though its acknowledgement never reached Redis. Bodies must not
contain whitespace. With ``--batch N`` it runs a batch handler instead, which takes
``--work-ms`` per message of its batch and writes the batch's lines with one ``write``. It
prints ``ready`` once consuming, and stops gracefully on SIGTERM.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import threading
import time

from rmq.client import Client, ServerClock
from rmq.errors import BatchFailed
from rmq.message import Message
from rmq.runtime import Consumer

__all__ = ["PoisonError", "main"]


class PoisonError(Exception):
    """What the handler raises for a body starting with the poison prefix."""


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m chaos.worker")
    parser.add_argument("--url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="default")
    parser.add_argument("--log", required=True, help="file to append handled messages to")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=None)
    parser.add_argument("--lease", type=float, default=None)
    parser.add_argument("--work-ms", type=float, default=0.0, help="time each handling takes")
    parser.add_argument("--poison", default="", help="bodies starting with this fail")
    parser.add_argument("--recover-interval", type=float, default=0.5)
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--slow", default="", help="bodies starting with this take --slow-ms")
    parser.add_argument("--slow-ms", type=float, default=0.0)
    parser.add_argument("--batch", type=int, default=None, help="a batch handler of N")
    parser.add_argument("--batch-wait-ms", type=int, default=0)
    parser.add_argument("--clock-skew-ms", type=float, default=0.0,
                        help="count the server's time from this host's wall clock moved by "
                             "this much (the client must behave the same)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s worker {os.getpid()} %(levelname)s %(message)s")
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` dumps every thread's stack
    log_fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    poison = args.poison.encode()
    work = args.work_ms / 1000

    slow, slow_work = args.slow.encode(), args.slow_ms / 1000
    skew = args.clock_skew_ms
    clock = ServerClock(local=lambda: time.time() * 1000 + skew) if skew else None
    client = Client(args.url, registry_ttl=0.5, clock=clock)

    def handle(message: Message) -> None:
        late = client.now() - message.due_at
        if work:
            time.sleep(work)  # the simulated work of the handler
        if slow and message.body.startswith(slow):
            time.sleep(slow_work)  # a handler slower than its lease
        failing = bool(poison) and message.body.startswith(poison)
        outcome = b"fail" if failing else b"ok"
        os.write(log_fd, b"%s %s %d %d\n" % (outcome, message.body, message.attempts, late))
        if failing:
            raise PoisonError(f"cannot handle {message.body!r}")

    def handle_batch(messages: list[Message]) -> None:
        lates = [client.now() - message.due_at for message in messages]
        if work:
            time.sleep(work * len(messages))  # the simulated work of the batch
        poisoned = {id(m) for m in messages if poison and m.body.startswith(poison)}
        os.write(log_fd, b"".join(
            b"%s %s %d %d\n" % (b"fail" if id(m) in poisoned else b"ok", m.body, m.attempts,
                                 late) for m, late in zip(messages, lates, strict=True)))
        if poisoned:
            raise BatchFailed({m: PoisonError(f"cannot handle {m.body!r}")
                               for m in messages if id(m) in poisoned})

    consumer = Consumer(client, args.topic, handle if args.batch is None else handle_batch,
                        group=args.group, concurrency=args.concurrency,
                        prefetch=args.prefetch, lease=args.lease, grace=args.grace,
                        recover_interval=args.recover_interval, heartbeat_interval=0.5,
                        batch=args.batch, batch_wait_ms=args.batch_wait_ms)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    consumer.start()
    print("ready", flush=True)
    # A timed wait: a signal the kernel hands to another thread only runs its Python
    # handler once the main thread wakes up, which an untimed wait may never do.
    parent = os.getppid()
    while not stop.wait(0.2):
        if os.getppid() != parent:
            break  # whoever started us is gone: do not consume on forever
    consumer.stop()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
