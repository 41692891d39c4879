"""``rmq topic transactions TOPIC [--commit ID | --rollback ID] [--json]``: list a topic's
open transactions (docs/transactions.md), or close one by hand."""

from __future__ import annotations

import argparse
from typing import Any

from .common import age, open_client, print_json, table

__all__ = ["configure", "transactions"]


def transactions(args: argparse.Namespace) -> None:
    with open_client(args) as client:
        if args.commit or args.rollback:
            tx = client.transaction(args.name, args.commit or args.rollback)
            if args.commit:
                counts = tx.commit()
                print(f"committed transaction {tx.id!r} of topic {args.name!r}: "
                      f"{counts.sent} sent, {counts.merged} merged")
            else:
                tx.rollback()
                print(f"rolled back transaction {tx.id!r} of topic {args.name!r}")
            return
        found = client.open_transactions(args.name)
        now = client.now()
        abandoned = client.stats(args.name).transactions.abandoned
    if args.json:
        print_json({"topic": args.name, "abandoned": abandoned,
                    "open": [{**t.to_dict(), "age_ms": t.age_ms(now)} for t in found]})
        return
    if not found:
        print(f"no open transactions in topic {args.name!r} ({abandoned} abandoned so far)")
        return
    print(table(["ID", "AGE", "HALVES", "SLOTS", "CHECKS", "STATE"], [
        [t.id, age(t.age_ms(now)), t.halves, len(t.slots), t.checks, _state(t)]
        for t in found]))
    print(f"{len(found)} open, {abandoned} abandoned so far")


def _state(tx: Any) -> str:
    if tx.closing is not None:
        return f"{tx.closing.replace('_', ' ')} in part"
    return "abandoned" if tx.abandoned else "open"


def configure(parser: argparse.ArgumentParser) -> None:
    close = parser.add_mutually_exclusive_group()
    close.add_argument("--commit", metavar="ID",
                       help="commit this transaction in every slot (what its checker would "
                            "do when it answers True)")
    close.add_argument("--rollback", metavar="ID",
                       help="roll this transaction back in every slot")
    parser.add_argument("--json", action="store_true", help="print JSON")
