"""The command line around the console (issue 10, point 5): ``rmq console`` and ``rmq
metrics`` with ``--help`` and one-line errors, ``--json`` where a script wants it, and
``rmq stats --watch`` as a live Rich view on a terminal."""

from __future__ import annotations

import json
import os
import pty
import socket
import subprocess
import sys
import time

import pytest

import rmq

pytestmark = pytest.mark.extras

COMMAND = [sys.executable, "-m", "rmq"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=60)


def one_line_error(done: subprocess.CompletedProcess[str], status: int, words: str) -> None:
    assert done.returncode == status, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert words in done.stderr


@pytest.mark.parametrize("command", [["console"], ["metrics"]])
def test_console_and_metrics_have_help(command: list[str]) -> None:
    done = run(*command, "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: rmq"), done.stderr
    assert "--port" in done.stdout and "--token" in done.stdout


def test_a_port_in_use_is_one_clear_line(console_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        one_line_error(run("--url", console_url, "console", "--port", str(port)), 1,
                       f"cannot listen on 127.0.0.1:{port}")
        one_line_error(run("--url", console_url, "metrics", "--port", str(port)), 1,
                       "Address already in use")


def test_bad_console_arguments_exit_2(console_url: str) -> None:
    one_line_error(run("--url", console_url, "console", "--port", "70000"), 2,
                   "must be a port from 1 to 65535")
    one_line_error(run("--url", console_url, "console", "--refresh", "0"), 2,
                   "from 0.2 to 60 seconds")
    one_line_error(run("--url", console_url, "stats", "t", "--watch", "-1"), 2,
                   "at least 0.01")


def test_scripts_get_json_from_create_alter_requeue_and_purge(console_url: str,
                                                              client: rmq.Client) -> None:
    created = json.loads(run("--url", console_url, "topic", "create", "t", "--slots", "2",
                             "--max-retries", "0", "--json").stdout)
    assert created == {"name": "t", "settings": client.topic("t").settings.to_dict()}
    altered = json.loads(run("--url", console_url, "topic", "alter", "t", "--retry-backoff",
                             "0", "--json").stdout)
    assert altered["settings"]["retry_backoff"] == 0
    client.send_many("t", ["a", "b"])
    for message in client.claim("t", count=2):
        client.nack(message, "boom")
    (first, _) = [d.id for d in client.dead_letters("t")]
    done = run("--url", console_url, "dead", "requeue", "t", "--ids", first, "--json")
    assert json.loads(done.stdout) == {"requeued": 1}
    assert json.loads(run("--url", console_url, "dead", "purge", "t", "--json",
                                 "--yes").stdout) == {
        "purged": 1}


def test_stats_watch_on_a_terminal_is_a_live_view_redrawn_in_place(
        console_url: str, client: rmq.Client) -> None:
    client.create_topic("t", slots=4)
    client.bind("t", "audit")
    client.send_many("t", [f"m{i % 7}" for i in range(20)] + [{"body": "hi", "priority": 250}])
    controller, terminal = pty.openpty()
    process = subprocess.Popen([*COMMAND, "--url", console_url, "stats", "t", "--watch",
                                "0.2", "--count", "3", "--slots"],
                               stdin=terminal, stdout=terminal, stderr=terminal,
                               env={**os.environ, "COLUMNS": "160", "LINES": "50",
                                    "TERM": "xterm-256color"})
    os.close(terminal)
    output = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the process closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    assert process.wait(timeout=30) == 0
    text = output.decode("utf-8", "replace")
    assert "topic t" in text and "busiest slots of audit" in text
    assert "ready by priority (audit): 250: 1  MEDIUM: 7" in text
    assert text.count("topic t") >= 3  # each refresh draws the view again...
    assert "\x1b[1A" in text and "\x1b[2K" in text  # ...over the last one, in place
    assert "acked/s" in text and "sent/s" in text
