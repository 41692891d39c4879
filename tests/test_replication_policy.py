"""Which batches wait for replicas and what their replies mean (``client/replication.py``),
without Redis: the policy is I/O-free, as the cluster batch that uses it."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from rmq.client.cluster import ClusterBatch
from rmq.client.replication import (
    PRIMARY_ONLY,
    BatchNotReplicated,
    Replication,
    describe,
    must_replicate,
    stores,
)
from rmq.errors import InvalidArgument, NotReplicated
from rmq.storage.calls import command, script_call
from rmq.storage.scripts import _shipped, script

SEND = script_call(script("enqueue"), ["rmq:{renders:0}:clock"], [1])
ACK = script_call(script("ack"), ["rmq:{renders:1}:seq"], [1])
CLAIM = script_call(script("claim"), ["rmq:{renders:1}:generation"], [1])
STATS = script_call(script("stats"), ["rmq:{renders:0}:g:ready"], [1])
READ = command("GET", "rmq:{renders}:settings")


def test_scripts_store_unless_they_declare_housekeeping_extend_leases_or_only_read():
    unwaited = {name for name, s in _shipped().items() if not stores(script_call(s, [], []))}
    # expired.lua and batches_used.lua declare no-writes: they count for stats
    assert unwaited == {"stats", "head", "history", "extend", "limit_extend", "expired",
                        "batches_used"}


def test_only_a_claims_scripts_are_waited_for_without_failing_short():
    lenient = {name for name, s in _shipped().items()
               if stores(script_call(s, [], [])) and not must_replicate(script_call(s, [], []))}
    assert lenient == {"claim", "claim_heads", "sync_heads", "limit_reserve", "limit_settle"}


def test_a_claim_waits_but_a_shortfall_hands_over_what_it_took():
    policy = Replication.of(1, 0.2)
    assert [c.args for c in policy.waits([CLAIM])] == [("WAIT", 1, 200)]
    assert policy.shortfall([CLAIM], [0]) is None
    assert policy.shortfall([CLAIM], []) is None  # connection lost after the claim's reply


def test_a_batch_with_a_claim_and_an_ack_short_of_replicas_names_the_ack():
    error = Replication.of(1, 0.2).shortfall([ACK, CLAIM], [0], ["acked", "claimed"])
    assert isinstance(error, BatchNotReplicated)
    assert str(error).startswith("the ack to 'renders' is stored on the primary")


def test_heartbeats_wait_for_no_replica_and_permits_are_waited_for():
    consumers = "rmq:{renders}:consumers"
    permits = "rmq:{renders}:limit:default:permits"
    assert not stores(command("HSET", consumers, "worker-1", "{}"))
    assert not stores(command("HDEL", consumers, "worker-1"))
    # a permit moves with its lease inside the extension scripts, never as a plain command
    assert stores(command("ZADD", permits, "XX", 1000, "0-1"))
    assert stores(command("ZADD", permits, 1000, "0-1"))
    assert stores(command("HSET", "rmq:{renders}:limits", "default", "{}"))
    assert Replication.of(1).waits([command("HSET", consumers, "worker-1", "{}")]) == []


def test_plain_commands_store_unless_they_are_known_reads():
    assert not stores(READ) and not stores(command("PUBLISH", "rmq:wake:renders", "wake"))
    assert stores(command("SET", "rmq:{renders}:paused", "1"))
    assert stores(command("SOMETHING_NEW", "rmq:{renders}:x"))  # unknown: waited for


def test_the_default_appends_nothing_to_any_batch():
    assert not PRIMARY_ONLY.active and PRIMARY_ONLY.waits([SEND, ACK]) == []


def test_a_batch_that_stores_gets_one_wait_and_a_read_none():
    policy = Replication.of(2, 0.25)
    assert [c.args for c in policy.waits([READ, SEND])] == [("WAIT", 2, 250)]
    assert policy.waits([READ, STATS]) == []
    fsync = Replication.of(1, 1.0, True)
    assert [c.args for c in fsync.waits([ACK])] == [("WAITAOF", 1, 1, 1000)]


def test_replies_short_of_the_replicas_asked_for_name_the_write_and_carry_the_counts():
    policy = Replication.of(2, 0.5)
    assert policy.shortfall([SEND], [2]) is None and policy.shortfall([SEND], [3]) is None
    error = policy.shortfall([SEND, ACK], [1], ["stored", "acked"])
    assert isinstance(error, BatchNotReplicated) and isinstance(error, NotReplicated)
    assert (error.acknowledged, error.wanted, error.replies) == (1, 2, ["stored", "acked"])
    assert str(error) == ("the send and ack to 'renders' is stored on the primary but only 1 "
                          "of 2 replicas acknowledged within 0.5 s: it may be lost if the "
                          "primary fails now")


def test_waitaof_short_on_the_primarys_own_disk_is_not_replicated_either():
    policy = Replication.of(1, 1.0, True)
    assert policy.shortfall([SEND], [[1, 1]]) is None
    error = policy.shortfall([SEND], [[0, 1]])
    assert isinstance(error, NotReplicated) and error.local_fsync is False
    assert "not yet on its disk" in str(error)


def test_a_wait_whose_reply_was_lost_is_not_replicated():
    error = Replication.of(1).shortfall([SEND], [])
    assert isinstance(error, NotReplicated) and "connection was lost" in str(error)


def test_describe_names_registry_writes_and_their_topic():
    assert describe([command("SET", "rmq:{renders}:paused", "1")]) == \
        "the registry write to 'renders'"


@pytest.mark.parametrize("options", [{"replicas": -1}, {"replicas": "1"},
                                     {"replica_timeout": 0}, {"replica_timeout": 0.0001},
                                     {"replica_timeout": float("nan")},
                                     {"replica_timeout": 31}, {"replica_fsync": 1}])
def test_arguments_out_of_range_are_invalid(options):
    with pytest.raises(InvalidArgument):
        Replication.of(**options)


def test_replica_timeout_stays_below_the_socket_timeout():
    with pytest.raises(InvalidArgument, match="socket timeout"):
        Replication.of(1, 5.0, socket_timeout=5)
    assert Replication.of(1, 4.0, socket_timeout=5).timeout == 4.0


class _Node:
    def __init__(self, name: str):
        self.name = name


def _plan(batch: ClusterBatch, nodes: dict[int, _Node]):
    return batch.plan(lambda slot: nodes[slot % 2], lambda name: None, lambda: nodes[0])


def test_on_a_cluster_each_masters_pipeline_that_stores_ends_in_its_own_wait():
    nodes = {0: _Node("a"), 1: _Node("b")}
    batch = ClusterBatch([SEND, READ, ACK], replication=Replication.of(1))
    rounds = _plan(batch, nodes)
    waits = [commands[-1] for _, _, commands in rounds if commands[-1][0] == "WAIT"]
    stored = [i for _, indexes, _ in rounds for i in indexes if i is not None and i >= 0
              and stores(batch.calls[i])]
    assert len(waits) == len({id(node) for node, indexes, _ in rounds
                              if any(i in stored for i in indexes)})
    for _, indexes, commands in rounds:
        batch.settle(indexes, ["reply"] * (len(commands) - 1) + [1])
    assert not batch.next_round() and batch.values() == ["reply"] * 3


def test_on_a_cluster_a_master_short_of_replicas_fails_the_batch_after_every_reply():
    nodes = {0: _Node("a"), 1: _Node("b")}
    batch = ClusterBatch([SEND, ACK], replication=Replication.of(1, 0.1))
    for _, indexes, commands in _plan(batch, nodes):
        batch.settle(indexes, ["reply"] * (len(commands) - 1) + [0])
    assert not batch.next_round()
    with pytest.raises(BatchNotReplicated) as raised:
        batch.values()
    assert raised.value.replies == ["reply", "reply"]


def test_on_a_cluster_writes_answered_before_a_lost_connection_are_not_replicated():
    batch = ClusterBatch([SEND], replication=Replication.of(1))
    ((_, indexes, _),) = _plan(batch, {0: _Node("a"), 1: _Node("a")})
    batch.settle(indexes, ["stored"], RedisConnectionError("lost"))
    assert not batch.next_round()  # the send was answered: it is not sent again
    with pytest.raises(NotReplicated, match="connection was lost"):
        batch.values()


def test_on_a_cluster_a_master_short_of_replicas_for_a_claim_alone_fails_nothing():
    nodes = {0: _Node("a"), 1: _Node("b")}
    batch = ClusterBatch([SEND, CLAIM], replication=Replication.of(1, 0.1))
    rounds = _plan(batch, nodes)
    assert len(rounds) == 2  # the send's master and the claim's
    for _, indexes, commands in rounds:
        claim_only = all(batch.calls[i] is CLAIM for i in indexes if i is not None and i >= 0)
        batch.settle(indexes, ["reply"] * (len(commands) - 1) + [0 if claim_only else 1])
    assert not batch.next_round() and batch.values() == ["reply", "reply"]
