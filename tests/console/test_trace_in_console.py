"""The console's finder shows a message's trace (SPEC §11): its timeline of state changes in
every group, oldest first, found by body or by message id; driven in headless chromium
against a real ``rmq console`` process. A screenshot of the timeline goes to the test's
folder (``trace-finder.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

import rmq

pytestmark = pytest.mark.extras


def test_the_finder_shows_a_found_messages_timeline(
        page: Page, console_process: Any, client: rmq.Client, tmp_path: Path) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("prices", trace=True, max_retries=2, retry_backoff=0)
    sent = client.send("prices", "sku-42")
    client.send("prices", "sku-42")
    (message,) = client.claim("prices", holder="render-1")
    client.nack(message, "no price for sku-42")
    (second,) = client.claim("prices", holder="render-2")

    page.goto(f"{base}/find?topic=prices&body=sku-42")
    timeline = page.locator(f"table.trace-table[data-message-id='{sent.message_id}'] tbody tr")
    expect(timeline).to_have_count(5)
    events = [row.get_attribute("data-event") for row in timeline.all()]
    assert events == ["sent", "merged", "claimed", "failed", "claimed"]
    expect(timeline.nth(1)).to_contain_text("1 send merged")
    expect(timeline.nth(2)).to_contain_text("render-1")
    expect(timeline.nth(3)).to_contain_text("no price for sku-42")
    expect(timeline.nth(4)).to_contain_text("render-2")
    expect(page.locator("#find-table tbody tr[data-state=in_flight]")).to_contain_text(
        sent.message_id)
    shot = tmp_path / "trace-finder.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    # by its id alone, once it is handled and nothing of it is stored
    client.ack(second)
    page.goto(f"{base}/find?topic=prices&message_id={sent.message_id}")
    expect(page.locator("table.trace-table tbody tr")).to_have_count(6)
    expect(page.locator("table.trace-table tbody tr").last).to_contain_text("acked")
    expect(page.locator("#find-results")).to_be_hidden()


def test_the_finder_says_when_a_topics_trace_is_off(
        page: Page, console_process: Any, client: rmq.Client) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("plain")
    sent = client.send("plain", "sku-1")
    page.goto(f"{base}/find?topic=plain&message_id={sent.message_id}")
    expect(page.locator("#trace-count")).to_contain_text("the trace is off")
    expect(page.locator("table.trace-table tbody")).to_contain_text("Nothing recorded")


def test_the_finder_shows_the_timeline_of_a_key_s_message_handled_or_cancelled(
        page: Page, console_process: Any, client: rmq.Client, tmp_path: Path) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("prices", trace=True, merge="key")
    handled = client.send("prices", "price=10", key="product-42")
    client.ack(client.claim("prices", holder="render-1"))
    cancelled = client.send("prices", "price=7", key="product-7")
    client.cancel("prices", cancelled.message_id)

    page.goto(f"{base}/find?topic=prices&key=product-42")
    timeline = page.locator(f"table.trace-table[data-message-id='{handled.message_id}'] tbody tr")
    expect(timeline).to_have_count(3)
    assert [row.get_attribute("data-event") for row in timeline.all()] == [
        "sent", "claimed", "acked"]
    expect(timeline.nth(1)).to_contain_text("render-1")
    page.screenshot(path=str(tmp_path / "trace-finder-key.png"), full_page=True)

    page.goto(f"{base}/find?topic=prices&key=product-7")
    timeline = page.locator(
        f"table.trace-table[data-message-id='{cancelled.message_id}'] tbody tr")
    expect(timeline).to_have_count(2)
    expect(timeline.last).to_contain_text("cancelled: removed while pending")
