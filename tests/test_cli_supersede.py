"""``rmq worker --cancel-superseded``: an async handler's task is cancelled when its delivery
is superseded (docs/cli.md, docs/semantics.md "Supersede and cancel")."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import wait_for
from test_cli import COMMAND, assert_one_line_error, run

import rmq

pytestmark = pytest.mark.single_node

RENDERS = '''
import asyncio
import os
from pathlib import Path

OUT = Path(os.environ["RMQ_TEST_DIR"])


async def render(message):
    with open(OUT / "started", "a") as out:
        out.write(message.text + "\\n")
    if message.text == "price=10":
        await asyncio.sleep(600)  # a long render, cancelled when superseded


class Renderer:
    async def __call__(self, message):
        await render(message)


renderer = Renderer()  # an object whose __call__ is async: run as async too
'''


@pytest.mark.parametrize("target", ["renders:render", "renders:renderer"])
def test_worker_cancels_an_async_handler_whose_delivery_is_superseded(
        redis_url: str, tmp_path: Path, target: str) -> None:
    (tmp_path / "renders.py").write_text(RENDERS)
    client = rmq.Client(redis_url)
    client.create_topic("prices", merge="key")
    client.bind("prices", "gpu", supersede=True)
    client.send("prices", "price=10", key="p")
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - closed in finally
    worker = subprocess.Popen(
        [*COMMAND, "--url", redis_url, "worker", target, "prices", "--group", "gpu",
         "--cancel-superseded"], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "RMQ_TEST_DIR": str(tmp_path)})
    try:
        started = tmp_path / "started"
        wait_for(lambda: started.exists() and "price=10" in started.read_text(), 30,
                 "the first render started")
        client.send("prices", "price=12", key="p")
        wait_for(lambda: client.stats("prices").groups["gpu"].counters.get("acked") == 1, 30,
                 "the newer price rendered")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()
        log.close()
        client.close()
    assert started.read_text().split() == ["price=10", "price=12"]
    text = (tmp_path / "worker.log").read_text()
    assert "was superseded: dropped, not retried" in text
    assert "worker stopped: 1 handled" in text


def test_cancel_superseded_takes_an_async_handler(redis_url: str) -> None:
    with rmq.Client(redis_url) as client:
        client.create_topic("t")
    assert_one_line_error(run("worker", "json:dumps", "t", "--cancel-superseded",
                              url=redis_url), 1, "--cancel-superseded cancels an async")
