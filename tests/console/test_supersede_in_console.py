"""Supersede and cancel in the console (SPEC §14): the bind form and API set a group's
supersede and its limit, the topic page shows them with the group's superseded and cancelled
counts, the finder's Cancel button cancels a message (``POST /api/topics/{t}/cancel``, behind
the console's write checks) and its timeline shows the ``superseded`` and ``cancelled``
events, and ``/metrics`` counts both. The browser tests drive a real ``rmq console`` in
headless chromium; their screenshots go to the test's folder (``supersede-topic.png``,
``cancel-finder.png``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from console_helpers import TestClient
from playwright.sync_api import Page, expect
from test_metrics import labels, scrape

import rmq

pytestmark = pytest.mark.extras


def supersede(client: rmq.Client, topic: str, group: str, *bodies: str,
              tag: str | None = None) -> list[rmq.Message]:
    """Deliveries of ``bodies`` in ``group`` that newer sends of them superseded (the
    group's only messages); returns them."""
    items: list[Any] = [{"body": body, "tag": tag} for body in bodies]
    client.send_many(topic, items)
    stale = client.claim(topic, group, count=len(bodies))
    assert sorted(m.body for m in stale) == sorted(b.encode() for b in bodies)
    client.send_many(topic, items)
    return stale


def test_the_api_binds_with_supersede_and_the_topic_shows_it(api: TestClient,
                                                             client: rmq.Client) -> None:
    client.create_topic("t")
    bound = api.post("/api/topics/t/bindings", json={"group": "gpu", "tags": "order",
                                                     "supersede": True, "supersede_limit": 2})
    assert (bound.json()["added"], bound.json()["supersede_limit"]) == (True, 2), bound.text
    kept = api.post("/api/topics/t/bindings", json={"group": "gpu", "keep_filters": True,
                                                    "supersede": False}).json()
    assert (kept["tags"], kept["supersede_limit"]) == ("order", None)  # filters kept
    api.post("/api/topics/t/bindings", json={"group": "gpu", "keep_filters": True,
                                             "supersede": True})
    refused = api.post("/api/topics/t/bindings", json={"group": "gpu", "supersede": True,
                                                       "supersede_limit": 0})
    assert refused.status_code == 400 and "supersede_limit" in refused.json()["error"]
    detail = api.get("/api/topics/t").json()
    assert (detail["supersede"], detail["filters"]) == (
        {"gpu": 3}, {"gpu": {"tags": "order", "where": None}})  # the refused bind wrote nothing
    (gpu,) = detail["groups"]
    assert (gpu["counters"]["superseded"], gpu["counters"]["cancelled"]) == (0, 0)


def test_the_api_cancels_a_message_and_names_an_unknown_or_malformed_id(
        api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t")
    client.bind("t", "gpu", supersede=True)
    client.bind("t", "audit")
    sent = client.send("t", "sku-42")
    (running,) = client.claim("t", "gpu")
    done = api.post("/api/topics/t/cancel", json={"message_id": sent.message_id})
    assert done.json() == {"topic": "t", "message_id": sent.message_id, "group": None,
                           "pending": 1, "running": 1}
    assert running.wait_superseded(timeout=10) and running.stop_reason == "cancelled"
    unknown = api.post("/api/topics/t/cancel", json={"message_id": sent.message_id,
                                                     "group": "audit"})
    assert unknown.status_code == 404
    assert unknown.json()["error"] == (f"no message '{sent.message_id}' is pending or running "
                                       "in group 'audit' of topic 't'")
    malformed = api.post("/api/topics/t/cancel", json={"message_id": "sku-42"})
    assert malformed.status_code == 400 and "message_id" in malformed.json()["error"]
    client.ack(running)
    supersede(client, "t", "gpu", "sku-7")
    groups = {g["group"]: g["counters"] for g in api.get("/api/topics/t").json()["groups"]}
    assert (groups["gpu"]["superseded"], groups["gpu"]["cancelled"]) == (1, 1)
    assert (groups["audit"]["superseded"], groups["audit"]["cancelled"]) == (0, 1)


def test_metrics_count_each_groups_superseded_and_cancelled(api: TestClient,
                                                            client: rmq.Client) -> None:
    client.create_topic("t")
    client.bind("t", "gpu", supersede=True)
    client.bind("t", "audit")
    supersede(client, "t", "gpu", "a", "b")
    client.cancel("t", client.send("t", "c").message_id, group="audit")
    samples = scrape(api.get("/metrics").text)
    gpu, audit = labels(topic="t", group="gpu"), labels(topic="t", group="audit")
    assert (samples["rmq_messages_superseded_total"][gpu],
            samples["rmq_messages_superseded_total"][audit]) == (2, 0)
    assert (samples["rmq_messages_cancelled_total"][gpu],
            samples["rmq_messages_cancelled_total"][audit]) == (0, 1)
    stats = client.stats("t").groups
    assert stats["gpu"].counters["superseded"] == 2 and stats["audit"].counters["cancelled"] == 1


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"},
                                     {"Sec-Fetch-Site": "cross-site"},
                                     {"Content-Type": "text/plain"}])
