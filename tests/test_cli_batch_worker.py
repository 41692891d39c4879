"""``rmq worker --batch N``: the command runs a batch handler (docs/cli.md)."""

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

BATCH_MODULE = '''
import os
from pathlib import Path

import rmq

OUT = Path(os.environ["RMQ_TEST_DIR"])


def handle(messages):
    with open(OUT / "batches", "a") as out:
        out.write(" ".join(sorted(m.text for m in messages)) + "\\n")
    bad = [m for m in messages if m.body == b"bad"]
    if bad:
        raise rmq.BatchFailed({bad[0]: "bad body"})
'''


@pytest.fixture
def client(redis_url: str):
    with rmq.Client(redis_url) as c:
        yield c


def test_worker_with_batch_hands_its_function_lists_and_retries_only_what_it_names(
        redis_url: str, client: rmq.Client, tmp_path: Path) -> None:
    (tmp_path / "renders.py").write_text(BATCH_MODULE)
    client.create_topic("t", slots=1, max_retries=0)
    client.send_many("t", ["a", "b", "bad", "c"])
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - closed in finally
    worker = subprocess.Popen(
        [*COMMAND, "--url", redis_url, "worker", "renders:handle", "t", "--batch", "4",
         "--batch-wait-ms", "50", "--concurrency", "1"], cwd=tmp_path, stdout=log,
        stderr=subprocess.STDOUT, env={**os.environ, "RMQ_TEST_DIR": str(tmp_path)})
    try:
        wait_for(lambda: client.dead_letters("t"), 30, "the bad message dead-lettered")
        wait_for(lambda: client.stats("t").groups["default"].counters["acked"] == 3, 30,
                 "the rest acknowledged")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()
        log.close()
    assert (tmp_path / "batches").read_text() == "a b bad c\n"
    assert [d.error for d in client.dead_letters("t")] == ["bad body"]
    text = (tmp_path / "worker.log").read_text()
    assert "batches of up to 4 (waiting up to 50 ms)" in text
    assert "worker stopped: 3 handled, 1 message failed (1 failed attempt)" in text


@pytest.mark.parametrize("options, words", [
    (["--batch-wait-ms", "50"], "--batch-wait-ms applies to batch handlers"),
    (["--batch", "4", "--prefetch", "8"], "--prefetch does not apply with --batch"),
    (["--batch", "10001"], "one claim takes at most 10000"),
    (["--batch", "4", "--batch-wait-ms", "3600001"], "at most 3600000"),
])
def test_worker_batch_options_that_do_not_fit_exit_1_with_one_line(
        redis_url: str, client: rmq.Client, options: list[str], words: str) -> None:
    client.create_topic("t")
    assert_one_line_error(run("worker", "json:dumps", "t", *options, url=redis_url), 1, words)
