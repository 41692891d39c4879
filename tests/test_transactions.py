"""Transactional messages (SPEC §12): half messages invisible until commit, dropped by a
rollback, committed through the same logic as a send, idempotent closes, remembered ids,
and the check-back's steps. Every test runs on one node and on the cluster, with both
clients."""

from __future__ import annotations

import logging
import zlib

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows, states

import rmq
from rmq.errors import InvalidArgument, InvalidSetting, TransactionClosed
from rmq.storage import transactions as tx_ops


def test_half_messages_are_invisible_until_the_commit(client):
    client.create_topic("t")
    tx = client.transaction("t")
    assert tx.send(b"order-1") == 1
    assert tx.send_many([b"order-2", {"body": b"order-3", "priority": 200}]) == 2
    assert client.claim("t") == []
    assert states(client, "t")["ready"] == []
    assert client.stats("t").groups["default"].counters["sent"] == 0
    assert client.stats("t").transactions.halves == 3
    assert client.stats("t").transactions.open == 1
    assert tx.commit() == rmq.SendCounts(3, 0)
    first, *rest = [m.body for m in client.claim("t")]
    assert (first, sorted(rest)) == (b"order-3", [b"order-1", b"order-2"])
    figures = client.stats("t").transactions
    assert (figures.open, figures.halves) == (0, 0)
    assert figures.committed >= 1


def test_a_rollback_drops_every_half_message(client):
    client.create_topic("t")
    tx = client.transaction("t")
    tx.send_many([f"m{i}" for i in range(20)])
    tx.rollback()
    assert client.claim("t") == []
    assert client.stats("t").transactions.halves == 0
    assert client.open_transactions("t") == []
    assert tx.state == "rolled_back"


def test_the_commit_merges_with_pending_messages_as_a_send_does(client):
    client.create_topic("t")
    client.send("t", b"product-42", priority=10)
    tx = client.transaction("t")
    tx.send(b"product-42", priority=250)
    tx.send(b"product-7")
    assert tx.commit() == rmq.SendCounts(2, 1)
    (first, second) = client.claim("t")
    assert (first.body, first.priority) == (b"product-42", 250)
    assert second.body == b"product-7"
    assert client.stats("t").groups["default"].counters["merged"] == 1


def test_a_delay_counts_from_the_commit(client, clock):
    client.create_topic("t")
    tx = client.transaction("t")
    tx.send(b"later", delay_ms=5_000)
    clock.advance(60_000)
    committed_at = clock.now
    tx.commit()
    (row,) = [r for r in rows(client, "t") if r.state != "half"]
    assert (row.state, row.due_at) == ("delayed", committed_at + 5_000)


def test_a_fixed_time_stays_fixed(client, clock):
    client.create_topic("t")
    tx = client.transaction("t")
    tx.send(b"at", deliver_at=clock.now + 90_000)
    clock.advance(30_000)
    tx.commit()
    (row,) = rows(client, "t")
    assert (row.state, row.due_at) == ("delayed", clock.now + 60_000)


def test_a_fixed_time_past_at_the_commit_merges_as_a_send_made_then(client, clock):
    client.create_topic("t")
    start = clock.now
    client.send("t", b"x", deliver_at=start + 100)
    tx = client.transaction("t")
    tx.send(b"x", deliver_at=start + 2, priority=200)
    clock.advance(101)  # both are due: the pending one first, and it keeps its place
    assert tx.commit() == rmq.SendCounts(1, 1)
    (row,) = rows(client, "t")
    assert (row.state, row.priority, row.due_at) == ("ready", 200, start + 100)


def test_the_filters_of_bound_groups_apply_at_the_commit(client):
    client.create_topic("t")
    client.bind("t", "eu", where="region = 'eu'")
    client.bind("t", "all")
    tx = client.transaction("t")
    tx.send_many([{"body": b"a", "properties": {"region": "eu"}},
                  {"body": b"b", "properties": {"region": "us"}}])
    tx.commit()
    stats = client.stats("t")
    assert stats.groups["eu"].counters["filtered"] == 1
    assert [m.body for m in client.claim("t", "eu")] == [b"a"]
    assert sorted(m.body for m in client.claim("t", "all")) == [b"a", b"b"]


