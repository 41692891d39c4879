"""The ``rmq`` command, run as a real process (``python -m rmq``) against a real server."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from helpers import wait_for

import rmq
from rmq.server import free_port
from rmq.storage.registry import ConsumerState

pytestmark = pytest.mark.single_node

COMMAND = [sys.executable, "-m", "rmq"]


def run(*args: str, url: str | None = None, stdin: str | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    prefix = ["--url", url] if url else []
    return subprocess.run([*COMMAND, *prefix, *args], input=stdin, capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def ok(*args: str, url: str, stdin: str | None = None) -> str:
    done = run(*args, url=url, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def assert_one_line_error(done: subprocess.CompletedProcess[str], status: int,
                          words: str) -> None:
    assert done.returncode == status
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert words in done.stderr


@pytest.fixture
def client(redis_url: str):
    with rmq.Client(redis_url) as c:
        yield c


@pytest.mark.parametrize("command", [
    [], ["server"], ["server", "start"], ["server", "status"], ["server", "stop"], ["topic"],
    ["topic", "create"], ["topic", "list"], ["topic", "show"],
    ["topic", "alter"], ["topic", "delete"], ["topic", "pause"], ["topic", "resume"],
    ["topic", "bind"], ["topic", "unbind"], ["send"], ["cancel"], ["worker"], ["stats"],
    ["dead"], ["consumers"],
])
def test_every_command_has_help(command: list[str]) -> None:
    done = run(*command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: rmq")


def test_topic_lifecycle(redis_url: str) -> None:
    created = ok("topic", "create", "prices", "--slots", "4", "--max-retries", "3",
                 "--visibility-timeout", "2.5", "--serial-keys", url=redis_url)
    assert "slots=4" in created and "serial_keys=True" in created
    ok("topic", "create", "prices", "--slots", "4", "--max-retries", "3",
       "--visibility-timeout", "2.5", "--serial-keys", url=redis_url)  # same settings: no-op
    assert ok("topic", "list", "--json", url=redis_url) == '["prices"]\n'
    assert "max_retries=5" in ok("topic", "alter", "prices", "--max-retries", "5", url=redis_url)
    ok("topic", "pause", "prices", url=redis_url)
    ok("topic", "bind", "prices", "audit", url=redis_url)
    shown = json.loads(ok("topic", "show", "prices", "--json", url=redis_url))
    assert shown["paused"] is True and shown["groups"] == ["audit"]
    assert shown["settings"]["max_retries"] == 5 and shown["settings"]["visibility_timeout"] == 2.5
    ok("topic", "resume", "prices", url=redis_url)
    ok("topic", "unbind", "prices", "audit", url=redis_url)
    listed = ok("topic", "list", url=redis_url)
    assert "prices" in listed and "active" in listed and "default" in listed
    assert_one_line_error(run("topic", "delete", "prices", url=redis_url), 1, "--yes")
    ok("topic", "delete", "prices", "--yes", url=redis_url)
    assert ok("topic", "list", "--json", url=redis_url) == "[]\n"


def test_unknown_topic_exits_1_with_one_line(redis_url: str) -> None:
    for args in (["send", "nope", "x"], ["stats", "nope"], ["topic", "show", "nope"],
                 ["dead", "list", "nope"], ["consumers", "nope"], ["topic", "pause", "nope"]):
        assert_one_line_error(run(*args, url=redis_url), 1, "unknown topic 'nope'")


def test_invalid_values_exit_1_with_one_line(redis_url: str, client: rmq.Client) -> None:
    client.create_topic("t", slots=4)
    assert_one_line_error(run("topic", "create", "u", "--slots", "3", url=redis_url), 1,
                          "power of two")
    assert_one_line_error(run("topic", "create", "t", "--slots", "8", url=redis_url), 1,
                          "exists with other settings")
    assert_one_line_error(run("send", "t", "x", "--priority", "300", url=redis_url), 1,
                          "priority must be an integer from 0 to 255")
    assert_one_line_error(run("send", "t", "x", "--deliver-at", "2020-01-01T00:00:00Z",
                              url=redis_url), 1, "not in the future")
    assert_one_line_error(run("send", "t", "--file", "/no/such/file", url=redis_url), 1,
                          "cannot read /no/such/file")
    assert_one_line_error(run("send", "t", "{oops", "--json", url=redis_url), 1,
                          "not valid JSON")
    assert_one_line_error(run("topic", "alter", "t", url=redis_url), 1, "nothing to change")


def test_bad_arguments_exit_2_with_one_line(redis_url: str) -> None:
    assert_one_line_error(run("send", url=redis_url), 2, "required: TOPIC")
    assert_one_line_error(run("topic", "create", "t", "--slots", "many", url=redis_url), 2,
                          "invalid int value")
    assert_one_line_error(run("send", "t", "x", "--delay-ms", "5", "--deliver-at", "9",
                              url=redis_url), 2, "not allowed with argument")
    assert_one_line_error(run("frobnicate", url=redis_url), 2, "invalid choice")
    assert_one_line_error(run("send", "t", "x", "y", url=redis_url), 2,
                          "unrecognized arguments: y")


def test_unreachable_redis_exits_1_with_one_line(tmp_path: Path) -> None:
    done = run("topic", "list", url=f"unix://{tmp_path}/nothing.sock")
    assert_one_line_error(done, 1, "Redis is unreachable")


def test_send_reports_merges_and_honours_the_options(redis_url: str,
                                                     client: rmq.Client) -> None:
    client.create_topic("t", slots=2)
    assert ok("send", "t", "hello", url=redis_url).startswith("sent (topic 't', slot ")
    assert ok("send", "t", "--priority", "high", "hello", url=redis_url).startswith("merged")
    assert ok("send", "t", "--json", '{"b": 1, "a": [1, 2]}', url=redis_url).startswith("sent")
    assert ok("send", "t", "--json", '{"a":[1,2],"b":1}', url=redis_url).startswith("merged")
    ok("send", "t", "later", "--delay-ms", "60000", url=redis_url)
    tomorrow = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    ok("send", "t", "fixed", "--deliver-at", tomorrow.isoformat(), url=redis_url)
    ok("send", "t", "keyed", "--key", "k1", "--slot-basis", "k1", url=redis_url)
    group = client.stats("t").groups["default"]
    assert (group.ready, group.delayed) == (3, 2)
    assert group.ready_by_priority == {192: 1, 128: 2}
    (fixed,) = [r for r in client.snapshot("t") if r.body == b"fixed"]
    assert fixed.due_at == int(tomorrow.timestamp() * 1000)
    (keyed,) = [r for r in client.snapshot("t") if r.body == b"keyed"]
    assert keyed.key == b"k1"


def test_send_with_a_version_drops_an_older_value_and_stats_count_it(redis_url: str,
                                                                      client: rmq.Client
                                                                      ) -> None:
    client.create_topic("prices", merge="key")
    assert ok("send", "prices", "v5", "--key", "p", "--version", "5",
              url=redis_url).startswith("sent")
    assert ok("send", "prices", "v3", "--key", "p", "--version", "3",
              url=redis_url).startswith("dropped as outdated: its key has a higher version")
    out = ok("send", "prices", "--file", "-", "--key", "p", "--version", "4", url=redis_url,
             stdin="a\nb\n")
    assert out.startswith("sent 2 messages to 'prices', 0 merged (0.0%), 2 dropped as outdated")
    assert [r.body for r in client.snapshot("prices")] == [b"v5"]
    header, row = ok("stats", "prices", url=redis_url).splitlines()[1:3]
    assert header.split()[-1] == "outdated" and row.split()[-1] == "3"
    client.create_topic("bodies")
    done = run("send", "bodies", "x", "--version", "1", url=redis_url)
    assert_one_line_error(done, 1, "only a topic merging by key")


def test_send_file_from_stdin_sends_each_line_and_counts_merges(redis_url: str,
                                                                 client: rmq.Client) -> None:
    client.create_topic("t")
    lines = "".join(f"item-{i % 100}\n" for i in range(2500)) + "\n"
    out = ok("send", "t", "--file", "-", "--priority", "low", url=redis_url, stdin=lines)
    assert out.startswith("sent 2500 messages to 't', 2400 merged (96.0%)")
    group = client.stats("t").groups["default"]
    assert group.ready_by_priority == {64: 100}


def test_stats_table_json_and_watch(redis_url: str, client: rmq.Client) -> None:
    client.create_topic("t", slots=2)
    client.send_many("t", ["a", "b", "a"])
    table = ok("stats", "t", "--slots", url=redis_url)
    header, row = table.splitlines()[1:3]
    assert header.split()[:5] == ["group", "ready", "delayed", "in", "flight"]
    assert row.split()[:3] == ["default", "2", "0"]
    assert "slots of default:" in table
    data = json.loads(ok("stats", "t", "--json", url=redis_url))
    assert data["groups"]["default"]["counters"]["merged"] == 1
    frames = ok("stats", "t", "--json", "--watch", "0.01", "--count", "3", url=redis_url)
    assert [json.loads(f)["groups"]["default"]["ready"] for f in frames.splitlines()] == [2] * 3
    assert "acked/s" in ok("stats", "t", "--watch", "0.01", "--count", "2", url=redis_url)


def test_dead_letters_are_listed_requeued_and_purged(redis_url: str,
                                                     client: rmq.Client) -> None:
    client.create_topic("t", max_retries=0)
    client.send_many("t", ["p1", "p2"])
    for message in client.claim("t"):
        client.nack(message, "boom")
    letters = [json.loads(line) for line in
               ok("dead", "list", "t", "--json", url=redis_url).splitlines()]
    assert sorted(d["body"] for d in letters) == ["p1", "p2"]
    assert {d["error"] for d in letters} == {"boom"}
    assert "boom" in ok("dead", "list", "t", url=redis_url)
    first = letters[0]["id"]
    assert ok("dead", "requeue", "t", "--ids", first, url=redis_url).startswith("requeued 1")
    assert ok("dead", "purge", "t", "--yes", url=redis_url).startswith("purged 1")
    assert ok("dead", "list", "t", url=redis_url) == (
        "no dead letters in topic 't', group 'default'\n")
    assert [m.body.decode() for m in client.claim("t")] == [letters[0]["body"]]


def test_dead_list_with_no_dead_letters_says_so_naming_topic_and_group(
        redis_url: str, client: rmq.Client) -> None:
    client.create_topic("t")
    client.bind("t", "audit")
    assert ok("dead", "list", "t", "--group", "audit", url=redis_url) == (
        "no dead letters in topic 't', group 'audit'\n")
    assert "none of the ids given" in ok("dead", "list", "t", "--ids", "0-1", url=redis_url)
    assert ok("dead", "list", "t", "--json", url=redis_url) == ""  # JSON lines: none


def _two_dead_letters(client: rmq.Client) -> None:
    client.create_topic("t", max_retries=0)
    client.send_many("t", ["p1", "p2"])
    for message in client.claim("t"):
        client.nack(message, "boom")


def test_dead_purge_without_a_terminal_needs_yes_and_deletes_nothing_otherwise(
        redis_url: str, client: rmq.Client) -> None:
    _two_dead_letters(client)
    assert_one_line_error(run("dead", "purge", "t", url=redis_url, stdin=""), 1,
                          "add --yes to confirm")
    assert_one_line_error(run("dead", "purge", "t", "--json", url=redis_url, stdin="y\n"), 1,
                          "add --yes to confirm")
    assert len(client.dead_letters("t")) == 2
    assert ok("dead", "purge", "t", "--yes", url=redis_url) == (
        "purged 2 dead letters of topic 't', group 'default'\n")
    assert client.dead_letters("t") == []


def _on_a_terminal(*args: str, url: str, typed: bytes) -> tuple[int, str]:
    """Run ``rmq ARGS`` with a pseudo-terminal as stdin, stdout and stderr; type ``typed``
    once it asks; returns its exit status and everything it wrote."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen([*COMMAND, "--url", url, *args], stdin=terminal,
                               stdout=terminal, stderr=terminal)
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
        if output.rstrip().endswith(b"[y/N]"):
            os.write(controller, typed)
    os.close(controller)
    return process.wait(timeout=30), output.decode("utf-8", "replace")


