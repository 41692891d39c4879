"""The console end to end (issue 10, "How it is tested"): a real ``rmq console`` process, real
``rmq worker`` processes and a real Redis, driven in headless chromium. It creates a topic
through the form, watches backlog and charts move, lets a handler fail until a dead letter
appears, requeues it from the page and sees it handled, finds a message by body (and an
in-flight one with the consumer that holds it), and pauses the topic to see the consumers
stop. Screenshots of every page, at desktop (1440x900) and
laptop (1280x720) sizes, go to the test's folder; with ``RMQ_CONSOLE_SCREENSHOTS=docs`` they
are also copied to ``docs/console/`` for docs/console.md."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for
from playwright.sync_api import Page, expect

import rmq
from rmq.storage.registry import ConsumerState

pytestmark = pytest.mark.extras

DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"
SIZES = {"desktop": (1440, 900), "laptop": (1280, 720)}

HANDLER = '''
import os
import time
from pathlib import Path

OUT = Path(os.environ["RMQ_TEST_DIR"])


def handle(message):
    if message.text.startswith("fail") and not (OUT / "fixed").exists():
        raise ValueError(f"cannot price {message.text}: no such product")
    time.sleep(0.01)
    with open(OUT / f"handled-{message.topic}", "a") as out:
        out.write(message.text + "\\n")
'''


class Workers:
    def __init__(self, url: str, where: Path):
        self.url, self.where = url, where
        (where / "shop.py").write_text(textwrap.dedent(HANDLER))
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, topic: str, group: str = "default") -> None:
        log = open(self.where / f"worker-{topic}-{group}.log", "ab")  # noqa: SIM115
        self.processes.append(subprocess.Popen(
            [sys.executable, "-m", "rmq", "--url", self.url, "worker", "shop:handle", topic,
             "--group", group, "--concurrency", "4"], cwd=self.where, stdout=log,
            stderr=subprocess.STDOUT, env={**os.environ, "RMQ_TEST_DIR": str(self.where)}))

    def handled(self, topic: str) -> list[str]:
        path = self.where / f"handled-{topic}"
        return path.read_text().split() if path.exists() else []

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(timeout=30)


@pytest.fixture
def workers(console_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(console_url, tmp_path)
    yield started
    started.stop()


def live(page: Page) -> None:
    """Wait until the page has drawn its data (its live indicator says when)."""
    expect(page.locator("#live-text")).to_contain_text("updated")


def screenshots(page: Page, base: str, folder: Path, shots: dict[str, str]) -> None:
    """Each page of ``shots`` at both sizes, once it has drawn its data."""
    for size, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        for name, path in shots.items():
            page.goto(base + path)
            live(page)
            if name == "topic":
                page.wait_for_function("() => Chart.getChart('chart-rates').data.datasets"
                                       ".some(d => d.data.some(p => p.y > 0))")
            if name == "find":
                expect(page.locator("#find-table tbody tr")).not_to_have_count(0)
            shot = folder / f"{name}-{size}.png"
            page.screenshot(path=str(shot), full_page=True)
            if os.environ.get("RMQ_CONSOLE_SCREENSHOTS") == "docs":
                DOCS.mkdir(exist_ok=True)
                shutil.copy(shot, DOCS / shot.name)
    page.set_viewport_size({"width": 1440, "height": 900})


def send_steadily(client: rmq.Client, topic: str, stop: threading.Event) -> None:
    """Price changes at about 600 a second over 500 products (faster than the worker
    handles them, so duplicates of waiting ones merge), a few of them urgent."""
    n = 0
    while not stop.is_set():
        batch: list[Any] = [f"sku-{(n + i) % 500}" for i in range(60)]
        batch += [{"body": f"sku-{n % 40}", "priority": 200}]
        client.send_many(topic, batch)
        n += 61
        stop.wait(0.1)


def test_an_operator_runs_the_queue_from_the_console(
        page: Page, console_process: Any, workers: Workers, client: rmq.Client,
        tmp_path: Path) -> None:
    base = console_process("--refresh", "1")
    # a second, busier topic, so that the overview has something to compare
    client.create_topic("emails", slots=16, max_retries=0)
    client.bind("emails", "default")
    client.bind("emails", "audit")  # bound, with no consumer: its backlog waits
    client.send_many("emails", [f"welcome-{i}" for i in range(40)] + [
        {"body": f"reminder-{i}", "delay_ms": 3_600_000, "priority": 64} for i in range(12)]
        + [f"fail-bounce-{i}" for i in range(3)])

    # 1. create a topic through the form; a bad name first gets its own message
    page.goto(base)
    live(page)
    page.fill("#create-form [name=name]", "prices!")
    page.click("#create-form button[type=submit]")
    expect(page.locator("#create-message")).to_contain_text("invalid topic name 'prices!'")
    page.fill("#create-form [name=name]", "prices")
    page.select_option("#create-form [name=slots]", "16")
    page.fill("#create-form [name=max_retries]", "1")
    page.fill("#create-form [name=retry_backoff]", "0")
    page.click("#create-form button[type=submit]")
    expect(page.locator("#create-message")).to_contain_text("Created topic prices")
    expect(page.locator("tr[data-topic=prices]")).to_have_count(1)
    assert client.topic("prices").settings.max_retries == 1

    # 2. consumers start; messages flow; backlog and charts move
    workers.start("prices")
    workers.start("emails")
    stop = threading.Event()
    sender = threading.Thread(target=send_steadily, args=(client, "prices", stop))
    sender.start()
    try:
        client.send("prices", "fail-42")
        page.goto(f"{base}/topics/prices")
        live(page)
        expect(page.locator("#c-consumers")).to_have_text("1")
        page.wait_for_function("() => Chart.getChart('chart-rates').data.datasets[0].data"
                               ".filter(p => p.y > 0).length >= 2")  # sent/s, two samples
        page.wait_for_function("() => Chart.getChart('chart-merge').data.datasets[0].data"
                               ".some(p => p.y > 0)")  # duplicates merged
        points = page.evaluate("() => Chart.getChart('chart-backlog').data.datasets[0].data"
                               ".length")
        page.wait_for_function(f"() => Chart.getChart('chart-backlog').data.datasets[0].data"
                               f".length > {points}")  # the chart moves with time
        assert page.locator("#heat .cell").count() == 16

        # 3. the failing handler produces a dead letter; requeue it once the bug is fixed
        page.goto(f"{base}/dead?topic=prices")
        row = page.locator("#dead-table tbody tr[data-id]")
        expect(row).to_have_count(1)
        expect(row).to_contain_text("ValueError: cannot price fail-42")
        expect(row).to_contain_text("fail-42")
        wait_for(lambda: client.stats("emails").groups["default"].dead == 3, 30,
                 "the bounces to be dead-lettered")
        screenshots(page, base, tmp_path, {
            "overview": "/", "topic": "/topics/prices", "consumers": "/consumers",
            "dead-letters": "/dead?topic=prices"})
        page.goto(f"{base}/dead?topic=prices")
        expect(row).to_have_count(1)
        (tmp_path / "fixed").touch()
        row.locator("button", has_text="Requeue").click()
        expect(page.locator("#dead-message")).to_contain_text("Requeued 1 dead letter")
        wait_for(lambda: "fail-42" in workers.handled("prices"), 30,
                 "the requeued message to be handled")
        expect(page.locator("#dead-table tbody tr[data-id]")).to_have_count(0)
    finally:
        stop.set()
        sender.join()

    # 4. pause the topic from its page: the consumers stop
    page.goto(f"{base}/topics/prices")
    live(page)
    page.click("#pause-button")
    expect(page.locator("#topic-state")).to_have_text("paused")
    paused_at = time.time()
    wait_for(lambda: all(c.last_seen / 1000 > paused_at + 1.5 for c in client.consumers("prices")),
             30, "the worker to heartbeat after its registry cache expired")
    handled_before = len(workers.handled("prices"))
    waiting = client.stats("prices").groups["default"].ready  # what the worker had not reached
    client.send_many("prices", [f"needle-{i}" for i in range(25)])
    expect(page.locator("#c-ready")).to_have_text(f"{waiting + 25:,}")
    page.goto(f"{base}/consumers?topic=prices")
    row = page.locator("#consumers-table tbody tr[data-alive=true]")
    expect(row).to_have_count(1)
    beat = client.consumers("prices")[0].last_seen
    wait_for(lambda: client.consumers("prices")[0].last_seen > beat, 30, "a heartbeat")
    assert len(workers.handled("prices")) == handled_before  # alive, yet handling nothing
    assert client.stats("prices").groups["default"].ready == waiting + 25

    # 5. find a waiting message by its body
    page.goto(f"{base}/find")
    page.select_option("#find-form [name=topic]", "prices")
    page.fill("#find-form [name=body]", "needle-7")
    page.click("#find-form button[type=submit]")
    found = page.locator("#find-table tbody tr[data-state=ready]")
    expect(found).to_have_count(1)
    slot = client.find_messages("prices", "needle-7")[0].slot
    expect(found.locator("td").nth(2)).to_have_text(str(slot))
    expect(found).to_contain_text("MEDIUM")
    # ... and names the consumer that holds an in-flight one
    (held,) = client.claim("emails", "audit", count=1, holder="inspector-1")
    find_held = f"/find?topic=emails&body={held.body.decode()}"
    page.goto(base + find_held)
    expect(page.locator("#find-table tbody tr[data-state=in_flight]")).to_contain_text(
        "inspector-1")

    screenshots(page, base, tmp_path, {"find": find_held})

    # 6. resume: the backlog drains
    page.goto(f"{base}/topics/prices")
    # the page has read the topic (and wired its buttons) once it shows the state
    expect(page.locator("#topic-state")).to_have_text("paused")
    page.click("#pause-button")
    expect(page.locator("#topic-state")).to_have_text("active")
    expect(page.locator("#c-ready")).to_have_text("0")
    assert {f"needle-{i}" for i in range(25)} <= set(workers.handled("prices"))


def dead_letters(client: rmq.Client, topic: str, count: int) -> None:
    client.send_many(topic, [f"{topic}-{i}" for i in range(count)])
    for message in client.claim(topic, count=count):
        client.nack(message, "broken")


def test_the_console_leads_from_each_count_to_its_messages_and_speaks_of_priorities_by_name(
        page: Page, console_process: Any, client: rmq.Client, tmp_path: Path) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("alerts", max_retries=0)  # first by name, and no dead letters
    for topic, dead in (("emails", 28), ("prices", 1)):
        client.create_topic(topic, max_retries=0)
        dead_letters(client, topic, dead)
    client.send_many("alerts", [{"body": "a", "priority": 192}, {"body": "b", "priority": 200}])

    # the overview's counts are links: the dead count of emails opens its dead letters
    page.goto(base)
    live(page)
    expect(page.locator("#total-dead")).to_have_text("29")
    expect(page.locator("tr[data-topic=alerts]")).to_contain_text("HIGH 1")
    ready = page.locator("tr[data-topic=alerts] a[data-state=ready]")
    expect(ready).to_have_attribute("href", "/topics/alerts?group=default&state=ready")
    page.locator("tr[data-topic=emails] a[data-state=dead]").click()
    page.wait_for_url(f"{base}/dead?topic=emails&group=default")
    expect(page.locator("#dead-count")).to_contain_text("28 in emails / default")

    # the purge dialog counts in words; cancelled, nothing is gone
    page.click("#purge")
    expect(page.locator("#purge-dialog")).to_contain_text(
        "This deletes all 28 dead letters of group default of topic emails")
    page.click("#purge-cancel")

    # without ?topic= the page opens on the first topic that has dead letters, each counted
    page.goto(f"{base}/dead")
    live(page)
    expect(page.locator("#dead-topic")).to_have_value("emails")
    expect(page.locator("#dead-topic option")).to_have_text(
        ["alerts (0)", "emails (28)", "prices (1)"])

    # the group's count follows what happens elsewhere, with the rest of the page
    page.select_option("#dead-topic", "prices")
    expect(page.locator("#dead-group option")).to_have_text(["default (1)"])
    client.requeue_dead("prices", "default")
    expect(page.locator("#dead-group option")).to_have_text(["default (0)"])
    expect(page.locator("#dead-topic option").nth(2)).to_have_text("prices (0)")
    dead_letters(client, "prices", 1)
    expect(page.locator("#dead-group option")).to_have_text(["default (1)"])
    page.click("#purge")
    expect(page.locator("#purge-dialog")).to_contain_text("This deletes the 1 dead letter of")
    page.click("#purge-cancel")

    # the topic page opens the state a count linked to; priorities are named, sent by name
    page.goto(f"{base}/topics/alerts?group=default&state=ready")
    live(page)
    expect(page.locator("#state-tabs button.active")).to_have_attribute("data-state", "ready")
    expect(page.locator("#peek-table tbody")).to_contain_text("HIGH")
    expect(page.locator("#peek-table tbody")).to_contain_text("200")
    page.wait_for_function("() => Chart.getChart('chart-priority').data.labels.join() "
                           "=== '200,HIGH'")
    page.fill("#send-form [name=body]", "urgent")
    page.select_option("#send-priority", "192")
    page.click("#send-form button[type=submit]")
    expect(page.locator("#send-message")).to_contain_text("Sent to slot")
    page.select_option("#send-priority", "custom")
    page.fill("#send-form [name=priority]", "7")
    page.fill("#send-form [name=body]", "whenever")
    page.click("#send-form button[type=submit]")
    expect(page.locator("#send-message")).to_contain_text("Sent to slot")
    sent = {m.body: m.priority for m in client.snapshot("alerts")}
    assert (sent[b"urgent"], sent[b"whenever"]) == (192, 7)
    page.goto(f"{base}/topics/alerts?state=dead")
    live(page)
    expect(page.locator("#state-tabs button.active")).to_have_attribute("data-state", "dead")

    # the API's own page lists its endpoints, drawn from the package alone
    page.goto(f"{base}/api/docs")
    expect(page.locator("#endpoints tbody tr")).not_to_have_count(0)
    expect(page.locator("a[href='/api/openapi.json']")).to_have_count(1)
    screenshots_of = {"overview": "/", "dead-letters": "/dead", "topic": "/topics/alerts",
                      "api-docs": "/api/docs"}
    for name, path in screenshots_of.items():
        page.goto(base + path)
        if name != "api-docs":
            live(page)
        page.screenshot(path=str(tmp_path / f"edges-{name}.png"), full_page=True)


def test_an_operator_binds_a_filtered_group_from_the_topic_page(
        page: Page, console_process: Any, client: rmq.Client) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("prices")
    page.goto(f"{base}/topics/prices")
    live(page)
    page.fill("#bind-form [name=group]", "eu")
    page.fill("#bind-form [name=where]", "region = ")
    page.click("#bind-form button[type=submit]")
    expect(page.locator("#bind-message")).to_contain_text("column 10")
    page.fill("#bind-form [name=group]", "eu")
    page.fill("#bind-form [name=tags]", "order || refund")
    page.fill("#bind-form [name=where]", "region = 'eu'")
    page.click("#bind-form button[type=submit]")
    expect(page.locator("#bind-message")).to_contain_text("that its filters accept")
    expect(page.locator("#filters")).to_contain_text("tags order || refund; where region = 'eu'")
    client.send("prices", "us-order", tag="order", properties={"region": "us"})
    client.send("prices", "eu-order", tag="order", properties={"region": "eu"})
    expect(page.locator("#c-filtered")).to_have_text("1")
    page.goto(f"{base}/find?topic=prices&body=eu-order")
    expect(page.locator("#find-table tbody tr")).to_contain_text('order · region="eu"')
    page.goto(f"{base}/topics/prices")
    live(page)
    expect(page.locator("#peek-table tbody")).to_contain_text('order · region="eu"')


def test_an_operator_sets_a_groups_limits_on_the_topic_page(
        page: Page, console_process: Any, client: rmq.Client, tmp_path: Path) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("renders")
    client.set_limits("renders", max_in_flight=4)
    page.goto(f"{base}/topics/renders")
    live(page)
    expect(page.locator("#limits-now")).to_contain_text("Limits of default: max in flight 4.")
    # the form opens with the limits as stored
    expect(page.locator("#limits-form [name=max_in_flight]")).to_have_value("4")
    expect(page.locator("#limits-form [name=rate_count]")).to_have_value("")
    # a field left as it is keeps its limit
    page.fill("#limits-form [name=rate_count]", "100")
    page.fill("#limits-form [name=rate_seconds]", "60")
    page.click("#limits-form button[type=submit]")
    expect(page.locator("#limits-message")).to_contain_text(
        "Limits of default: max in flight 4, rate 100 per 60s.")
    assert client.limits("renders") == rmq.GroupLimits(4, (100, 60))
    expect(page.locator("#limits-form [name=rate_count]")).to_have_value("100")
    page.screenshot(path=str(tmp_path / "limits-form.png"), full_page=True)
    # a field cleared removes its limit; the page's refreshes leave a typed field alone
    page.fill("#limits-form [name=max_in_flight]", "")
    expect(page.locator("#live-text")).not_to_have_text(page.inner_text("#live-text"))
    expect(page.locator("#limits-form [name=max_in_flight]")).to_have_value("")
    page.click("#limits-form button[type=submit]")
    expect(page.locator("#limits-message")).to_contain_text(
        "Limits of default: rate 100 per 60s.")
    assert client.limits("renders") == rmq.GroupLimits(None, (100, 60))
    # a limit stored meanwhile by another operator shows in the fields not typed in
    client.set_limits("renders", max_in_flight=7)
    expect(page.locator("#limits-form [name=max_in_flight]")).to_have_value("7")
    page.fill("#limits-form [name=rate_count]", "0")
    page.click("#limits-form button[type=submit]")
    expect(page.locator("#limits-message")).to_contain_text(
        "rate count must be an integer from 1 to 1000000, got 0")
    assert client.limits("renders") == rmq.GroupLimits(7, (100, 60))
    # the batches a pool of GPUs runs at once
    page.fill("#limits-form [name=rate_count]", "100")
    page.fill("#limits-form [name=max_batches]", "4")
    page.click("#limits-form button[type=submit]")
    expect(page.locator("#limits-message")).to_contain_text(
        "Limits of default: max in flight 7, rate 100 per 60s, max batches 4.")
    assert client.limits("renders") == rmq.GroupLimits(7, (100, 60), 4)


def test_an_operator_reads_the_signals_of_each_group_on_the_pages(
        page: Page, console_process: Any, client: rmq.Client, console_url: str,
        tmp_path: Path) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("renders", slots=2)
    client.bind("renders", "gpu")
    client.bind("renders", "audit", where="region = 'eu'")
    client.set_limits("renders", "gpu", max_in_flight=4)
    client.send_many("renders", [{"body": f"sku-{i}", "properties": {
        "region": "eu" if i < 3 else "us"}} for i in range(5)])
    client.claim("renders", "gpu", count=2)
    client.claim("renders", "audit", count=3, lease=0.05)  # its consumer died: left to expire
    client.transaction("renders", id="order-17").send_many(["a", "b"])
    times = rmq.HandlerTimes((0, 0, 0, 0, 3, 1) + (0,) * 11, 0.6)
    client.heartbeat(ConsumerState("gpu-1", "renders", "gpu", "h1", 11, client.now(), 4, 2, 4,
                                   0, times))
    with rmq.Client(console_url, clock=lambda: time.time_ns() // 1_000_000 - 60_000) as behind:
        behind.heartbeat(ConsumerState("audit-1", "renders", "audit", "h2", 12, behind.now(), 2,
                                       3, 40, 1))
    wait_for(lambda: client.stats("renders").groups["audit"].expired == 3, 10, "leases to end")

    page.goto(base)
    live(page)
    gpu = page.locator("tr.group-row[data-group=gpu]")
    audit = page.locator("tr.group-row[data-group=audit]")
    expect(page.locator("tr.group-row")).to_have_count(2)  # default: not bound, nothing in it
    expect(gpu.locator("a[data-state=in_flight]")).to_have_text("2 / 4")
    expect(audit.locator("a[data-state=in_flight]")).to_have_text("0")
    expect(audit.locator("[data-cell=expired]")).to_have_text("+3 expired")
    expect(gpu.locator("[data-cell=expired]")).to_have_count(0)
    expect(audit.locator("td[data-cell=filtered]")).to_have_text("2")
    expect(page.locator("[data-cell=transactions]")).to_have_text("1 open tx · 2 half")
    page.screenshot(path=str(tmp_path / "signals-overview.png"), full_page=True)

    page.goto(f"{base}/topics/renders?group=gpu")
    live(page)
    expect(page.locator("#c-in_flight-label")).to_have_text("In flight / max")
    expect(page.locator("#c-in_flight")).to_have_text("2 / 4")
    expect(page.locator("#c-handler")).to_have_text("150 ms · p95 ≤ 250 ms")
    expect(page.locator("#tx-open")).to_have_text("1")
    page.goto(f"{base}/topics/renders?group=audit")
    live(page)
    expect(page.locator("#c-in_flight")).to_have_text("0")
    expect(page.locator("#c-expired")).to_have_text("3")
    expect(page.locator("#c-filtered")).to_have_text("2")
    page.screenshot(path=str(tmp_path / "signals-topic.png"), full_page=True)

    page.goto(f"{base}/consumers")
    live(page)
    dead = page.locator("tr[data-consumer=audit-1]")
    expect(dead.locator("td.stale")).to_have_text(["3", "40", "1"])
    expect(page.locator("tr[data-consumer=gpu-1] td.stale")).to_have_count(0)
    expect(page.locator("#dead-after")).to_contain_text("no longer listed after 10m 00s")
    page.screenshot(path=str(tmp_path / "signals-consumers.png"), full_page=True)


def test_the_bind_form_notes_a_bare_word_and_the_send_form_names_who_turned_it_away(
        page: Page, console_process: Any, client: rmq.Client, tmp_path: Path) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("prices")
    page.goto(f"{base}/topics/prices")
    live(page)
    page.fill("#bind-form [name=group]", "eu")
    page.fill("#bind-form [name=where]", "region = eu")
    page.click("#bind-form button[type=submit]")
    expect(page.locator("#bind-message")).to_have_text(
        "Bound eu: it gets every message sent from now on that its filters accept. Note: eu "
        "is read as a property name (region = eu compares two properties); quote a string: "
        "region = 'eu'.")
    expect(page.locator("#filters")).to_contain_text("where region = eu")  # bound as given
    page.fill("#send-form [name=body]", "order-17")
    page.click("#send-form button[type=submit]")
    expect(page.locator("#send-message")).to_have_text(
        re.compile(r"Sent to slot \d+\. The filters of eu turned it away\."))
    page.screenshot(path=str(tmp_path / "bind-note.png"), full_page=True)


def test_a_dead_letter_links_its_trace_and_shows_its_whole_error_on_demand(
        page: Page, console_process: Any, client: rmq.Client, tmp_path: Path) -> None:
    base = console_process("--refresh", "1")
    client.create_topic("prices", slots=1, max_retries=0, trace=True)
    sent = client.send("prices", "sku-42")
    (message,) = client.claim("prices")
    error = ("Traceback (most recent call last):\n  File \"shop.py\", line 9, in render\n"
             "    price = prices[sku]\nKeyError: 'sku-42'")
    assert client.nack(message, error) == "dead"
    page.goto(f"{base}/dead?topic=prices")
    live(page)
    row = page.locator("#dead-table tbody tr[data-id]")
    link = row.locator(f"a[href='/find?topic=prices&message_id={sent.message_id}']")
    expect(link).to_have_text(sent.message_id)
    summary = row.locator("td.error summary")
    expect(summary).to_have_text("Traceback (most recent call last): …")
    expect(row.locator("td.error pre")).not_to_be_visible()  # the rest on demand
    summary.click()
    expect(row.locator("td.error pre")).to_have_text(error)
    shown = page.inner_text("#live-text")
    expect(page.locator("#live-text")).not_to_have_text(shown)  # the page refreshed
    expect(row.locator("td.error pre")).to_be_visible()  # and what was opened stays open
    page.screenshot(path=str(tmp_path / "dead-letter-error.png"), full_page=True)
    link.click()
    page.wait_for_url(f"{base}/find?topic=prices&message_id={sent.message_id}")
    timeline = page.locator(f"table.trace-table[data-message-id='{sent.message_id}']")
    expect(timeline.locator("tr[data-event]")).to_have_count(4)
    expect(timeline.locator("tr[data-event] td:nth-child(2)")).to_have_text(
        ["sent", "claimed", "failed", "dead"])
    page.screenshot(path=str(tmp_path / "dead-letter-trace.png"), full_page=True)