def test_a_transaction_over_many_slots_commits_in_each(client):
    client.create_topic("t", slots=16)
    tx = client.transaction("t")
    bodies = [f"item-{i}".encode() for i in range(100)]
    tx.send_many(bodies)
    assert len(client.open_transactions("t")[0].slots) > 4
    assert tx.commit() == rmq.SendCounts(100, 0)
    assert sorted(m.body for m in client.claim("t", count=200)) == sorted(bodies)


def test_the_context_manager_commits_on_exit_and_rolls_back_on_an_exception(client):
    client.create_topic("t")
    with client.transaction("t") as tx:
        tx.send(b"kept")
    assert tx.state == "committed"
    failed = client.transaction("t")
    with pytest.raises(RuntimeError, match="local failure"), failed:
        failed.send(b"dropped")
        raise RuntimeError("local failure")
    assert failed.state == "rolled_back"
    assert [m.body for m in client.claim("t")] == [b"kept"]


def test_commit_and_rollback_are_idempotent_and_exclusive(client):
    client.create_topic("t")
    tx = client.transaction("t", id="order-1")
    tx.send(b"x")
    tx.commit()
    assert tx.commit() == rmq.SendCounts(0, 0)
    with pytest.raises(TransactionClosed, match="committed: cannot roll back"):
        tx.rollback()
    with pytest.raises(TransactionClosed, match="cannot send"):
        tx.send(b"y")
    other = client.transaction("t", id="order-2")
    other.send(b"z")
    other.rollback()
    other.rollback()
    with pytest.raises(TransactionClosed) as closed:
        other.commit()
    assert (closed.value.transaction_id, closed.value.state) == ("order-2", "rolled_back")
    assert [m.body for m in client.claim("t")] == [b"x"]


def test_a_closed_id_is_remembered_so_a_replay_stores_nothing(client):
    client.create_topic("t")
    with client.transaction("t", id="batch-7") as tx:
        tx.send_many([b"a", b"b"])
    replay = client.transaction("t", id="batch-7")
    with pytest.raises(TransactionClosed):
        replay.send_many([b"a", b"b"])
    assert client.stats("t").transactions.halves == 0
    # a fresh handle of the closed id commits nothing more, and says it was committed
    assert client.transaction("t", id="batch-7").commit() == rmq.SendCounts(0, 0)
    with pytest.raises(TransactionClosed):
        client.transaction("t", id="batch-7").rollback()
    assert sorted(m.body for m in client.claim("t")) == [b"a", b"b"]


def _bodies_outside(slot: int, slots: int, count: int) -> list[bytes]:
    """``count`` bodies none of which goes to ``slot`` (SPEC §1: crc32 of the body)."""
    found = (f"elsewhere-{i}".encode() for i in range(10_000))
    return [b for b in found if zlib.crc32(b) & (slots - 1) != slot][:count]


@pytest.mark.parametrize("close", ["commit", "rollback"])
def test_a_replay_of_a_closed_id_stores_nothing_whatever_slots_it_sends_to(client, close):
    client.create_topic("t", slots=8)
    first = client.transaction("t", id="batch-8")
    first.send(b"a")
    first.commit() if close == "commit" else first.rollback()
    closed_as = "committed" if close == "commit" else "rolled_back"
    elsewhere = _bodies_outside(zlib.crc32(b"a") & 7, 8, 40)  # every other slot
    with pytest.raises(TransactionClosed) as replayed:
        client.transaction("t", id="batch-8").send_many(elsewhere)
    assert replayed.value.state == closed_as
    with pytest.raises(TransactionClosed):
        client.transaction("t", id="batch-8").send(elsewhere[0])
    assert client.open_transactions("t") == []
    assert client.stats("t").transactions.halves == 0

    def checker(tx_id):
        raise AssertionError("asked about a closed transaction")

    assert client.check_transaction("t", "batch-8", checker) == "closed"
    if close == "commit":
        assert client.transaction("t", id="batch-8").commit() == rmq.SendCounts(0, 0)
    else:
        client.transaction("t", id="batch-8").rollback()
    assert [m.body for m in client.claim("t", count=100)] == ([b"a"] if close == "commit"
                                                              else [])


