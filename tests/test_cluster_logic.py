"""The logic of cluster claims and cluster batches, without Redis: what a claim chooses from
the slots' heads (``storage/cluster_claim.py``), and how a batch of calls is split per node
and what each answer of a cluster node does to it (``client/cluster.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

import rmq
from rmq.client.cluster import ClusterBatch
from rmq.client.ladder import Rung, ScriptLadder
from rmq.errors import AccessDenied
from rmq.storage.calls import command, script_call
from rmq.storage.cluster_claim import Band, Choice, Share, SlotHead, choose, claim_across_slots
from rmq.storage.scripts import script

# -- choosing from the heads -----------------------------------------------------------


def head(*bands: tuple[int, int, int], more: bool = False) -> SlotHead:
    return SlotHead(tuple(Band(*band) for band in bands), more, None)


def test_the_highest_priority_of_any_slot_is_chosen_first():
    heads = {0: head((100, 5, 10)), 1: head((200, 2, 50)), 2: head()}
    assert choose(heads, 4) == Choice({1: Share(2, 200), 0: Share(2, 100)}, False)


def test_within_a_priority_the_slot_with_the_oldest_message_goes_first_and_whole():
    heads = {0: head((100, 5, 30)), 1: head((100, 5, 20)), 2: head((100, 5, 25))}
    assert choose(heads, 8) == Choice({1: Share(5, 100), 2: Share(3, 100)}, False)


def test_a_slot_s_share_spans_its_bands_from_the_best_down():
    heads = {0: head((250, 1, 5), (100, 4, 9)), 1: head((200, 3, 1))}
    assert choose(heads, 6) == Choice({0: Share(3, 100), 1: Share(3, 200)}, False)


def test_nothing_below_a_priority_a_slot_with_more_has_not_described_is_chosen():
    # slot 0 has more below 180: slot 1's band at 100 might be beaten by it, so it waits
    heads = {0: head((250, 2, 5), (180, 4, 9), more=True), 1: head((100, 9, 1))}
    assert choose(heads, 10) == Choice({0: Share(6, 180)}, True)


def test_a_band_at_the_floor_is_chosen_from_every_slot():
    heads = {0: head((180, 4, 9), more=True), 1: head((180, 3, 1), (90, 1, 2))}
    assert choose(heads, 10) == Choice({1: Share(3, 180), 0: Share(4, 180)}, True)


def test_empty_heads_choose_nothing():
    assert choose({0: head(), 1: head()}, 5) == Choice({}, False)


# -- the rounds of a claim, fed the replies a cluster would give ---------------------------

def head_reply(*bands: tuple[int, int, int], more: bool = False, next_due: int = -1
               ) -> list[int]:
    return [next_due, int(more), *(n for band in bands for n in band)]


def claim_rounds(slots: int, count: int) -> Any:
    """A cluster claim whose calls are ("head", slot, depth) and ("claim", slot, share), and
    whose claim replies are the bodies taken from that slot."""
    return claim_across_slots(
        slots, count, lambda slot, depth: ("head", slot, depth),
        lambda slot, share: ("claim", slot, share),
        lambda slot, bodies: [rmq.Message("t", "g", slot, i, body, 1, 1, 0)
                              for i, body in enumerate(bodies)],
        lambda reply: None)


def test_a_claim_that_finds_nothing_is_one_round_and_says_when_the_next_is_due():
    rounds = claim_rounds(3, 10)
    assert next(rounds) == [("head", 0, 8), ("head", 1, 8), ("head", 2, 8)]
    with pytest.raises(StopIteration) as done:
        rounds.send([head_reply(), head_reply(next_due=900), head_reply(next_due=700)])
    assert done.value.value == ([], 700)


def test_a_claim_stopped_at_the_floor_claims_and_reads_deeper_in_one_round():
    rounds = claim_rounds(2, 5)
    next(rounds)  # heads at depth 5 (a share of 3, plus the margin, at most the count)
    crowded = head_reply((255, 1, 1), (254, 1, 2), (253, 1, 3), more=True)
    assert rounds.send([crowded, head_reply((100, 9, 0))]) == [
        ("claim", 0, Share(3, 253)), ("head", 0, 5), ("head", 1, 5)]
    assert rounds.send([[b"a", b"b", b"c"], head_reply((252, 1, 4)),
                        head_reply((100, 9, 0))]) == [
        ("claim", 0, Share(1, 252)), ("claim", 1, Share(1, 100))]
    with pytest.raises(StopIteration) as done:
        rounds.send([[b"d"], [b"e"]])
    messages, next_due = done.value.value
    assert [m.body for m in messages] == [b"a", b"b", b"c", b"d", b"e"] and next_due is None


def test_a_claim_that_others_beat_to_its_messages_reads_the_heads_again():
    rounds = claim_rounds(2, 2)
    next(rounds)
    assert rounds.send([head_reply((128, 2, 10)), head_reply()]) == [
        ("claim", 0, Share(2, 128))]
    assert rounds.send([[]]) == [("head", 0, 2), ("head", 1, 2)]  # someone took both
    assert rounds.send([head_reply(), head_reply((128, 1, 30))]) == [
        ("claim", 1, Share(1, 128))]
    with pytest.raises(StopIteration) as done:
        rounds.send([[b"late"]])
    assert [m.body for m in done.value.value[0]] == [b"late"]


def test_a_claim_beaten_every_time_gives_up_after_a_few_rounds():
    rounds = claim_rounds(1, 1)
    batch = next(rounds)
    tries = 0
    with pytest.raises(StopIteration) as done:
        while True:
            batch = rounds.send([head_reply((128, 1, 10))] if batch[0][0] == "head" else [[]])
            tries += batch[0][0] == "head"
    assert done.value.value == ([], None) and tries == 3


# -- a batch of calls on a cluster -----------------------------------------------------

NODES = {"a:1": "A", "b:2": "B"}


def key_on(node: str) -> str:
    """A key whose slot ``owner_of_slot`` gives to ``node``."""
    return next(k for k in (f"k{i}" for i in range(100)) if owner_of_slot(key_slot(k.encode()))
                == node)


def owner_of_slot(slot: int) -> str:
    return "A" if slot < 8192 else "B"


def plan(batch: ClusterBatch) -> list[tuple[Any, list[int | None], list[tuple[Any, ...]]]]:
    return batch.plan(owner_of_slot, NODES.get, lambda: "A")


def test_calls_go_to_their_slot_s_node_in_batch_order_one_pipeline_per_node():
    on_a, on_b = key_on("A"), key_on("B")
    batch = ClusterBatch([command("GET", on_a), command("GET", on_b), command("TIME"),
                          script_call(script("head"), [on_b], [1])])
    rounds = plan(batch)
    assert [(node, indexes) for node, indexes, _ in rounds] == [("A", [0, 2]), ("B", [1, 3])]
    assert rounds[1][2][1][:3] == ("FCALL", script("head").function, 1)
    for node, indexes, _ in rounds:
        batch.settle(indexes, [f"{node}{i}" for i in indexes])
    assert not batch.next_round()
    assert batch.values() == ["A0", "B1", "A2", "B3"]


def test_a_moved_call_goes_again_after_the_slot_map_is_refreshed():
    batch = ClusterBatch([command("GET", key_on("A")), command("GET", key_on("B"))])
    (_, a, _), (_, b, _) = plan(batch)
    batch.settle(a, [MovedError("3999 b:2")])
    batch.settle(b, ["fine"])
    assert batch.stale_map and batch.next_round()
    assert [indexes for _, indexes, _ in plan(batch)] == [[0]]


def test_an_asked_call_goes_to_the_named_node_after_asking():
    batch = ClusterBatch([command("GET", key_on("A"))])
    ((_, indexes, _),) = plan(batch)
    batch.settle(indexes, [AskError("3999 b:2")])
    assert batch.next_round() and not batch.stale_map
    assert plan(batch) == [("B", [None, 0], [("ASKING",), ("GET", key_on("A"))])]


def test_a_function_the_node_lacks_is_sent_again_after_loading_the_library():
    call = script_call(script("head"), [key_on("A")], [1])
    batch = ClusterBatch([call])
    ((_, indexes, _),) = plan(batch)
    batch.settle(indexes, [ResponseError("Function not found")])
    assert batch.next_round()
    assert plan(batch) == [("A", [None, 0], [
        ("FUNCTION", "LOAD", script("head").library.source),
        ("FCALL", script("head").function, 1, key_on("A"), 1)])]


@pytest.mark.parametrize("refusal", [
    ResponseError("Function not found"),  # loaded, still missing: the load was refused
    NoPermissionError("User t has no permissions to run the 'fcall' command"),
])
def test_when_functions_are_refused_the_scripts_serve_from_then_on(refusal):
    call = script_call(script("head"), [key_on("A")], [1])
    batch = ClusterBatch([call, command("GET", key_on("A"))])
    batch.rungs[0] = Rung.LOAD  # the library is loaded in this round
    ((_, indexes, _),) = plan(batch)
    batch.settle(indexes, ["OK", refusal, "kept"])
    assert batch.next_round() and not batch.ladder.functions
    ((_, indexes, (sent,)),) = plan(batch)
    assert indexes == [0] and sent[:3] == ("EVALSHA", script("head").sha, 1)
    batch.settle(indexes, [NoScriptError("No matching script")])
    assert batch.next_round()
    ((_, _, (sent,)),) = plan(batch)
    assert sent[:2] == ("EVAL", script("head").source)


def test_when_scripts_are_refused_too_the_call_says_how_to_load_the_library():
    # a tenant: no FUNCTION LOAD, no EVALSHA (docs/reliability.md, "Security")
    call = script_call(script("head"), [key_on("A")], [1])
    ladder = ScriptLadder(functions=False)
    batch = ClusterBatch([call], ladder)
    ((_, indexes, _),) = plan(batch)
    batch.settle(indexes, [NoPermissionError(
        "User t has no permissions to run the 'evalsha' command")])
    assert not batch.next_round()
    assert ladder.functions  # the next batch calls the library again: it may be loaded by then
    with pytest.raises(AccessDenied, match=script("head").library.name) as refused:
        batch.values()
    assert "FUNCTION LOAD" in str(refused.value) and "EVALSHA" in str(refused.value)


def test_a_script_the_node_lacks_is_sent_again_with_its_source():
    call = script_call(script("head"), [key_on("A")], [1])
    batch = ClusterBatch([call], ScriptLadder(functions=False))
    ((_, indexes, (sent,)),) = plan(batch)
    assert sent[:2] == ("EVALSHA", script("head").sha)
    batch.settle(indexes, [NoScriptError("No matching script")])
    assert batch.next_round()
    ((_, _, (sent,)),) = plan(batch)
    assert sent[:2] == ("EVAL", script("head").source)


@pytest.mark.parametrize("fault", [TryAgainError("Multiple keys request"),
                                   ClusterDownError("The cluster is down"),
                                   RedisConnectionError("Connection reset")])
def test_a_slot_not_served_or_a_lost_connection_is_raised_for_the_retry_policy(fault):
    batch = ClusterBatch([command("GET", key_on("A")), command("GET", key_on("B"))])
    (_, a, _), (_, b, _) = plan(batch)
    batch.settle(a, [fault])
    batch.settle(b, ["kept"])
    with pytest.raises(RedisConnectionError):
        batch.next_round()
    assert batch.stale_map and [indexes for _, indexes, _ in plan(batch)] == [[0]]
    ((_, indexes, _),) = plan(batch)
    batch.settle(indexes, ["again"])
    assert not batch.next_round() and batch.values() == ["again", "kept"]


def test_replies_cut_short_by_a_lost_connection_leave_the_rest_unanswered():
    batch = ClusterBatch([command("GET", key_on("A")), command("GET", key_on("A"))])
    ((_, indexes, _),) = plan(batch)
    batch.settle(indexes, ["first"], RedisConnectionError("Connection reset"))
    with pytest.raises(RedisConnectionError):
        batch.next_round()
    assert [indexes for _, indexes, _ in plan(batch)] == [[1]]


def test_an_error_reply_is_raised_once_every_call_is_answered():
    batch = ClusterBatch([command("GET", key_on("A")), command("GET", key_on("B"))])
    (_, a, _), (_, b, _) = plan(batch)
    batch.settle(a, [ResponseError("WRONGTYPE")])
    batch.settle(b, ["fine"])
    assert not batch.next_round()
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        batch.values()
