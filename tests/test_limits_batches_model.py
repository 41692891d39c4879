"""Properties of batches: a stateful test of a group's ``max_batches`` against a model of
which claims are in flight, and the outcome of every ``BatchFailed`` a handler may raise.

The machine draws sends, claims of any count, acks, nacks and releases of any part of a claim,
lease extensions (to later deadlines), clock steps that let leases run out, recoveries and
changes of the limit,
on a real Redis through ``rmq.Client``. The model knows each claim's deliveries and their
lease deadlines: a claim is in flight while one of its deliveries is unsettled and its lease
has not run out. A claim gets all it asks (up to what is pending) while fewer than
``max_batches`` claims are in flight, else nothing; every message is pending, in flight or
acknowledged, never lost.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
from helpers import ManualClock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import rmq
from rmq.runtime.batches import outcomes

EXAMPLES = int(os.environ.get("RMQ_MODEL_EXAMPLES", "60"))
LEASE_MS = 5_000


@dataclass
class Claimed:
    """One claim as the model knows it: its unsettled deliveries and their lease deadlines."""

    held: dict[str, rmq.Message] = field(default_factory=dict)
    until: dict[str, int] = field(default_factory=dict)

    def live(self, now: int) -> bool:
        return any(self.until[i] > now for i in self.held)


class BatchLimitMachine(RuleBasedStateMachine):
    url = ""

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.client = rmq.Client(self.url, clock=self.clock)
        self.claims: list[Claimed] = []
        self.pending = 0
        self.acked = 0
        self.sent = 0
        self.max_batches = 1

    @initialize(slots=st.sampled_from([1, 4]), max_batches=st.integers(1, 2))
    def create(self, slots: int, max_batches: int) -> None:
        self.client.create_topic("t", slots=slots, visibility_timeout=LEASE_MS / 1000,
                                 retry_backoff=0, max_retries=1000)
        self.client.set_limits("t", max_batches=max_batches)
        self.max_batches = max_batches

    def teardown(self) -> None:
        self.client.delete_topic("t")
        self.client.close()

    def _now(self) -> int:
        return self.clock()

    def _in_flight(self) -> int:
        return sum(claim.live(self._now()) for claim in self.claims)

    def _live(self) -> list[tuple[Claimed, str]]:
        now = self._now()
        return [(claim, i) for claim in self.claims for i in claim.held if claim.until[i] > now]

    @rule(n=st.integers(1, 6))
    def send(self, n: int) -> None:
        self.client.send_many("t", [f"m{self.sent + i}" for i in range(n)])
        self.sent += n
        self.pending += n

    @rule(count=st.integers(1, 6))
    def claim(self, count: int) -> None:
        granted = self._in_flight() < self.max_batches
        got = self.client.claim("t", count=count)
        assert len(got) == (min(count, self.pending) if granted else 0), (
            f"{len(got)} claimed of {self.pending} pending, {self._in_flight()} claims in "
            f"flight, max_batches {self.max_batches}")
        if got:
            claim = Claimed({m.id: m for m in got}, {m.id: m.lease_until for m in got})
            self.claims.append(claim)
            self.pending -= len(got)

    @rule(count=st.integers(1, 3))
    def claim_again(self, count: int) -> None:
        """Claims drawn twice as often as settles: the limit binds often."""
        self.claim(count)

    def _some_live(self, data: st.DataObject) -> list[tuple[Claimed, str]]:
        live = self._live()
        return data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=len(live),
                                  unique_by=lambda pair: pair[1]))

    def _settle(self, data: st.DataObject) -> list[rmq.Message]:
        """Some live deliveries, no longer held once the caller settles them."""
        messages = []
        for claim, i in self._some_live(data):
            messages.append(claim.held.pop(i))
        return messages

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        messages = self._settle(data)
        assert self.client.ack(messages) == len(messages)
        self.acked += len(messages)

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def nack_or_release(self, data: st.DataObject) -> None:
        messages = self._settle(data)
        if data.draw(st.booleans(), label="release"):
            assert self.client.release(messages) == len(messages)
        else:
            for message in messages:
                assert self.client.nack(message, "failed") == "retried"
        self.pending += len(messages)

    @precondition(lambda self: self._live())
    @rule(data=st.data(), seconds=st.integers(1, 10))
    def extend(self, data: st.DataObject, seconds: int) -> None:
        # Later, as a consumer's keeper extends (on a cluster a permit never moves earlier,
        # so a lease cut short would leave its claim in flight there until the permit ends).
        until = self._now() + seconds * 1000
        chosen = [(claim, i) for claim, i in self._some_live(data) if claim.until[i] < until]
        assert all(self.client.extend([claim.held[i] for claim, i in chosen], seconds))
        for claim, i in chosen:
            claim.until[i] = until

    @rule(ms=st.integers(1, 7_000))
    def advance(self, ms: int) -> None:
        deadlines = {until for claim in self.claims for until in claim.until.values()}
        while self._now() + ms in deadlines:  # a lease ending at this very ms: either way
            ms += 1
        self.clock.advance(ms)

    @rule()
    def recover(self) -> None:
        now = self._now()
        expired = [(claim, i) for claim in self.claims for i in claim.held
                   if claim.until[i] <= now]
        assert self.client.recover("t") == len(expired)
        for claim, i in expired:
            del claim.held[i]
        self.pending += len(expired)

    @rule(max_batches=st.integers(1, 3))
    def change_the_limit(self, max_batches: int) -> None:
        self.client.set_limits("t", max_batches=max_batches)
        self.max_batches = max_batches

    @invariant()
    def nothing_is_lost(self) -> None:
        held = sum(len(claim.held) for claim in self.claims)
        assert self.pending + held + self.acked == self.sent
        self.claims = [claim for claim in self.claims if claim.held]


@pytest.mark.both_deployments
def test_max_batches_holds_the_claims_in_flight_as_the_model_says(redis_url: str) -> None:
    BatchLimitMachine.url = redis_url
    run_state_machine_as_test(BatchLimitMachine, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=50, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))


# -- a batch's outcome ----------------------------------------------------------------------


def _batch(n: int) -> list[rmq.Message]:
    return [rmq.Message("t", "g", i % 3, i, b"m%d" % i, 128, 1, 0) for i in range(n)]


@given(size=st.integers(1, 20), data=st.data())
def test_batch_failed_fails_exactly_the_messages_it_names_however_it_names_them(
        size: int, data: st.DataObject) -> None:
    batch = _batch(size)
    named = data.draw(st.lists(st.sampled_from(batch), unique_by=id, max_size=size))
    how = data.draw(st.lists(st.sampled_from(["message", "id", "message_id"]),
                             min_size=len(named), max_size=len(named)))
    names = {m if way == "message" else m.id if way == "id" else m.message_id: f"bad {m.id}"
             for m, way in zip(named, how, strict=True)}
    result = outcomes(batch, rmq.BatchFailed(names))
    assert [m for m, _ in result] == batch
    assert {m.id: error for m, error in result} == {
        m.id: (f"bad {m.id}" if any(m is n for n in named) else None) for m in batch}


@given(size=st.integers(1, 10), stranger=st.sampled_from(["9-999", "0123456789abcdef"]))
def test_batch_failed_naming_a_stranger_fails_the_whole_batch(size: int, stranger: str) -> None:
    batch = _batch(size)
    error = rmq.BatchFailed({batch[0]: "bad", stranger: "who?"})
    assert outcomes(batch, error) == [(m, error) for m in batch]


@given(size=st.integers(1, 10))
def test_returning_acks_and_raising_fails_every_message_of_the_batch(size: int) -> None:
    batch = _batch(size)
    error = RuntimeError("the GPU fell over")
    assert outcomes(batch, None) == [(m, None) for m in batch]
    assert outcomes(batch, error) == [(m, error) for m in batch]