def test_dead_purge_on_a_terminal_asks_first_and_only_yes_deletes(
        redis_url: str, client: rmq.Client) -> None:
    _two_dead_letters(client)
    status, text = _on_a_terminal("dead", "purge", "t", url=redis_url, typed=b"n\n")
    assert status == 1, text
    assert "delete all 2 dead letters of topic 't', group 'default'? [y/N]" in text
    assert "purge cancelled: nothing was deleted" in text
    assert len(client.dead_letters("t")) == 2
    status, text = _on_a_terminal("dead", "purge", "t", url=redis_url, typed=b"y\n")
    assert status == 0 and "purged 2 dead letters" in text, text
    assert client.dead_letters("t") == []
    status, text = _on_a_terminal("dead", "purge", "t", url=redis_url, typed=b"y\n")
    assert status == 0 and "nothing to purge" in text, text


def test_stats_names_priority_levels_and_shows_no_oldest_age_when_nothing_is_ready(
        redis_url: str, client: rmq.Client) -> None:
    client.create_topic("t", slots=1)
    client.send_many("t", [{"body": "a", "priority": 192}, {"body": "b", "priority": 128},
                           {"body": "c", "priority": 64}, {"body": "d", "priority": 200}])
    assert "ready by priority (default): 200: 1  HIGH: 1  MEDIUM: 1  LOW: 1" in ok(
        "stats", "t", url=redis_url)
    client.claim("t", count=4)
    row = ok("stats", "t", url=redis_url).splitlines()[2].split()
    assert row[:7] == ["default", "0", "0", "4", "0", "0", "–"]
    assert "0ms" not in ok("stats", "t", "--slots", url=redis_url)


