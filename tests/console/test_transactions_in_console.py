"""Transactions in the console (SPEC §12): the topic page's Transactions section and
``GET /api/topics/{topic}/transactions`` show the open transactions (age, half messages,
checks so far) and the abandoned count."""

from __future__ import annotations

from typing import Any

import pytest
from console_helpers import TestClient
from helpers import wait_for
from playwright.sync_api import Page, expect
from test_browser import live
from test_metrics import labels, scrape

import rmq

pytestmark = pytest.mark.extras


def test_the_api_lists_open_transactions_with_their_checks_and_the_abandoned(
        api: TestClient, client: rmq.Client) -> None:
    client.create_topic("orders", max_checks=1, check_interval=0.05)
    client.transaction("orders", id="order-1").send_many([b"a", b"b"])
    client.transaction("orders", id="order-2").send(b"c")
    assert client.check_transaction("orders", "order-2", lambda _: None) == "unknown"
    view = api.get("/api/topics/orders/transactions").json()
    assert (view["open_count"], view["halves"], view["abandoned"]) == (2, 3, 0)
    by_id = {tx["id"]: tx for tx in view["open"]}
    assert (by_id["order-1"]["halves"], by_id["order-1"]["checks"]) == (2, 0)
    assert by_id["order-2"]["checks"] == 1 and by_id["order-2"]["age_ms"] >= 0
    due = by_id["order-2"]["check_due_at"]  # the interval after its unknown answer
    wait_for(lambda: client.now() >= due, what="order-2's next check due")
    assert client.check_transaction("orders", "order-2", lambda _: True) == "abandoned"
    view = api.get("/api/topics/orders/transactions").json()
    assert (view["open_count"], view["abandoned"]) == (1, 1)
    assert api.get("/api/topics/nope/transactions").status_code == 404


def test_the_topic_page_shows_open_transactions(page: Page, console_process: Any,
                                                client: rmq.Client) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("orders")
    client.transaction("orders", id="order-77").send_many([b"ship 77", b"bill 77"])
    page.goto(f"{base}/topics/orders")
    live(page)
    expect(page.locator("#tx-open")).to_have_text("1")
    expect(page.locator("#tx-halves")).to_have_text("2")
    row = page.locator("#tx-table tbody tr")
    expect(row).to_contain_text("order-77")
    expect(row).to_contain_text("open")
    client.transaction("orders", id="order-77").commit()
    expect(page.locator("#tx-table tbody")).to_contain_text("No open transactions.")
    expect(page.locator("#tx-open")).to_have_text("0")


def test_metrics_show_open_transactions_half_messages_and_the_abandoned(
        api: TestClient, client: rmq.Client) -> None:
    client.create_topic("orders", max_checks=1, check_interval=0.05)
    client.transaction("orders", id="a").send_many([b"x", b"y"])
    client.transaction("orders", id="b").send(b"z")
    assert client.check_transaction("orders", "b", lambda _: None) == "unknown"
    (due,) = [t.check_due_at for t in client.open_transactions("orders") if t.id == "b"]
    wait_for(lambda: client.now() >= due, what="b's next check due")
    assert client.check_transaction("orders", "b", lambda _: None) == "abandoned"
    samples = scrape(api.get("/metrics").text)
    topic = labels(topic="orders")
    assert samples["rmq_transactions_open"][topic] == 1
    assert samples["rmq_half_messages"][topic] == 2
    assert samples["rmq_transactions_abandoned_total"][topic] == 1
