"""The check-back in the worker runtime (SPEC §12): every process running a checker for a
topic takes part, one checker at a time per transaction, and transactions left open are
committed, rolled back or abandoned as the application's checker says."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from core_fixtures import make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq.runtime.checker import CheckBack


def test_checkers_in_several_processes_ask_once_per_transaction(make_client):
    producer = make_client()
    producer.create_topic("orders", check_after=0.05, check_interval=30)
    committed = {f"order-{i}" for i in range(0, 20, 2)}
    for i in range(20):
        producer.transaction("orders", id=f"order-{i}").send(f"body-{i}")
    asked: Counter[str] = Counter()
    lock = threading.Lock()

    def checker(tx_id: str) -> bool:
        with lock:
            asked[tx_id] += 1
        return tx_id in committed

    backs = [CheckBack(make_client(kind="sync"), "orders", checker).start() for _ in range(3)]
    try:
        wait_for(lambda: not producer.open_transactions("orders"), what="every check done")
    finally:
        for back in backs:
            back.stop()
    assert asked == Counter({f"order-{i}": 1 for i in range(20)})
    bodies = sorted(m.text for m in producer.claim("orders", count=100))
    assert bodies == sorted(f"body-{i}" for i in range(0, 20, 2))


def test_client_run_starts_the_checkers_it_registered(make_client):
    client = make_client(kind="sync")
    client.create_topic("t", check_after=0.05)
    client.transaction("t", id="from-a-crashed-producer").send(b"x")
    seen = threading.Event()

    @client.checker("t")
    def known(tx_id: str) -> bool:
        seen.set()
        return True

    runner = threading.Thread(target=client.run)
    runner.start()
    try:
        wait_for(seen.is_set, what="the checker asked")
        wait_for(lambda: client.stats("t").groups["default"].ready == 1, what="the commit")
    finally:
        known.check_back.stop()
        runner.join(10)
    assert not runner.is_alive()


class _Watched:
    """A client whose ``open_transactions`` says when the check-back has looked once."""

    def __init__(self, client: rmq.Client):
        self.client = client
        self.looked = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def open_transactions(self, topic: str) -> Any:
        found = self.client.open_transactions(topic)
        self.looked.set()
        return found


def test_the_check_back_asks_check_after_the_send_then_every_check_interval(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("t", check_after=1, check_interval=1, max_checks=10)
        asked: list[float] = []
        third = threading.Event()

        def checker(tx_id: str) -> None:
            asked.append(time.monotonic())
            if len(asked) == 3:
                third.set()

        watched = _Watched(client)
        back = CheckBack(watched, "t", checker).start()
        try:
            wait_for(watched.looked.is_set, what="the check-back's first look")
            sent_at = time.monotonic()  # the transaction opens after that look
            client.transaction("t", id="unknown").send(b"x")
            assert third.wait(15), f"checked {len(asked)} times in 15 s"
        finally:
            back.stop()
        gaps = [asked[0] - sent_at, asked[1] - asked[0], asked[2] - asked[1]]
        assert all(abs(gap - 1) <= 0.5 for gap in gaps), gaps