WORKER_MODULE = '''
import os
from pathlib import Path

OUT = Path(os.environ["RMQ_TEST_DIR"])


def handle(message):
    if message.body == b"block":
        (OUT / "blocked").touch()
        with open(OUT / "fifo") as fifo:  # waits until the test opens the other end
            fifo.read()
    with open(OUT / "handled", "a") as out:
        out.write(message.text + "\\n")
'''


def test_worker_processes_messages_and_on_sigterm_gives_back_unstarted_ones(
        redis_url: str, client: rmq.Client, tmp_path: Path) -> None:
    (tmp_path / "jobs.py").write_text(textwrap.dedent(WORKER_MODULE))
    os.mkfifo(tmp_path / "fifo")
    handled = tmp_path / "handled"
    client.create_topic("t", slots=1)
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - closed in finally
    worker = subprocess.Popen(
        [*COMMAND, "--url", redis_url, "worker", "jobs:handle", "t", "--concurrency", "1",
         "--prefetch", "8"], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "RMQ_TEST_DIR": str(tmp_path)})
    try:
        client.send_many("t", ["a", "b", "c"])
        wait_for(lambda: handled.exists() and len(handled.read_text().split()) == 3,
                 30, "the worker to handle a, b, c")
        # ...and to settle them. A fixed prefetch of 8 claims once half of it is free, and
        # its claim may be sized while a, b or c are still held: at least 5 then, so it
        # takes all four of the next messages whenever it runs.
        wait_for(lambda: client.stats("t").groups["default"].in_flight == 0, 30,
                 "the worker to acknowledge a, b, c")
        # Highest priority: "block" is claimed and started first; the rest wait behind it.
        client.send_many("t", [{"body": "block", "priority": 255}, "u1", "u2", "u3"])
        wait_for(lambda: (tmp_path / "blocked").exists(), 30, "the handler to block")
        wait_for(lambda: client.stats("t").groups["default"].in_flight == 4, 30,
                 "the worker to prefetch u1, u2, u3")
        (consumer,) = [json.loads(line) for line in
                       ok("consumers", "t", "--json", url=redis_url).splitlines()]
        assert consumer["alive"] and consumer["group"] == "default"

        worker.send_signal(signal.SIGTERM)
        wait_for(lambda: client.stats("t").groups["default"].ready == 3, 30,
                 "the unstarted messages to be given back")
        with open(tmp_path / "fifo", "w") as fifo:
            fifo.write("go")
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()
        log.close()
    assert handled.read_text().split() == ["a", "b", "c", "block"]
    assert ("worker stopped: 4 handled, 0 messages failed (0 failed attempts)"
            in (tmp_path / "worker.log").read_text())
    returned = client.claim("t")
    assert sorted(m.body for m in returned) == [b"u1", b"u2", b"u3"]
    assert {m.attempts for m in returned} == {1}
    assert ok("consumers", "t", url=redis_url).startswith("no consumers")


