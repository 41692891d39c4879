"""The consumer's prefetch (``rmq/runtime/prefetch.py``) as pure logic, without Redis: how
many messages it holds and claims, given the handler's and the claims' measured times. The
runtime tests (``test_consumer_runtime.py``) show the same against a real server."""

from __future__ import annotations

import pytest

import rmq
from rmq.runtime.prefetch import MAX_BATCH, PRIORITY_BATCH, Prefetch

LOW, MEDIUM, HIGH = rmq.Priority.LOW, rmq.Priority.MEDIUM, rmq.Priority.HIGH


def batch_of(count: int, priority: int = MEDIUM) -> list[rmq.Message]:
    return [rmq.Message("t", "default", 0, seq, b"m", priority, 1, 0) for seq in range(count)]


def measured(concurrency: int, handler_seconds: float, claim_seconds: float) -> Prefetch:
    prefetch = Prefetch(concurrency)
    prefetch.claimed(claim_seconds, [])
    prefetch.handled(handler_seconds * concurrency, concurrency)
    return prefetch


def test_before_anything_is_measured_a_consumer_holds_its_concurrency():
    prefetch = Prefetch(4)
    assert (prefetch.limit, prefetch.wanted(0)) == (4, 4)
    assert prefetch.wanted(3) == 1  # a free worker is filled at once
    assert prefetch.wanted(4) == 0


def test_a_slow_handler_holds_one_more_than_its_concurrency():
    # 50 ms handlers, 4 at once: 80 a second; a claim's round trip of 1 ms brings 0.08 of
    # their work, so one message waiting to start keeps every worker busy.
    prefetch = measured(4, handler_seconds=0.05, claim_seconds=0.001)
    assert (prefetch.limit, prefetch.batch) == (5, 1)
    assert [prefetch.wanted(held) for held in range(6)] == [4, 3, 2, 1, 1, 0]


def test_a_handler_finishing_several_in_one_round_trip_holds_two_round_trips_of_work():
    # 1 ms handlers, 8 at once: 8000 a second; 2 ms claims: 16 finish while one travels.
    prefetch = measured(8, handler_seconds=0.001, claim_seconds=0.002)
    assert (prefetch.limit, prefetch.batch) == (8 + 32, 16)
    assert prefetch.wanted(8 + 16) == 16  # the next batch goes out while this one waits
    assert prefetch.wanted(8 + 17) == 0


def test_a_fast_handler_claims_the_largest_batches_one_after_another():
    prefetch = measured(8, handler_seconds=2e-6, claim_seconds=0.001)
    assert (prefetch.limit, prefetch.batch) == (8 + 2 * MAX_BATCH, MAX_BATCH)
    assert prefetch.wanted(0) == MAX_BATCH
    assert prefetch.wanted(MAX_BATCH) == MAX_BATCH  # claimed while the first batch runs
    assert prefetch.wanted(MAX_BATCH + 9) == 0
    assert prefetch.most == 8 + 2 * MAX_BATCH


def test_a_handler_too_fast_for_the_clock_counts_as_fast():
    prefetch = measured(2, handler_seconds=0.0, claim_seconds=0.001)
    assert prefetch.batch == MAX_BATCH


def test_claims_grow_when_redis_answers_slower():
    quick = measured(8, handler_seconds=0.0005, claim_seconds=0.0005)
    slow = measured(8, handler_seconds=0.0005, claim_seconds=0.005)
    assert (quick.batch, slow.batch) == (8, 80)


def test_one_slow_claim_moves_the_estimate_only_part_way():
    prefetch = measured(4, handler_seconds=0.05, claim_seconds=0.001)
    prefetch.claimed(0.1, batch_of(1))  # a stall: 100 ms, a quarter of it in the average
    assert prefetch.limit == 4 + 5  # 2 x 80/s x 25.75 ms = 4.1, where the stall alone says 16


def test_a_higher_priority_arriving_behind_lower_ones_keeps_claims_small():
    prefetch = measured(8, handler_seconds=2e-6, claim_seconds=0.001)
    prefetch.claimed(0.002, batch_of(MAX_BATCH, LOW))
    assert prefetch.batch == MAX_BATCH
    prefetch.claimed(0.002, batch_of(1, HIGH) + batch_of(MAX_BATCH - 1, LOW))
    assert (prefetch.batch, prefetch.limit) == (PRIORITY_BATCH, 8 + 2 * PRIORITY_BATCH)


def test_a_backlog_drained_highest_priority_first_keeps_large_claims():
    prefetch = measured(8, handler_seconds=2e-6, claim_seconds=0.001)
    for priority in (HIGH, HIGH, MEDIUM, LOW):
        prefetch.claimed(0.002, batch_of(MAX_BATCH, priority))
    assert prefetch.batch == MAX_BATCH


@pytest.mark.parametrize(("given", "concurrency", "limit", "claims_at"),
                         [(16, 8, 16, 8), (4, 8, 8, 4), (1, 1, 1, 1)])
def test_a_given_prefetch_is_kept_whatever_is_measured(given, concurrency, limit, claims_at):
    prefetch = Prefetch(concurrency, given)
    prefetch.claimed(0.001, batch_of(1))
    prefetch.handled(0.0, 1000)
    assert (prefetch.limit, prefetch.most) == (limit, limit)
    # claims every free place, once half the prefetch (at least one) is free
    assert prefetch.wanted(limit - claims_at) == claims_at
    assert prefetch.wanted(limit - claims_at + 1) == 0
    assert prefetch.wanted(0) == limit
