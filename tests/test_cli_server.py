"""``rmq server [start|status|stop]``: the embedded server a client without a URL starts in the
background can be seen and stopped, and a second foreground start explains itself. Every
command runs as a real process with its own ``RMQ_HOME``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from helpers import wait_for

from rmq.server import embedded_status, stop_embedded

COMMAND = [sys.executable, "-m", "rmq"]


def environment(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "RMQ_HOME": str(home), **extra}
    if "RMQ_REDIS_URL" not in extra:
        env.pop("RMQ_REDIS_URL", None)
    return env


def rmq(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=60,
                          env=environment(home, **env))


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """An empty RMQ home; whatever server a test leaves running there is stopped."""
    yield tmp_path
    stop_embedded(tmp_path)


def start_in_the_background_as_a_client_does(home: Path) -> int:
    done = subprocess.run([sys.executable, "-c", "import rmq; rmq.Client().close()"],
                          env=environment(home), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pid = embedded_status(home).pid
    assert pid is not None
    return pid


def test_status_shows_the_server_a_client_left_running_and_stop_stops_it(home: Path) -> None:
    pid = start_in_the_background_as_a_client_does(home)
    shown = rmq(home, "server", "status")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[:5] == [
        f"embedded server: running (pid {pid}, in the background)",
        f"  url      unix://{home}/redis.sock",
        f"  data     {home}",
        f"  log      {home}/redis.log",
        f"  version  redis {embedded_status(home).version.split()[1]}",
    ]
    assert lines[5].startswith("  memory   ") and lines[5].endswith(" MiB used, 0 keys")
    assert lines[6].startswith("  uptime   ")
    assert lines[7:] == ["stop it with `rmq server stop`"]

    stopped = rmq(home, "server", "stop")
    assert (stopped.returncode, stopped.stdout) == (
        0, f"stopped the embedded server (pid {pid}); its data stays in {home}\n")
    assert embedded_status(home).state == "not running"
    assert any(home.rglob("*.aof"))  # stopped cleanly, nothing deleted

    gone = rmq(home, "server", "status")
    assert (gone.returncode, gone.stdout) == (3, (
        f"embedded server: not running (data directory {home}); `rmq server start` runs it "
        "in the foreground, and a client without a URL starts it in the background\n"))
    again = rmq(home, "server", "stop")
    assert (again.returncode, again.stdout) == (
        0, f"no embedded server runs in {home}; nothing to stop\n")


def test_status_as_json_names_pid_url_data_and_log(home: Path) -> None:
    pid = start_in_the_background_as_a_client_does(home)
    shown = json.loads(rmq(home, "server", "status", "--json").stdout)
    assert {k: shown[k] for k in ("state", "pid", "daemon", "url", "data_dir", "log", "keys")} \
        == {"state": "running", "pid": pid, "daemon": True, "url": f"unix://{home}/redis.sock",
            "data_dir": str(home), "log": f"{home}/redis.log", "keys": 0}
    assert shown["used_memory"] > 0 and shown["version"].startswith(("redis ", "valkey "))


def test_status_says_when_clients_use_another_redis_instead(home: Path) -> None:
    shown = rmq(home, "server", "status", RMQ_REDIS_URL="redis://elsewhere:6379")
    assert shown.returncode == 3
    assert shown.stderr == ("note: RMQ_REDIS_URL is set, so clients without --url use "
                            "redis://elsewhere:6379, not the embedded server\n")


def test_second_foreground_start_names_the_running_server_and_the_stop_command(
        home: Path) -> None:
    foreground = subprocess.Popen([*COMMAND, "server"], env=environment(home),
                                  stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: embedded_status(home).running, 30, "the foreground server to answer")
        pid = embedded_status(home).pid
        second = rmq(home, "server")
        assert (second.returncode, second.stderr) == (1, (
            f"rmq server: error: the embedded server already runs in {home} (pid {pid}, in "
            "the foreground of an `rmq server`); clients use it as it is; to run it here in "
            "the foreground, first stop it with `rmq server stop`\n"))
        assert rmq(home, "server", "status").stdout.startswith(
            f"embedded server: running (pid {pid}, in the foreground of an `rmq server`)\n")
        stopped = rmq(home, "server", "stop")
        assert stopped.stdout == f"stopped the embedded server (pid {pid}); its data stays " \
                                 f"in {home}\n"
        assert foreground.wait(timeout=30) == 0
    finally:
        foreground.send_signal(signal.SIGTERM)
        foreground.wait(timeout=30)
    assert foreground.stderr.read().splitlines() == [
        f"rmq server: data in {home}, serving unix://{home}/redis.sock; Ctrl-C stops it",
        "rmq server: stopped"]


def test_a_background_server_refuses_a_foreground_start_too(home: Path) -> None:
    pid = start_in_the_background_as_a_client_does(home)
    second = rmq(home, "server", "start", "--data-dir", str(home))
    assert second.stderr == (
        f"rmq server start: error: the embedded server already runs in {home} (pid {pid}, in "
        "the background); clients use it as it is; to run it here in the foreground, first "
        f"stop it with `rmq server stop --data-dir {home}`\n")


def test_detach_starts_the_background_server_once(home: Path) -> None:
    started = rmq(home, "server", "start", "--detach", "--fsync", "always")
    pid = embedded_status(home).pid
    assert (started.returncode, started.stdout) == (0, (
        f"started the embedded server in the background (pid {pid}): unix://{home}/redis.sock;"
        f" data and log in {home}; `rmq server stop` stops it\n"))
    again = rmq(home, "server", "--detach")
    assert again.stdout == f"the embedded server already runs (pid {pid}): " \
                           f"unix://{home}/redis.sock\n"
    assert start_in_the_background_as_a_client_does(home) == pid  # the client reused it
    with redis.Redis.from_url(f"unix://{home}/redis.sock", decode_responses=True) as server:
        assert server.config_get("appendfsync") == {"appendfsync": "always"}


def test_server_actions_refuse_url_and_options_of_start(home: Path) -> None:
    assert rmq(home, "--url", "redis://127.0.0.1:1", "server", "status").stderr == (
        "rmq server status: error: --url does not apply: `rmq server` manages the embedded "
        "server (choose its directory with --data-dir)\n")
    assert rmq(home, "server", "--port", "7000", "stop").stderr == (
        "rmq server stop: error: --port applies to `rmq server start` only\n")
    refused = rmq(home, "server", "--port", "70000")
    assert (refused.returncode, refused.stderr.splitlines()[-1]) == (2, (
        "rmq server: error: argument --port: a port is from 1 to 65535 (0: none), "
        "got 70000 (see --help)"))


def test_a_paused_server_is_shown_as_not_answering_and_stop_still_stops_it(home: Path) -> None:
    pid = start_in_the_background_as_a_client_does(home)
    os.kill(pid, signal.SIGSTOP)  # hung: alive, answers nothing (the fixture stops it too)
    shown = rmq(home, "server", "status")
    assert (shown.returncode, shown.stdout) == (3, (
        f"embedded server: not answering (pid {pid} is alive but does not answer on "
        f"unix://{home}/redis.sock; its log: {home}/redis.log); `rmq server stop` stops it\n"))
    refused = rmq(home, "server")
    assert refused.stderr == (
        f"rmq server: error: the embedded server in {home} (pid {pid}) is alive but does not "
        "answer; stop it with `rmq server stop`\n")
    stopped = rmq(home, "server", "stop")
    assert stopped.stdout == f"stopped the embedded server (pid {pid}); its data stays in " \
                             f"{home}\n"
    assert embedded_status(home).state == "not running"