FAILING_MODULE = '''
def handle(message):
    if message.body == b"bad":
        raise ValueError("bad body")
'''


def test_worker_summary_counts_failed_messages_apart_from_failed_attempts(
        redis_url: str, client: rmq.Client, tmp_path: Path) -> None:
    (tmp_path / "failing.py").write_text(FAILING_MODULE)
    client.create_topic("t", max_retries=3, retry_backoff=0)
    client.send_many("t", ["bad", "good"])
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - closed in finally
    worker = subprocess.Popen(
        [*COMMAND, "--url", redis_url, "worker", "failing:handle", "t", "--concurrency", "1"],
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: len(client.dead_letters("t")) == 1, 60,
                 "the bad message to fail four times and be dead-lettered")
        wait_for(lambda: client.stats("t").groups["default"].counters["acked"] == 1, 60,
                 "the good message to be acknowledged")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()
        log.close()
    assert ("worker stopped: 1 handled, 1 message failed (4 failed attempts)"
            in (tmp_path / "worker.log").read_text())


def test_worker_with_a_target_that_cannot_be_imported_exits_1_with_one_line(
        redis_url: str, client: rmq.Client, tmp_path: Path) -> None:
    client.create_topic("t")
    (tmp_path / "broken.py").write_text("raise RuntimeError('bad module')\n")
    assert_one_line_error(run("worker", "missing_module:f", "t", url=redis_url, cwd=tmp_path),
                          1, "No module named 'missing_module'")
    assert_one_line_error(run("worker", "broken:f", "t", url=redis_url, cwd=tmp_path), 1,
                          "RuntimeError: bad module")
    assert_one_line_error(run("worker", "no_colon", "t", url=redis_url), 1,
                          "expected module:function")
    assert_one_line_error(run("worker", "json:dumps", "nope", url=redis_url), 1,
                          "unknown topic 'nope'")


