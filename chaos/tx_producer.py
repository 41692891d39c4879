"""A transactional producer process for fault tests: ``python -m chaos.tx_producer``.

For each of ``--count`` orders it opens an RMQ transaction, sends the order's messages as
half messages, writes the order's row with the transaction id into its SQLite database in
one database transaction, then commits the RMQ transaction (the worked example of
docs/transactions.md). Every fourth order fails in the application: its database
transaction rolls back, and so does the RMQ one. ``--die-at N --die-point P`` kills the
process itself (SIGKILL: no cleanup, no flush) at order N, at point P: ``after-halves``
(before its database commit), ``after-db`` (its database committed, RMQ's not: the case
the check-back exists for) or ``after-commit``. Killed from outside at any moment, it
leaves the same kinds of state. Bodies are ``<name>-<order>-<part>``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3

from rmq.client import Client

__all__ = ["main", "POINTS", "MESSAGES_PER_ORDER"]

POINTS = ("after-halves", "after-db", "after-commit")
MESSAGES_PER_ORDER = 3


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chaos.tx_producer")
    parser.add_argument("--url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--db", required=True, help="the application's SQLite database")
    parser.add_argument("--name", required=True, help="this producer's name (in ids, bodies)")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--die-at", type=int, default=-1)
    parser.add_argument("--die-point", choices=POINTS, default="after-db")
    args = parser.parse_args(argv)
    db = sqlite3.connect(args.db, timeout=30, isolation_level=None)
    client = Client(args.url)
    print("ready", flush=True)
    for order in range(args.count):
        tx = client.transaction(args.topic, f"{args.name}-{order}")
        tx.send_many([f"{args.name}-{order}-{part}" for part in range(MESSAGES_PER_ORDER)])
        dying = order == args.die_at
        if dying and args.die_point == "after-halves":
            _die()
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO orders (tx_id) VALUES (?)", (tx.id,))
        if order % 4 == 3:  # the application fails this order
            db.execute("ROLLBACK")
            tx.rollback()
            continue
        db.execute("COMMIT")
        if dying and args.die_point == "after-db":
            _die()
        tx.commit()
        if dying:
            _die()
    client.close()


if __name__ == "__main__":
    main()