def test_a_close_recorded_before_any_slot_closed_is_final(client, clock):
    """A commit cut off after the topic recorded it and before any slot committed (on a
    cluster the record is written first): the id is closed, a replay stores nothing, the
    other way raises, and the check-back finishes it without asking."""
    client.create_topic("t", slots=8)
    bodies = [f"m{i}".encode() for i in range(20)]
    client.transaction("t", id="cut").send_many(bodies)
    info = client.topic("t")
    assert client._run(tx_ops.record_close("t", "cut", True, clock.now,
                                           info.settings.tx_retention)) == tx_ops.DONE
    with pytest.raises(TransactionClosed):
        client.transaction("t", id="cut").send(b"replayed")
    with pytest.raises(TransactionClosed, match="committed: cannot roll back"):
        client.transaction("t", id="cut").rollback()
    (found,) = client.open_transactions("t")
    assert found.closing == "committed"

    def checker(tx_id):
        raise AssertionError("a commit cut off midway needs no checker")

    assert client.check_transaction("t", "cut", checker) == "committed"
    assert sorted(m.body for m in client.claim("t", count=100)) == sorted(bodies)


def test_a_closed_id_is_forgotten_after_tx_retention(client, clock):
    client.create_topic("t", tx_retention=60)
    with client.transaction("t", id="old") as tx:
        tx.send(b"a")
    clock.advance(59_000)
    with pytest.raises(TransactionClosed):
        client.transaction("t", id="old").send(b"a")
    clock.advance(2_000)
    assert client.transaction("t", id="old").send(b"a") == 1  # a new transaction now


def test_a_part_sent_again_stores_nothing_twice(client):
    client.create_topic("t")
    first = client.transaction("t", id="q-1", part="p0")
    assert first.send_many([b"a", b"b", b"c"]) == 3
    again = client.transaction("t", id="q-1", part="p0")
    assert again.send_many([b"a", b"b"]) == 0
    assert again.send_many([b"c", b"d"]) == 1  # d goes beyond what p0 stored before
    other = client.transaction("t", id="q-1", part="p1")
    assert other.send(b"a") == 1
    assert client.transaction("t", id="q-1").commit() == rmq.SendCounts(5, 1)
    assert sorted(m.body for m in client.claim("t")) == [b"a", b"b", b"c", b"d"]


def test_a_commit_by_another_handle_covers_every_slot(client):
    client.create_topic("t", slots=8)
    client.transaction("t", id="shared").send_many([f"m{i}" for i in range(40)])
    assert client.transaction("t", id="shared").commit() == rmq.SendCounts(40, 0)
    assert len(client.claim("t", count=100)) == 40


def test_half_messages_show_in_the_snapshot(client):
    client.create_topic("t")
    tx = client.transaction("t", id="snap")
    tx.send(b"h", tag="new", properties={"n": 1})
    (row,) = rows(client, "t")
    assert (row.state, row.group, row.id, row.body, row.tag) == ("half", "", "snap", b"h",
                                                                  "new")
    assert rows(client, "t", groups=["default"]) == []


def test_invalid_ids_and_settings_are_refused(client):
    client.create_topic("t")
    with pytest.raises(InvalidArgument, match="transaction id"):
        client.transaction("t", id="no spaces")
    with pytest.raises(InvalidArgument, match="part"):
        client.transaction("t", part="a:b")
    with pytest.raises(InvalidSetting, match="max_checks"):
        client.create_topic("u", max_checks=0)
    settings = client.create_topic("v", check_after=0.5, check_interval=2, tx_retention=60)
    assert (settings.check_after, settings.max_checks) == (0.5, 15)


