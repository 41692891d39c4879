"""One clock, Redis's (SPEC §7): clients whose hosts' clocks are minutes apart, or read 1970,
behave exactly like clients whose clocks are right. Each client here counts from a wall clock
skewed by ``SKEW`` (a :class:`ServerClock` with that local base), against the same Redis."""

from __future__ import annotations

import time
from typing import Any

import pytest
from core_fixtures import make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq import errors
from rmq.client.clock import ServerClock

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]

SKEW = 10 * 60 * 1000  # ten minutes, in ms


def skewed(offset_ms: float) -> ServerClock:
    """The server's clock, measured from this host's wall clock moved by ``offset_ms``."""
    return ServerClock(local=lambda: time.time() * 1000 + offset_ms)


def server_ms(client: Any) -> int:
    """The Redis server's own time (TIME), in epoch ms."""
    seconds, micros = client.redis.time()
    return seconds * 1000 + micros // 1000


@pytest.fixture
def behind(make_client):
    return make_client(clock=skewed(-SKEW))


@pytest.fixture
def ahead(make_client):
    return make_client(clock=skewed(+SKEW))


def test_clients_skewed_ten_minutes_apart_read_the_same_time(behind, ahead):
    before = server_ms(ahead)
    times = [behind.now(), ahead.now()]
    after = server_ms(ahead)
    for now in times:
        assert before - 5 <= now <= after + 5


def test_a_client_ahead_does_not_recover_the_live_leases_of_a_client_behind(behind, ahead):
    behind.create_topic("jobs", visibility_timeout=30)
    behind.send("jobs", b"work")
    (message,) = behind.claim("jobs", lease=5)
    assert ahead.recover("jobs") == 0
    assert ahead.claim("jobs") == []
    assert behind.ack(message) == 1


def test_a_client_behind_keeps_the_lease_a_client_ahead_took(behind, ahead):
    ahead.create_topic("jobs")
    ahead.send("jobs", b"work")
    (message,) = ahead.claim("jobs", lease=5)
    assert behind.extend(message, 5) == [True]
    assert behind.recover("jobs") == 0
    assert ahead.recover("jobs") == 0
    assert ahead.ack(message) == 1


def test_a_lease_runs_out_by_the_servers_clock_whoever_looks(behind, ahead):
    ahead.create_topic("jobs", retry_backoff=0)
    ahead.send("jobs", b"work")
    (message,) = ahead.claim("jobs", lease=0.2)
    assert message.lease_until - server_ms(ahead) <= 200
    wait_for(lambda: behind.recover("jobs") == 1, timeout=5, what="the lease to run out")
    (again,) = behind.claim("jobs")
    assert again.attempts == 2


def test_a_delayed_message_is_due_after_its_delay_by_the_servers_clock(behind, ahead):
    behind.create_topic("later")
    sent_at = server_ms(behind)
    behind.send("later", b"soon", delay_ms=1000)
    assert ahead.claim("later") == []
    (message,) = wait_for(lambda: ahead.claim("later"), timeout=5, what="the message due")
    claimed_at = server_ms(ahead)
    assert sent_at + 1000 <= message.due_at <= claimed_at
    assert claimed_at - message.due_at < 1000  # not late by the skew either


def test_a_claimer_ahead_does_not_promote_a_message_a_producer_behind_delayed(behind, ahead):
    behind.create_topic("later")
    behind.send("later", b"in a minute", delay_ms=60_000)
    assert ahead.claim("later") == []
    assert ahead.stats("later").groups["default"].delayed == 1


def test_deliver_at_is_checked_against_the_servers_clock(behind, ahead):
    ahead.create_topic("timed")
    soon = server_ms(ahead) + 60_000
    assert ahead.send("timed", b"in a minute", deliver_at=soon).merged is False
    with pytest.raises(errors.DeliverAtInPast):
        behind.send("timed", b"a minute ago", deliver_at=server_ms(behind) - 60_000)
    (row,) = list(behind.snapshot("timed"))
    assert (row.body, row.state, row.due_at) == (b"in a minute", "delayed", soon)