def test_a_cancel_from_another_site_or_an_html_form_is_refused(api: TestClient,
                                                               client: rmq.Client,
                                                               headers: dict) -> None:
    client.create_topic("t")
    sent = client.send("t", "sku-42")
    refused = api.post("/api/topics/t/cancel", content=f'{{"message_id": "{sent.message_id}"}}',
                       headers={"Content-Type": "application/json", **headers})
    assert refused.status_code == (415 if "Content-Type" in headers else 403), refused.text
    assert client.stats("t").groups["default"].ready == 1


def live(page: Page) -> None:
    expect(page.locator("#live-text")).to_contain_text("updated")


def test_an_operator_sets_supersede_and_reads_the_groups_stopped_counts_on_the_topic_page(
        page: Page, console_process: Any, client: rmq.Client, tmp_path: Path) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("renders", slots=2)
    client.bind("renders", "gpu", tags="render")
    client.bind("renders", "audit")
    page.goto(f"{base}/topics/renders?group=gpu")
    live(page)
    # supersede on, its filters kept
    page.fill("#bind-form [name=group]", "gpu")
    page.check("#bind-form [name=keep_filters]")
    expect(page.locator("#bind-form [name=tags]")).to_be_disabled()
    page.select_option("#bind-form [name=supersede]", "on")
    page.fill("#bind-form [name=supersede_limit]", "2")
    page.click("#bind-form button[type=submit]")
    expect(page.locator("#bind-message")).to_have_text(
        "gpu was already bound; its filters are kept. Supersede on, limit 2.")
    expect(page.locator("#filters dd[data-group=gpu]")).to_have_text(
        "tags render; supersede on, limit 2")
    info = client.topic("renders", fresh=True)
    assert (info.filter_of("gpu").tags, info.supersede_limit("gpu")) == ("render", 2)
    # a limit with supersede off is refused, and changes nothing
    page.fill("#bind-form [name=group]", "gpu")
    page.check("#bind-form [name=keep_filters]")
    page.select_option("#bind-form [name=supersede]", "off")
    page.fill("#bind-form [name=supersede_limit]", "4")
    page.click("#bind-form button[type=submit]")
    expect(page.locator("#bind-message")).to_have_text("A supersede limit goes with supersede on.")
    assert client.topic("renders", fresh=True).supersede_limit("gpu") == 2

    # three renders made stale while they ran, one message cancelled
    client.ack(supersede(client, "renders", "gpu", "sku-0", "sku-1", "sku-2", tag="render"))
    client.cancel("renders", client.send("renders", "sku-9", tag="render").message_id, "gpu")
    expect(page.locator("#c-superseded")).to_have_text("3")
    expect(page.locator("#c-cancelled")).to_have_text("1")
    expect(page.locator("#c-ready")).to_have_text("3")  # the newer messages wait
    page.screenshot(path=str(tmp_path / "supersede-topic.png"), full_page=True)
    page.goto(f"{base}/topics/renders?group=audit")
    live(page)
    expect(page.locator("#c-superseded")).to_have_text("0")  # audit does not supersede
    expect(page.locator("#c-cancelled")).to_have_text("0")


def test_an_operator_cancels_a_message_from_the_finder_and_reads_its_timeline(
        page: Page, console_process: Any, client: rmq.Client, tmp_path: Path) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("renders", slots=1, trace=True)
    client.bind("renders", "gpu", supersede=True)
    (stale,) = supersede(client, "renders", "gpu", "sku-42")
    page.goto(f"{base}/find?topic=renders&body=sku-42")
    rows = page.locator("#find-table tbody tr")
    expect(rows).to_have_count(2)  # the superseded delivery runs on; the newer one waits
    timeline = page.locator(f"table.trace-table[data-message-id='{stale.message_id}'] "
                            "tr[data-event]")
    expect(timeline).to_have_count(4)
    expect(timeline.nth(2)).to_contain_text("a newer send told this delivery to stop")

    # the Cancel button of the waiting one asks first, then says what it did
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#find-table tr[data-state=ready] button[data-cancel]").click()
    expect(page.locator("#find-message")).to_have_text(
        f"Cancelled message {stale.message_id} in group gpu: removed 1 pending message, told 0 "
        "running deliveries to stop.")
    expect(rows).to_have_count(1)
    expect(timeline.locator("td:nth-child(2)")).to_have_text(
        ["sent", "claimed", "superseded", "sent", "cancelled"])
    expect(timeline.last).to_contain_text("cancelled: removed while pending")
    assert client.stats("renders").groups["gpu"].ready == 0
    page.screenshot(path=str(tmp_path / "cancel-finder.png"), full_page=True)

    # once the stale render ends, nothing holds the message: a cancel says so
    client.ack(stale)
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("Nothing stored")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("button[data-cancel]", has_text="Cancel in every group").click()
    expect(page.locator("#find-message")).to_have_text(re.compile(
        rf"no message '{stale.message_id}' is pending or running in (group 'gpu'|any group) "
        "of topic 'renders'"))
    expect(page.locator("#find-message")).to_have_class(re.compile("error"))
