"""``rmq topic transactions``: list a topic's open transactions, commit or roll one back by
hand; the topic settings of transactions on ``topic create``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import wait_for
from test_cli import assert_one_line_error, ok, run

import rmq

pytestmark = pytest.mark.single_node


@pytest.fixture
def client(redis_url: str):
    with rmq.Client(redis_url) as c:
        c.create_topic("orders")
        yield c


def test_topic_transactions_lists_the_open_ones_and_the_abandoned(redis_url, client):
    assert ok("topic", "transactions", "orders", url=redis_url).strip() == (
        "no open transactions in topic 'orders' (0 abandoned so far)")
    client.transaction("orders", id="order-1").send_many([b"a", b"b"])
    client.transaction("orders", id="order-2").send(b"c")
    out = ok("topic", "transactions", "orders", url=redis_url)
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "AGE", "HALVES", "SLOTS", "CHECKS", "STATE"]
    assert {line.split()[0]: line.split()[2] for line in lines[1:3]} == {
        "order-1": "2", "order-2": "1"}
    assert lines[-1] == "2 open, 0 abandoned so far"
    listed = json.loads(ok("topic", "transactions", "orders", "--json", url=redis_url))
    assert listed["abandoned"] == 0
    assert [(t["id"], t["halves"], t["checks"]) for t in listed["open"]] == [
        ("order-1", 2, 0), ("order-2", 1, 0)]


def test_topic_transactions_commits_or_rolls_back_one_by_hand(redis_url, client):
    client.transaction("orders", id="kept").send(b"ship")
    client.transaction("orders", id="dropped").send(b"bill")
    assert ok("topic", "transactions", "orders", "--commit", "kept", url=redis_url).strip() == (
        "committed transaction 'kept' of topic 'orders': 1 sent, 0 merged")
    ok("topic", "transactions", "orders", "--rollback", "dropped", url=redis_url)
    assert [m.body for m in client.claim("orders")] == [b"ship"]
    assert client.open_transactions("orders") == []
    assert_one_line_error(run("topic", "transactions", "orders", "--commit", "dropped",
                              url=redis_url), 1, "is rolled back: cannot commit")
    assert_one_line_error(run("topic", "transactions", "orders", "--commit", "no spaces",
                              url=redis_url), 1, "invalid transaction id 'no spaces'")


def test_topic_create_takes_the_transaction_settings(redis_url, client):
    out = ok("topic", "create", "checked", "--check-after", "2", "--check-interval", "10",
             "--max-checks", "3", "--tx-retention", "3600", "--json", url=redis_url)
    settings = json.loads(out)["settings"]
    assert (settings["check_after"], settings["check_interval"], settings["max_checks"],
            settings["tx_retention"]) == (2, 10, 3, 3600)


SHOP = '''
import os
from pathlib import Path

OUT = Path(os.environ["RMQ_TEST_DIR"])


def handle(message):
    with open(OUT / "handled", "a") as out:
        out.write(message.text + "\\n")


def check(tx_id):
    return {"order-17": True, "order-18": False}.get(tx_id)
'''


def test_worker_runs_a_transaction_checker_beside_its_handler(redis_url, client, tmp_path):
    (tmp_path / "shop.py").write_text(SHOP)
    client.alter_topic("orders", check_after=0.2)
    client.transaction("orders", id="order-17").send("ship 17")  # its producer died
    client.transaction("orders", id="order-18").send("ship 18")
    client.transaction("orders", id="order-19").send("ship 19")  # unknown to the checker
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - closed in finally
    worker = subprocess.Popen(
        [sys.executable, "-m", "rmq", "--url", redis_url, "worker", "shop:handle", "orders",
         "--checker", "shop:check"], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "RMQ_TEST_DIR": str(tmp_path)})
    handled = tmp_path / "handled"
    try:
        wait_for(lambda: handled.exists() and handled.read_text() == "ship 17\n",
                 30, "the committed transaction's message to be handled")
        wait_for(lambda: [t.id for t in client.open_transactions("orders")] == ["order-19"],
                 30, "order-18 to be rolled back")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()
        log.close()
    text = (tmp_path / "worker.log").read_text()
    assert "shop:check checks its open transactions" in text
    stopped = [line for line in text.splitlines() if line.startswith("worker stopped: ")]
    assert len(stopped) == 1 and "1 handled" in stopped[0], text
    assert "check-back: 1 committed" in stopped[0] and "1 rolled_back" in stopped[0]


def test_worker_names_a_checker_that_cannot_be_loaded(redis_url, client, tmp_path):
    done = subprocess.run([sys.executable, "-m", "rmq", "--url", redis_url, "worker",
                           "json:dumps", "orders", "--checker", "nowhere_at_all:check"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert_one_line_error(done, 1, "cannot import 'nowhere_at_all'")