def test_a_bad_item_stores_no_half_message(client):
    client.create_topic("t")
    tx = client.transaction("t")
    with pytest.raises(rmq.errors.InvalidPriority, match="batch item 1"):
        tx.send_many([b"ok", {"body": b"bad", "priority": 999}])
    assert client.open_transactions("t") == []
    assert tx.state == "open"


def test_delete_topic_removes_the_transactions(client):
    client.create_topic("t")
    client.transaction("t", id="open-one").send(b"x")
    with client.transaction("t", id="closed-one") as tx:
        tx.send(b"y")
    client.delete_topic("t")
    client.create_topic("t")
    assert client.open_transactions("t") == []
    assert client.transaction("t", id="closed-one").send(b"y") == 1  # forgotten with it


# -- the check-back ------------------------------------------------------------------------


def test_the_checker_is_due_check_after_the_last_half_send(client, clock):
    client.create_topic("t", check_after=6)
    tx = client.transaction("t", id="late")
    tx.send(b"x")
    (found,) = client.open_transactions("t")
    assert found.check_due_at == clock.now + 6_000
    assert (found.id, found.halves, found.checks) == ("late", 1, 0)


def test_a_checker_answering_true_commits_and_false_rolls_back(client):
    client.create_topic("t")
    client.transaction("t", id="yes").send(b"kept")
    client.transaction("t", id="no").send(b"dropped")
    asked = []

    def checker(tx_id):
        asked.append(tx_id)
        return tx_id == "yes"

    assert client.check_transaction("t", "yes", checker) == "committed"
    assert client.check_transaction("t", "no", checker) == "rolled_back"
    assert asked == ["yes", "no"]
    assert [m.body for m in client.claim("t")] == [b"kept"]
    assert client.open_transactions("t") == []


def test_no_check_runs_for_a_closed_transaction(client):
    client.create_topic("t")
    with client.transaction("t", id="done") as tx:
        tx.send(b"x")

    def checker(tx_id):
        raise AssertionError("asked about a closed transaction")

    assert client.check_transaction("t", "done", checker) == "closed"


def test_unknown_answers_are_asked_again_after_the_interval_then_abandoned(client, clock,
                                                                          caplog):
    client.create_topic("t", check_interval=30, max_checks=2)
    client.transaction("t", id="lost").send(b"x")
    assert client.check_transaction("t", "lost", lambda _: None) == "unknown"
    assert client.check_transaction("t", "lost", lambda _: None) == "busy"
    (found,) = client.open_transactions("t")
    assert (found.checks, found.check_due_at) == (1, clock.now + 30_000)
    clock.advance(30_000)
    assert client.check_transaction("t", "lost", lambda _: None) == "unknown"
    clock.advance(30_000)
    with caplog.at_level(logging.WARNING, logger="rmq.transactions"):
        assert client.check_transaction("t", "lost", lambda _: True) == "abandoned"
    assert "'lost'" in caplog.text and "abandoned" in caplog.text
    assert client.stats("t").transactions.abandoned == 1
    assert client.claim("t") == []
    assert client.open_transactions("t") == []


def test_a_failing_checker_counts_as_unknown(client):
    client.create_topic("t")
    client.transaction("t", id="boom").send(b"x")

    def checker(tx_id):
        raise ConnectionError("the application's database is away")

    assert client.check_transaction("t", "boom", checker) == "unknown"
    assert client.open_transactions("t")[0].checks == 1


def test_one_checker_at_a_time_holds_a_transaction(client, clock):
    client.create_topic("t", check_interval=30)
    client.transaction("t", id="leased").send(b"x")
    # another process took the check's lease on it
    turn = client._run(tx_ops.check_turn("t", "leased", clock.now, "begin", 30, 15))
    assert turn == tx_ops.CheckTurn("check", 1)

    def checker(tx_id):
        raise AssertionError("asked while another checker holds the lease")

    assert client.check_transaction("t", "leased", checker) == "busy"
    clock.advance(30_000)  # that checker's lease ran out: this one may ask
    assert client.check_transaction("t", "leased", lambda _: True) == "committed"


