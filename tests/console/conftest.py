"""Fixtures of the console tests: the app in-process over a real Redis (``api``), the console
as a real ``rmq console`` process (``console_process``), and one headless chromium for the
whole session, driven by Playwright (``browser``; Debian's ``/usr/bin/chromium``, nothing is
downloaded)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from console_helpers import TestClient
from helpers import wait_for
from playwright.sync_api import Page

import rmq
from rmq.console import create_app
from rmq.server import RedisServer, free_port

CHROMIUM = os.environ.get("RMQ_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
LOCAL = "http://127.0.0.1:8270"  # the Host an in-process request names


@pytest.fixture
def console_url(redis_server: RedisServer) -> str:
    """The shared single node, emptied. The console is an edge over the public client, like
    the command line, so its tests run on one node; ``redis_url`` tests also run on the
    cluster."""
    with redis_server.client() as raw:
        raw.flushall()
    return redis_server.url


@pytest.fixture
def client(console_url: str) -> Iterator[rmq.Client]:
    with rmq.Client(console_url) as c:
        yield c


@pytest.fixture
def api(client: rmq.Client) -> Iterator[TestClient]:
    """The console app in-process (no sampler thread), answering as if on loopback."""
    with TestClient(create_app(client, sample_interval=None), base_url=LOCAL) as http:
        yield http


def start_console(url: str, *args: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``rmq console`` as a real process on a free port; returns it and its base URL once it
    answers."""
    port = free_port()
    out = open(log, "wb")  # noqa: SIM115 - the process owns it until it ends
    process = subprocess.Popen([sys.executable, "-m", "rmq", "--url", url, "console",
                                "--port", str(port), *args],
                               stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"rmq console exited: {log.read_text()}")
        try:
            return httpx.get(f"{base}/static/console.css", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(answers, 30, "the console to answer")
    return process, base


@pytest.fixture
def console_process(console_url: str, tmp_path: Path) -> Iterator[Callable[..., str]]:
    """A factory of ``rmq console`` processes (arguments added to the command); each is
    stopped with SIGTERM at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> str:
        log = tmp_path / f"console-{len(started)}.log"
        process, base = start_console(console_url, *args, log=log)
        started.append(process)
        return base

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that use the browser run last in the session: Playwright's sync API keeps
    an asyncio loop running in the main thread from its start to the end of the session,
    and the asyncio tests of the rest of the suite cannot run beside it."""
    uses = [item for item in items if "browser" in getattr(item, "fixturenames", ())]
    others = [item for item in items if "browser" not in getattr(item, "fixturenames", ())]
    items[:] = others + uses


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless chromium for the session (its tests run last, see above)."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"the console's browser tests need {CHROMIUM}: apt-get install chromium "
                    "(./dev install does)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    """A fresh page of the run's one browser (1440x900, 30 s default timeout); the test fails
    if a script of the page raised."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.set_default_timeout(30_000)
    yield opened
    context.close()
    assert errors == [], f"scripts failed in the page: {errors}"
