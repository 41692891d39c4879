"""Hostile input on the command line (SPEC §5): any mix of subcommands, options and odd
values either works or ends with a clear one-line error and exit status 1 or 2; never a
traceback, never an "unexpected error" (a failure no RMQError names)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.cli import main

COMMANDS = [["topic", "create"], ["topic", "show"], ["topic", "list"], ["topic", "alter"],
            ["topic", "pause"], ["topic", "resume"], ["topic", "delete"], ["send"],
            ["stats"], ["dead", "list"], ["dead", "requeue"], ["dead", "purge"], ["consumers"]]
TOKENS = ["t", "jobs", "{jobs}", "a:b", "", " ", "x" * 200, "é", "\x00", "-1", "0", "3", "256",
          "nan", "inf", "1e400", "high", "yesterday", "2030-01-01T00:00:00+00:00", "{bad json",
          '{"a": 1}', "--priority", "--delay-ms", "--deliver-at", "--slots", "--group", "--ids",
          "--json", "--key", "--slot-basis", "--max-retries", "--visibility-timeout",
          "--file", "/nonexistent/file", "--help"]


@pytest.mark.single_node
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(COMMANDS), tokens=st.lists(st.sampled_from(TOKENS), max_size=6))
def test_any_command_line_works_or_fails_in_one_clear_line(redis_url, capsys, command, tokens):
    try:
        status = main(["--url", redis_url, *command, *tokens])
    except SystemExit as exit_:  # argparse: --help (0) or bad arguments (2)
        status = exit_.code
    out, err = capsys.readouterr()
    assert status in (0, 1, 2), (status, err)
    assert "Traceback" not in err and "unexpected error" not in err, err
    if status != 0:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rmq"), err
