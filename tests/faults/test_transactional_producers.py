"""Producers killed between their database's commit and the queue's (SPEC §12): the
check-back finishes what they left. The ledger: every transaction whose database row
committed is delivered, no other is, and nothing is delivered twice (no consumer fails
here, so at least once is exactly once)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers import wait_for

from chaos.fleet import CHECKOUT
from chaos.tx_producer import MESSAGES_PER_ORDER, POINTS
from rmq.client import Client
from rmq.runtime.checker import CheckBack

pytestmark = pytest.mark.faults

ORDERS = 24


def _producer(url: str, topic: str, db: Path, name: str, **kill: str) -> subprocess.Popen[str]:
    options = [item for pair in (("--die-at", kill["at"]), ("--die-point", kill["point"]))
               for item in pair] if kill else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([CHECKOUT, *sys.path])}
    return subprocess.Popen(
        [sys.executable, "-m", "chaos.tx_producer", "--url", url, "--topic", topic,
         "--db", str(db), "--name", name, "--count", str(ORDERS), *options],
        env=env, stdout=subprocess.PIPE, text=True)


def test_producers_killed_between_their_commit_and_the_queue_s_lose_and_add_nothing(
        redis_url: str, tmp_path: Path) -> None:
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as setup:
        setup.execute("CREATE TABLE orders (tx_id TEXT PRIMARY KEY)")
    client = Client(redis_url)
    client.create_topic("orders", check_after=0.3, check_interval=1)
    # each killed by itself at one point, and one killed from outside mid-run
    # (order 7 is one the application fails: it rolls back before any of the points)
    producers = [_producer(redis_url, "orders", db, f"p{i}", at=str(at), point=point)
                 for i, (at, point) in enumerate(zip((5, 6, 8), POINTS, strict=True))]
    outside = _producer(redis_url, "orders", db, "p-out")
    assert outside.stdout is not None and outside.stdout.readline() == "ready\n"
    wait_for(lambda: _committed_orders(db, "p-out") >= 6, what="p-out committed some orders")
    outside.send_signal(signal.SIGKILL)
    for process in [*producers, outside]:
        assert process.wait(60) == -signal.SIGKILL

    def known(tx_id: str) -> bool:
        with sqlite3.connect(db) as own:
            return own.execute("SELECT 1 FROM orders WHERE tx_id = ?",
                               (tx_id,)).fetchone() is not None

    left_open = {t.id for t in client.open_transactions("orders")}
    assert {"p1-6"} <= left_open  # killed after its database commit: the case to finish
    back = CheckBack(client, "orders", known).start()
    try:
        wait_for(lambda: not client.open_transactions("orders"), timeout=30,
                 what="the check-back closed every transaction")
    finally:
        back.stop()

    delivered: Counter[str] = Counter()
    while batch := client.claim("orders", count=500):
        delivered.update(m.text for m in batch)
        client.ack(batch)
    with sqlite3.connect(db) as own:
        committed = {row[0] for row in own.execute("SELECT tx_id FROM orders")}
    expected = {f"{tx_id}-{part}" for tx_id in committed for part in range(MESSAGES_PER_ORDER)}
    assert set(delivered) == expected, (
        f"missing {sorted(expected - set(delivered))[:10]}, "
        f"unexpected {sorted(set(delivered) - expected)[:10]}")
    assert max(delivered.values()) == 1
    assert "p1-6" in committed and "p0-5" not in committed  # after-db vs after-halves
    assert back.outcomes.get("committed", 0) >= 1 and back.outcomes.get("rolled_back", 0) >= 1
    client.delete_topic("orders")
    client.close()


def _committed_orders(db: Path, name: str) -> int:
    with sqlite3.connect(db) as own:
        (count,) = own.execute("SELECT count(*) FROM orders WHERE tx_id LIKE ?",
                               (f"{name}-%",)).fetchone()
    return int(count)
