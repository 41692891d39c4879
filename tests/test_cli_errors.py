"""Mistakes a user can make on the command line end in one line that names the fix, in the
command line's own words; never "unexpected error", never a traceback. Each test runs the real
``rmq`` process and asserts the exact line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rmq

pytestmark = pytest.mark.single_node

COMMAND = [sys.executable, "-m", "rmq"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    # bytes: some arguments and outputs here are deliberately not UTF-8
    return subprocess.run([*COMMAND, *args], capture_output=True, timeout=120, env=env)


def error_line(*args: str, status: int = 1) -> str:
    """The one line ``rmq args`` printed on stderr, after checking the exit status."""
    done = run(*args)
    assert done.returncode == status, done.stderr
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def topic(redis_url: str) -> str:
    with rmq.Client(redis_url) as client:
        client.create_topic("t", slots=4)
    return "t"


def test_a_url_of_another_scheme_is_named_with_the_schemes_rmq_takes() -> None:
    assert error_line("--url", "http://127.0.0.1:6379", "topic", "list") == (
        "rmq topic list: error: 'http://127.0.0.1:6379' is not a Redis URL: use "
        "redis://HOST:PORT[/DB], rediss://... (TLS) or unix:///PATH/TO/SOCKET")


def test_rmq_redis_url_of_another_scheme_is_named_as_the_variable() -> None:
    done = run("topic", "list", env={**os.environ, "RMQ_REDIS_URL": "http://x"})
    assert (done.returncode, done.stderr.decode()) == (1, (
        "rmq topic list: error: RMQ_REDIS_URL 'http://x' is not a Redis URL: use "
        "redis://HOST:PORT[/DB], rediss://... (TLS) or unix:///PATH/TO/SOCKET\n"))


def test_malformed_urls_are_named_without_their_password() -> None:
    assert error_line("--url", "redis://app:s3cret@127.0.0.1:port/0", "stats", "t") == (
        "rmq stats: error: 'redis://app:***@127.0.0.1:port/0' is not a valid Redis URL: Port "
        "could not be cast to integer value as 'port'")
    assert error_line("--url", "redis://127.0.0.1:6379/first", "stats", "t") == (
        "rmq stats: error: 'redis://127.0.0.1:6379/first' names database 'first': a database "
        "is a number (redis://HOST:PORT/0)")
    assert error_line("--url", "redis://127.0.0.1:6379/0?colour=red", "stats", "t") == (
        "rmq stats: error: 'redis://127.0.0.1:6379/0?colour=red' has an unknown option "
        "'colour' in its query")
    assert error_line("--url", "unix://", "stats", "t") == (
        "rmq stats: error: 'unix://' names no socket: use unix:///PATH/TO/SOCKET")
    assert error_line("--url", "", "stats", "t", status=2) == (
        "rmq: error: --url is empty: give a Redis URL, or leave --url out to use "
        "$RMQ_REDIS_URL or the embedded server (see --help)")


def test_a_database_the_server_does_not_have_is_named(redis_url: str) -> None:
    assert error_line("--url", f"{redis_url}/99", "topic", "list") == (
        f"rmq topic list: error: Redis at '{redis_url}/99' has no database 99 (DB index is "
        "out of range): use one below its `databases` setting (16 by default), such as /0")


def test_a_database_on_a_cluster_node_is_refused_with_the_fix(cluster) -> None:
    assert error_line("--url", f"{cluster.url}/2", "topic", "list") == (
        f"rmq topic list: error: '{cluster.url}/2' is a Redis Cluster node, and a cluster has "
        "only database 0: remove the /DB from the URL")


def test_creating_an_existing_topic_with_other_settings_names_the_alter_command(
        redis_url: str, topic: str) -> None:
    assert error_line("--url", redis_url, "topic", "create", topic, "--slots", "4",
                      "--max-retries", "3", "--serial-keys") == (
        "rmq topic create: error: topic 't' exists with other settings (max_retries 16, not 3; "
        "serial_keys False, not True): `rmq topic alter t --max-retries 3 --serial-keys` "
        "changes them")
    assert error_line("--url", redis_url, "topic", "create", topic, "--slots", "8") == (
        "rmq topic create: error: topic 't' exists with other settings (slots 4, not 8): slots "
        "cannot change after creation (create it with --slots 4, or delete the topic and its "
        "messages first)")
    # the settings not given are not compared: the defaults of the others are no conflict
    done = run("--url", redis_url, "topic", "create", topic, "--max-retries", "16")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().startswith("topic 't': slots=4, max_retries=16")


def test_a_body_that_is_not_utf8_is_sent_as_the_bytes_given(redis_url: str,
                                                            topic: str) -> None:
    done = run("--url", redis_url, "send", topic, "caf\xe9".encode("latin-1").decode(
        "utf-8", "surrogateescape"), "--key", b"k\xff".decode("utf-8", "surrogateescape"))
    assert done.returncode == 0, done.stderr
    with rmq.Client(redis_url) as client:
        (message,) = client.claim(topic)
    assert (message.body, message.key) == (b"caf\xe9", b"k\xff")
    assert error_line("--url", redis_url, "send", topic, "--json",
                      b"\xff".decode("utf-8", "surrogateescape")) == (
        "rmq send: error: BODY is not valid JSON: 'utf-8' codec can't decode byte 0xff in "
        "position 0: invalid start byte")


@pytest.mark.parametrize(("args", "line"), [
    (["stats", "t", "--watch", "nan"], "rmq stats: error: argument --watch: must be a finite "
                                       "number of seconds of at least 0.01, got 'nan' (see "
                                       "--help)"),
    (["stats", "t", "--watch", "-1"], "rmq stats: error: argument --watch: must be a finite "
                                      "number of seconds of at least 0.01, got '-1' (see "
                                      "--help)"),
    (["stats", "t", "--watch", "1", "--count", "0"],
     "rmq stats: error: argument --count: must be at least 1, got 0 (see --help)"),
    (["worker", "json:dumps", "t", "--lease", "nan"],
     "rmq worker: error: argument --lease: must be a finite number of seconds from 0.01 to "
     "604800, got 'nan' (see --help)"),
    (["worker", "json:dumps", "t", "--lease", "0.001"],
     "rmq worker: error: argument --lease: must be a finite number of seconds from 0.01 to "
     "604800, got '0.001' (see --help)"),
    (["worker", "json:dumps", "t", "--grace", "-5"],
     "rmq worker: error: argument --grace: must be a finite number of seconds of at least 0, "
     "got '-5' (see --help)"),
    (["worker", "json:dumps", "t", "--concurrency", "0"],
     "rmq worker: error: argument --concurrency: must be at least 1, got 0 (see --help)"),
])
def test_impossible_numbers_are_refused_while_parsing(args: list[str], line: str) -> None:
    # No --url and no server: refused before anything connects or starts.
    assert error_line(*args, status=2) == line


def test_a_worker_holding_more_than_one_claim_can_take_is_refused() -> None:
    assert error_line("worker", "json:dumps", "t", "--prefetch", "12000") == (
        "rmq worker: error: this worker would hold 12000 messages at once (--prefetch); one "
        "claim takes at most 10000: give a smaller --prefetch, or none (adaptive)")


def test_count_without_watch_is_refused(redis_url: str, topic: str) -> None:
    assert error_line("--url", redis_url, "stats", topic, "--count", "3") == (
        "rmq stats: error: --count counts the refreshes of --watch: give --watch SECONDS too")


def test_a_data_directory_that_cannot_be_created_names_the_variables(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    env = {**os.environ, "RMQ_HOME": str(tmp_path / "file" / "home")}
    env.pop("RMQ_REDIS_URL", None)
    done = run("topic", "list", env=env)
    assert (done.returncode, done.stderr.decode()) == (1, (
        f"rmq topic list: error: cannot use {tmp_path}/file/home for the embedded server: Not "
        "a directory; set RMQ_HOME to a writable directory, or RMQ_REDIS_URL to a Redis "
        "server\n"))


def test_a_home_too_long_for_a_unix_socket_names_the_variables(tmp_path: Path) -> None:
    home = tmp_path / ("h" * 110)
    env = {**os.environ, "RMQ_HOME": str(home)}
    env.pop("RMQ_REDIS_URL", None)
    done = run("topic", "list", env=env)
    assert (done.returncode, done.stderr.decode()) == (1, (
        f"rmq topic list: error: the embedded server's socket {home}/redis.sock would be "
        "longer than the OS allows (107 bytes): set RMQ_HOME to a shorter directory, or "
        "RMQ_REDIS_URL to a Redis server\n"))


def test_a_redis_that_wants_a_password_says_where_to_put_it(fresh_server) -> None:
    server = fresh_server(requirepass="s3cret")
    assert error_line("--url", server.url, "topic", "list") == (
        "rmq topic list: error: Redis refused the connection: it requires a password; give it "
        "in the URL (redis://:PASSWORD@HOST:PORT, or redis://USER:PASSWORD@HOST:PORT for an "
        "ACL user)")
    wrong = server.url.replace("redis://", "redis://:wrong@")
    assert error_line("--url", wrong, "topic", "list") == (
        "rmq topic list: error: Redis refused the connection (not retried): invalid "
        "username-password pair or user is disabled; check the user name and password in the "
        "URL")


def test_tls_to_a_server_without_tls_gives_up_in_seconds_and_names_tls(redis_url: str) -> None:
    started = time.monotonic()
    line = error_line("--url", redis_url.replace("redis://", "rediss://"), "topic", "list")
    assert time.monotonic() - started < 30  # one 10 s wait, not six 30 s ones
    assert line == ("rmq topic list: error: Redis is unreachable after retrying: Timeout "
                    "connecting to server; does that port speak TLS? rediss:// needs a server "
                    "with TLS on it (redis:// is plain)")


def test_deleting_an_unknown_topic_says_there_is_nothing_to_delete(redis_url: str) -> None:
    assert error_line("--url", redis_url, "topic", "delete", "nope", "--yes") == (
        "rmq topic delete: error: unknown topic 'nope': nothing to delete (`rmq topic list` "
        "lists the topics)")


def test_a_server_without_persistence_is_warned_about_once_per_user(fresh_server,
                                                                    tmp_path: Path) -> None:
    servers = [fresh_server(appendonly=False), fresh_server(appendonly=False)]
    env = {**os.environ, "RMQ_HOME": str(tmp_path / "home")}

    def warnings_of(server) -> list[str]:
        done = run("--url", server.url, "topic", "list", env=env)
        assert done.returncode == 0, done.stderr
        return done.stderr.decode().splitlines()

    first = [f"rmq: warning: Redis at 127.0.0.1:{server.port} has no append-only file and no "
             "snapshots: a restart loses every queued message; set appendonly yes (shown once "
             "per user; see docs/cli.md)" for server in servers]
    assert warnings_of(servers[0]) == [first[0]]
    assert warnings_of(servers[0]) == []  # not again for this server
    assert warnings_of(servers[1]) == [first[1]]  # another server: its own warning, once
    assert warnings_of(servers[1]) == []
    (tmp_path / "home" / "warnings-shown").unlink()
    assert warnings_of(servers[0]) == [first[0]]  # forgetting them shows them again


def test_a_misspelt_option_is_named_with_the_option_meant(redis_url: str, topic: str) -> None:
    assert error_line("--url", redis_url, "dead", "list", "t", "--grup", "gpu", status=2) == (
        "rmq: error: unrecognized arguments: --grup gpu; did you mean --group? (see --help)")
    assert error_line("--url", redis_url, "topic", "create", "u", "--slts=4", status=2) == (
        "rmq: error: unrecognized arguments: --slts=4; did you mean --slots? (see --help)")
    assert error_line("--url", redis_url, "stats", "t", "--jsn", status=2).endswith(
        "did you mean --json? (see --help)")
    assert error_line("--url", redis_url, "send", "t", "x", "--zzz", status=2) == (
        "rmq: error: unrecognized arguments: --zzz (see --help)")  # nothing close: no guess


@pytest.mark.parametrize("args", [
    ["dead", "list", "t"], ["dead", "requeue", "t"], ["dead", "purge", "t", "--yes"],
    ["cancel", "t", "0123456789abcdef"], ["topic", "limits", "t"]])
def test_a_group_the_topic_does_not_have_is_refused_naming_its_groups(
        redis_url: str, topic: str, args: list[str]) -> None:
    with rmq.Client(redis_url) as client:
        client.bind("t", "gpu")
        client.bind("t", "audit")
    line = error_line("--url", redis_url, *args, "--group", "gpus")
    assert "topic 't' has no group 'gpus' (its groups: audit, gpu)" in line, line
    assert "did you mean 'gpu'?" in line


def test_dead_list_still_reads_default_and_an_unbound_group_whose_messages_stay(
        redis_url: str, topic: str) -> None:
    with rmq.Client(redis_url) as client:
        client.bind("t", "gpu")
        client.bind("t", "audit")
        client.unbind("t", "audit")
    for group in ("audit", "default", "gpu"):
        done = run("--url", redis_url, "dead", "list", "t", "--group", group)
        assert done.returncode == 0 and done.stdout.decode().startswith("no dead letters"), (
            group, done.stderr)
