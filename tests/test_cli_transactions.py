"""``rmq topic transactions``: list a topic's open transactions, commit or roll one back by
hand; the topic settings of transactions on ``topic create``."""

from __future__ import annotations

import json

import pytest
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
