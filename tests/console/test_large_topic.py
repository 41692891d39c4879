"""A large topic (issue 10, point 3: 1 M pending messages over 1024 slots) through the
console: every answer reads a page or an aggregate, not the backlog. The timings are
printed for the report (``pytest -s``), not asserted: this machine is shared."""

from __future__ import annotations

import time
from typing import Any

import pytest
from console_helpers import TestClient
from playwright.sync_api import expect

import rmq

pytestmark = pytest.mark.extras

PENDING = 1_000_000
SLOTS = 1024
BATCH = 20_000


def timed(http: TestClient, path: str) -> tuple[float, Any]:
    started = time.perf_counter()
    response = http.get(path)
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.text
    return elapsed, response


def test_a_topic_of_a_million_messages_over_1024_slots_answers_by_pages_and_aggregates(
        api: TestClient, client: rmq.Client, console_process: Any, browser: Any) -> None:
    client.create_topic("big", slots=SLOTS)
    client.bind("big", "default")
    started = time.perf_counter()
    for first in range(0, PENDING, BATCH):
        client.send_many("big", [b"item-%07d" % i for i in range(first, first + BATCH)])
    filled = time.perf_counter() - started
    client.record_history("big")
    timings: dict[str, float] = {}
    for name, path in [
        ("overview", "/api/overview"),
        ("topic", "/api/topics/big"),
        ("history", "/api/topics/big/history"),
        ("first page", "/api/topics/big/messages?state=ready&limit=20"),
        ("deep page", f"/api/topics/big/messages?state=ready&offset={PENDING - 30}&limit=20"),
        ("one slot", "/api/topics/big/messages?state=ready&slot=700&offset=500&limit=20"),
        ("find", "/api/topics/big/find?body=item-0765432"),
        ("metrics", "/metrics"),
    ]:
        timings[name], response = timed(api, path)
        if name == "topic":
            detail = response.json()
            assert len(detail["heat"]["cells"]) == 256  # aggregated, not 1024 cells
            assert sum(c["ready"] for c in detail["heat"]["cells"]) == PENDING
        if name == "deep page":
            page = response.json()
            assert page["total"] == PENDING and len(page["rows"]) == 20
        if name == "find":
            (found,) = response.json()["rows"]
            assert found["state"] == "ready" and found["body"] == "item-0765432"

    base = console_process()
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        for visit in ("first", "second"):
            started = time.perf_counter()
            page.goto(f"{base}/topics/big")
            # drawn: the counts, the heat map and the first page of messages
            page.wait_for_function("() => document.querySelectorAll('#peek-table tbody tr')"
                                   ".length === 20 && document.querySelectorAll('#heat .cell')"
                                   ".length === 256", timeout=30_000, polling="raf")
            timings[f"topic page, {visit} visit"] = time.perf_counter() - started
            expect(page.locator("#c-ready")).to_have_text("1,000,000")
    finally:
        page.close()
    print(f"\n{PENDING:,} messages over {SLOTS} slots sent in {filled:.1f}s; console answers:")
    for name, seconds in timings.items():
        print(f"  {name:<24} {seconds * 1000:8.0f} ms")