def test_a_commit_cut_off_midway_is_finished_by_a_retry_or_the_check_back(client, clock):
    client.create_topic("t", slots=8)
    bodies = [f"m{i}".encode() for i in range(40)]
    for tx_id in ("retried", "checked"):
        client.transaction("t", id=tx_id).send_many(bodies)
        info = client.topic("t")
        # the commit reached one slot only, then its process died
        client._run(tx_ops.close("t", info.generation, info.groups, tx_id, [0], True,
                                 clock.now, info.settings.tx_retention, False,
                                 topic_record=False, by_key=False,
                                 version_retention=info.version_retention_ms))
    assert {t.id: t.closing for t in client.open_transactions("t")} == {
        "retried": "committed", "checked": "committed"}
    assert client.transaction("t", id="retried").commit().sent > 0

    def checker(tx_id):
        raise AssertionError("a commit cut off midway needs no checker")

    assert client.check_transaction("t", "checked", checker) == "committed"
    assert client.open_transactions("t") == []
    claimed = client.claim("t", count=200)
    assert sorted(m.body for m in claimed) == sorted(bodies)


def test_a_transaction_of_100_messages_is_two_round_trips(redis_url):
    """Beginning is free (the id is made here, the first half send registers it); the half
    send is one script call per slot, and so is the commit: two round trips in all. On a
    cluster, where the topic's record of closed ids is on another node than the slots, one
    more each: the record read before the half send, and written before the commit."""
    with rmq.Client(redis_url) as client:
        client.create_topic("t")
        client.topic("t")  # cached, as in a running application
        rounds: list[list[str]] = []
        execute = client._commit._execute

        def counting(batch):
            rounds.append(sorted({call.script.name if call.script else call.args[0]
                                  for call in batch}))
            return execute(batch)

        client._commit._execute = counting
        tx = client.transaction("t")
        tx.send_many([f"m{i}" for i in range(100)])
        tx.commit()
        if client.is_cluster:
            assert rounds == [["ZSCORE"], ["tx_send"], ["tx_decide"], ["tx_commit"]]
        else:
            assert rounds == [["tx_send"], ["tx_commit"]]


def test_a_rollback_cut_off_midway_is_finished_by_the_check_back(client, clock):
    client.create_topic("t", slots=8)
    client.transaction("t", id="undone").send_many([f"m{i}" for i in range(40)])
    info = client.topic("t")
    client._run(tx_ops.close("t", info.generation, info.groups, "undone", [0, 1], False,
                             clock.now, info.settings.tx_retention, False,
                             topic_record=False, by_key=False,
                             version_retention=info.version_retention_ms))
    (found,) = client.open_transactions("t")
    assert found.closing == "rolled_back"

    def checker(tx_id):
        raise AssertionError("a rollback cut off midway needs no checker")

    assert client.check_transaction("t", "undone", checker) == "rolled_back"
    assert client.open_transactions("t") == []
    assert client.claim("t", count=100) == []


def test_half_messages_keep_their_key_and_slot_basis(client):
    client.create_topic("t", slots=8, serial_keys=True)
    with client.transaction("t") as tx:
        tx.send(b"first", key="order-9")
        tx.send_many([{"body": b"second", "key": "order-9"},
                      {"body": b"elsewhere", "slot_basis": "order-9"}])
    first, *_ = client.claim("t", count=10)
    assert (first.body, first.key) == (b"first", b"order-9")
    slots = {row.body: row.slot for row in rows(client, "t")}
    assert len(set(slots.values())) == 1  # one key, one slot


def test_a_traced_topic_traces_a_commit_as_sends_made_then(client):
    client.create_topic("t", trace=True)
    client.send("t", b"pending")
    tx = client.transaction("t")
    tx.send_many([b"pending", b"new"])
    assert client.trace("t", body=b"new") == []  # a half message is in no group yet
    tx.commit()
    assert [e.event for e in client.trace("t", body=b"new")] == ["sent"]
    assert [e.event for e in client.trace("t", body=b"pending")] == ["sent", "merged"]
