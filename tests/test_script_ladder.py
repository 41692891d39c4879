"""The script fallback ladder (``rmq.client.ladder``), without Redis: a batch is fed the
replies a server would give, and each round's commands say what the executor sends next.
The same ladder serves both single-node executors and the cluster's."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import NoPermissionError, NoScriptError, OutOfMemoryError, ResponseError

from rmq.client.ladder import Rounds, Rung, ScriptLadder, run_batch
from rmq.client.replication import BatchNotReplicated, Replication
from rmq.errors import AccessDenied
from rmq.storage.calls import command, script_call
from rmq.storage.scripts import script

HEAD = script("head")
CALL = script_call(HEAD, ["k"], [1])
FCALL = ("FCALL", HEAD.function, 1, "k", 1)
LOAD = ("FUNCTION", "LOAD", HEAD.library.source)
EVALSHA = ("EVALSHA", HEAD.sha, 1, "k", 1)
EVAL = ("EVAL", HEAD.source, 1, "k", 1)
MISSING = ResponseError("Function not found")


def feed(rounds: Rounds, *replies: list[Any]) -> tuple[list[list[Any]], Any]:
    """Every round's commands, and the batch's value, given each round's replies."""
    sent = [next(rounds)]
    for reply in replies:
        try:
            sent.append(rounds.send(reply))
        except StopIteration as done:
            return sent, done.value
    raise AssertionError(f"the batch wants more rounds: {sent[-1]}")


def test_a_batch_goes_out_as_one_round_of_function_calls_and_plain_commands():
    sent, value = feed(run_batch(ScriptLadder(), [CALL, command("GET", "x")]), ["h", b"v"])
    assert sent == [[FCALL, ("GET", "x")]] and value == ["h", b"v"]


def test_a_missing_library_is_loaded_and_the_call_sent_again_in_one_round_trip():
    ladder = ScriptLadder()
    sent, value = feed(run_batch(ladder, [CALL, command("GET", "x")]),
                       [MISSING, b"v"], [b"lib", "h"])
    assert sent[1] == [LOAD, FCALL] and value == ["h", b"v"] and ladder.functions


@pytest.mark.parametrize("refusal", [
    NoPermissionError("User u has no permissions to run the 'fcall' command"),
    ResponseError("unknown command 'FCALL', with args beginning with: "),
])
def test_a_user_or_server_refused_functions_is_served_by_the_scripts_from_then_on(refusal):
    ladder = ScriptLadder()
    sent, value = feed(run_batch(ladder, [CALL]), [refusal], ["h"])
    assert sent[1] == [EVALSHA] and value == ["h"] and not ladder.functions
    sent, _ = feed(run_batch(ladder, [CALL]), ["h"])
    assert sent == [[EVALSHA]]


@pytest.mark.parametrize("load_reply", [
    NoPermissionError("User u has no permissions to run the 'function|load' command"),
    OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
])
def test_a_refused_load_leaves_the_call_to_the_scripts_and_a_missing_one_is_sent_whole(
        load_reply):
    ladder = ScriptLadder()
    sent, value = feed(run_batch(ladder, [CALL]), [MISSING], [load_reply, MISSING],
                       [NoScriptError("No matching script")], ["h"])
    assert sent[1:] == [[LOAD, FCALL], [EVALSHA], [EVAL]]
    assert value == ["h"] and not ladder.functions


def test_an_error_that_no_rung_cures_is_raised_after_the_other_calls_are_answered():
    ladder = ScriptLadder()
    rounds = run_batch(ladder, [CALL, command("GET", "x")])
    assert next(rounds) == [FCALL, ("GET", "x")]
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        rounds.send([ResponseError("WRONGTYPE"), b"v"])
    assert ladder.functions


def test_a_call_only_climbs_so_a_batch_ends_within_four_rounds():
    ladder = ScriptLadder()
    assert [ladder.climb(Rung.FCALL, MISSING), ladder.climb(Rung.LOAD, MISSING),
            ladder.climb(Rung.EVALSHA, NoScriptError("x")),
            ladder.climb(Rung.EVAL, NoScriptError("x"))] == [
        Rung.LOAD, Rung.EVALSHA, Rung.EVAL, None]


def test_an_empty_batch_sends_nothing():
    rounds = run_batch(ScriptLadder(), [])
    with pytest.raises(StopIteration) as done:
        next(rounds)
    assert done.value.value == []


def test_a_user_refused_functions_and_scripts_gets_access_denied_naming_the_library():
    # a tenant whose library an administrator loads (docs/reliability.md, "Security")
    ladder = ScriptLadder()
    rounds = run_batch(ladder, [CALL])
    assert next(rounds) == [FCALL]
    assert rounds.send([NoPermissionError(
        "User t has no permissions to run the 'fcall' command")]) == [EVALSHA]
    with pytest.raises(AccessDenied, match=HEAD.library.name) as refused:
        rounds.send([NoPermissionError("User t has no permissions to run the 'evalsha' command")])
    assert "FUNCTION LOAD" in str(refused.value)
    assert ladder.functions  # the next call tries the library again: it may be loaded by then
    sent, value = feed(run_batch(ladder, [CALL]), ["h"])
    assert sent == [[FCALL]] and value == ["h"]


WRITE = script_call(script("ack"), ["k"], [1])


def test_a_round_that_writes_ends_with_wait_and_its_reply_is_not_a_calls():
    sent, value = feed(run_batch(ScriptLadder(), [WRITE, command("GET", "x")],
                                 Replication.of(1, 0.5)), ["a", b"v", 1])
    assert sent == [[("FCALL", script("ack").function, 1, "k", 1), ("GET", "x"), ("WAIT", 1, 500)]]
    assert value == ["a", b"v"]


def test_a_round_that_only_reads_sends_no_wait():
    sent, value = feed(run_batch(ScriptLadder(), [CALL, command("GET", "x")],
                                 Replication.of(1)), ["h", b"v"])
    assert sent == [[FCALL, ("GET", "x")]] and value == ["h", b"v"]


def test_each_round_that_writes_waits_and_a_short_one_raises_with_every_reply():
    rounds = run_batch(ScriptLadder(), [WRITE], Replication.of(2, 0.5))
    assert next(rounds)[-1] == ("WAIT", 2, 500)
    second = rounds.send([MISSING, 2])  # the load and the call again: a round of its own
    assert second[0][:2] == ("FUNCTION", "LOAD") and second[-1] == ("WAIT", 2, 500)
    with pytest.raises(BatchNotReplicated, match="only 1 of 2 replicas") as short:
        rounds.send([b"lib", "a", 1])
    assert short.value.replies == ["a"] and short.value.acknowledged == 1