def test_heartbeats_of_a_consumer_behind_show_it_alive_to_a_client_ahead(behind, ahead):
    from rmq.storage.registry import ConsumerState

    behind.create_topic("jobs")
    behind.heartbeat(ConsumerState("c1", "jobs", "default", "host", 1, behind.now(), 1, 0, 0,
                                   0))
    (seen,) = ahead.consumers("jobs", dead_after=5)
    assert seen.alive
    assert abs(seen.last_seen - server_ms(ahead)) < 5000


@pytest.mark.both_clients
def test_a_client_whose_clock_reads_1970_works(make_client):
    client = make_client(clock=skewed(-time.time() * 1000 + 1000))  # 1 s after the epoch
    client.create_topic("old", retry_backoff=0)
    client.send("old", b"urgent", priority=255, delay_ms=50)
    client.send("old", b"now", priority=0)
    (row,) = [r for r in client.snapshot("old") if r.state == "delayed"]
    assert row.priority == 255
    assert row.due_at > 1_704_067_200_000  # a 2024-or-later time: the server's
    wait_for(lambda: server_ms(client) >= row.due_at, timeout=5, what="the message due")
    claimed = {m.body: m.priority for m in client.claim("old", count=2)}
    assert claimed == {b"urgent": 255, b"now": 0}


def test_an_explicit_clock_before_2024_is_refused_with_a_clear_error(redis_url):
    with pytest.raises(errors.InvalidClock, match="2024-01-01"):
        rmq.Client(redis_url, clock=lambda: 1_600_000_000_000)  # September 2020


def test_a_clock_that_goes_wrong_later_refuses_each_call_and_writes_nothing(make_client):
    wrong_from_now_on = []
    client = make_client(clock=lambda: 1_600_000_000_000 if wrong_from_now_on
                         else 1_800_000_000_000)
    client.create_topic("old")
    wrong_from_now_on.append(True)
    with pytest.raises(errors.InvalidClock, match="the client's clock reads 1600000000000"):
        client.send("old", b"x")
    with pytest.raises(errors.InvalidClock):
        client.claim("old")
    assert list(make_client().snapshot("old")) == []


def test_a_clock_that_is_not_callable_is_refused(redis_url):
    with pytest.raises(errors.InvalidArgument, match="clock"):
        rmq.Client(redis_url, clock=1_800_000_000_000)


# -- the measurement itself, fed TIME replies without Redis ------------------------------------


def _measure(clock: ServerClock, local: list[float],
             samples: list[tuple[float, tuple[int, int]]]) -> int:
    """Run ``clock.measure()``; each round trip takes its sample's ms and gets its reply."""
    op = clock.measure()
    calls = next(op)
    try:
        for took, reply in samples:
            assert [c.args for c in calls] == [("TIME",)]
            local[0] += took
            calls = op.send([reply])
    except StopIteration as done:
        return done.value
    raise AssertionError("measure() wanted more round trips")


def test_the_server_clock_is_read_at_the_midpoint_of_the_fastest_round_trip():
    local = [5_000.0]  # whatever the local clock reads: only its rate matters
    clock = ServerClock(local=lambda: local[0])
    server = 1_800_000_000
    _measure(clock, local, [(40, (server, 0)),            # slow: a connection's setup
                            (2, (server, 41_000)),         # the fastest: midpoint 5_041
                            (10, (server, 47_000))])
    assert clock.uncertainty_ms == 1
    # the server read 41 ms past its second at local 5_041; at local 5_052, 11 ms later:
    assert clock() == server * 1000 + 52


def test_the_server_clock_is_measured_again_after_a_while_and_after_a_failure():
    local = [0.0]
    clock = ServerClock(local=lambda: local[0], resync=10)
    assert clock.due
    _measure(clock, local, [(1, (1_800_000_000, 0))] * 3)
    assert not clock.due
    local[0] += 9_000
    assert not clock.due
    local[0] += 1_000
    assert clock.due
    _measure(clock, local, [(1, (1_800_000_010, 0))] * 3)
    assert not clock.due
    clock.invalidate()
    assert clock.due


def test_a_server_whose_clock_reads_before_2024_is_refused_with_a_clear_error():
    clock = ServerClock(local=lambda: 0.0)
    with pytest.raises(errors.InvalidClock, match="the Redis server's clock reads"):
        _measure(clock, [0.0], [(1, (1_600_000_000, 0))] * 3)


def test_an_unmeasured_server_clock_says_so():
    with pytest.raises(errors.InvalidClock, match="not been measured"):
        ServerClock()()