def test_server_runs_in_the_foreground_until_sigterm(tmp_path_factory) -> None:
    data = tmp_path_factory.mktemp("srv")
    port = free_port()
    server = subprocess.Popen([*COMMAND, "server", "--data-dir", str(data), "--port", str(port),
                               "--fsync", "always"], stderr=subprocess.PIPE, text=True)
    try:
        probe = redis.Redis(port=port, socket_connect_timeout=1)

        def answers() -> bool:
            try:
                return bool(probe.ping())
            except redis.ConnectionError:
                return False

        wait_for(answers, 30, "the server to answer")
        assert probe.config_get("appendfsync") == {"appendfsync": "always"}
        probe.close()
        ok("topic", "create", "t", url=f"unix://{data}/redis.sock")
        assert ok("topic", "list", "--json", url=f"redis://127.0.0.1:{port}") == '["t"]\n'
        assert_one_line_error(run("server", "--data-dir", str(data)), 1, "already runs")
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    finally:
        server.kill()
    assert "stopped" in server.stderr.read()
    assert any(data.rglob("*.aof"))


FAKE_TOOL = '''
import os, sys

def main(argv):
    print("argv", argv, os.environ.get("RMQ_REDIS_URL"))
    return 3
'''


def test_pass_through_commands_hand_their_arguments_to_the_module(tmp_path: Path) -> None:
    (tmp_path / "fake_tool.py").write_text(FAKE_TOOL)
    script = ("import sys; from rmq import cli; "
              "cli.PASS_THROUGH['demo'] = ('fake_tool', 'a fake'); "
              "cli.PASS_THROUGH['bench'] = ('rmq.no_such_tool', 'missing'); "
              "raise SystemExit(cli.main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", script, "--url", "redis://x:1", "demo",
                           "--rate", "5", "fast"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 3
    assert done.stdout == "argv ['--rate', '5', 'fast'] redis://x:1\n"
    missing = subprocess.run([sys.executable, "-c", script, "bench", "--quick"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert_one_line_error(missing, 1, "not available: rmq.no_such_tool is not part of this "
                                      "installation of RMQ")


@pytest.mark.parametrize("bad_line, words", [
    ('{"n": oops}', "line 2501 is not valid JSON"),
    ('{"n": NaN}', "line 2501 is not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, "line 2501 is JSON nested too deeply"),
    ('{"n": "' + "x" * 200 + '"}', "line 2501: body of"),
])
def test_send_file_with_a_bad_line_names_it_and_sends_nothing(redis_url, client, tmp_path,
                                                              bad_line, words):
    client.create_topic("t", max_message_bytes=100)
    lines = [f'{{"n": {i}}}' for i in range(3000)]
    lines[2500] = bad_line
    path = tmp_path / "input.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert_one_line_error(run("send", "t", "--file", str(path), "--json", url=redis_url), 1,
                          words)
    assert client.stats("t").groups["default"].counters["sent"] == 0


def test_stats_show_filtered_transactions_in_flight_of_the_limit_and_expired_apart(
        redis_url: str, client: rmq.Client) -> None:
    client.create_topic("t", slots=2)
    client.bind("t", "gpu")
    client.bind("t", "audit", where="region = 'eu'")
    client.set_limits("t", "gpu", max_in_flight=4)
    client.send_many("t", [{"body": f"m{i}", "properties": {"region": "eu" if i < 4 else "us"}}
                           for i in range(6)])
    client.claim("t", "gpu", count=3)
    client.claim("t", "audit", count=2, lease=0.05)  # left to expire: a dead consumer's
    client.transaction("t", id="order-17").send("ship 17")  # left open
    wait_for(lambda: client.stats("t").groups["audit"].expired == 2, 10, "two leases to end")
    text = ok("stats", "t", url=redis_url)
    lines = text.splitlines()
    assert lines[1].split() == ["group", "ready", "delayed", "in", "flight", "expired", "dead",
                                "oldest", "ready", "sent", "merged", "merge", "%", "filtered",
                                "acked", "retried", "dead-lettered", "superseded", "cancelled",
                                "outdated"]
    rows = {line.split()[0]: line.split() for line in lines[2:] if line.split()}
    assert "default" not in rows  # not bound, and nothing in it
    assert rows["gpu"][1:6] == ["3", "0", "3/4", "0", "0"]
    assert rows["audit"][1:6] == ["2", "0", "0", "2", "0"]
    assert rows["audit"][10] == "2"  # filtered: the two messages from "us"
    assert "limits (gpu): max in flight 4" in text
    assert ("transactions: 1 open holding 1 half messages; slot commits 0, rollbacks 0; 0 "
            "abandoned") in text
    data = json.loads(ok("stats", "t", "--json", url=redis_url))
    assert (data["groups"]["gpu"]["limit_in_use"], data["groups"]["audit"]["expired"]) == (3, 2)
    assert data["transactions"]["open"] == 1


def test_consumers_show_concurrency_mark_a_dead_ones_numbers_and_name_idle_groups(
        redis_url: str, client: rmq.Client) -> None:
    client.create_topic("t")
    client.bind("t", "gpu")
    client.bind("t", "audit")
    with rmq.Client(redis_url, clock=lambda: time.time_ns() // 1_000_000 - 60_000) as behind:
        behind.heartbeat(ConsumerState("crashed", "t", "gpu", "h2", 7, behind.now(), 2, 3, 40,
                                       1))
    client.heartbeat(ConsumerState("gpu-1", "t", "gpu", "h1", 5, client.now(), 4, 1, 12, 0))
    lines = ok("consumers", "t", url=redis_url).splitlines()
    assert lines[0].split() == ["id", "group", "host", "pid", "state", "concurrency", "in",
                                "flight", "handled", "failed", "last", "seen"]
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert rows["gpu-1"][1:8] == ["gpu", "h1", "5", "alive", "4", "1", "12"]
    assert rows["crashed"][4:9] == ["dead", "2", "3*", "40*", "1*"]
    assert lines[3] == ("a dead consumer's numbers (*) are those of its last heartbeat; it is "
                        "no longer listed 10 minutes after it")
    assert lines[4] == "no consumer alive in group 'audit' of topic 't'"  # default is not bound
