"""Fleet-wide limits per group (SPEC §10): set, read, validated, stored in the registry and
shown by stats."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq import errors

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def test_a_group_without_limits_has_none(client):
    client.create_topic("renders")
    assert client.limits("renders") == rmq.GroupLimits(None, None)
    assert client.limits("renders", "thumbnails") == rmq.GroupLimits()


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_set_limits_stores_both_limits_of_the_group(client):
    client.create_topic("renders")
    client.bind("renders", "gpu")
    stored = client.set_limits("renders", "gpu", max_in_flight=4, rate=(100, 60))
    assert stored == rmq.GroupLimits(max_in_flight=4, rate=(100, 60))
    assert client.limits("renders", "gpu") == stored
    assert client.limits("renders") == rmq.GroupLimits()  # another group is not limited


def test_a_limit_left_out_is_kept_and_one_given_as_none_is_removed(client):
    client.create_topic("renders")
    client.set_limits("renders", max_in_flight=4, rate=(10, 1))
    assert client.set_limits("renders", rate=(20, 1)) == rmq.GroupLimits(4, (20, 1))
    assert client.set_limits("renders", max_in_flight=8) == rmq.GroupLimits(8, (20, 1))
    assert client.set_limits("renders") == rmq.GroupLimits(8, (20, 1))  # nothing given
    assert client.limits("renders") == rmq.GroupLimits(8, (20, 1))
    client.set_limits("renders", max_in_flight=None)
    assert client.limits("renders") == rmq.GroupLimits(None, (20, 1))
    client.set_limits("renders", rate=None)
    assert client.limits("renders") == rmq.GroupLimits()


def test_limits_of_a_group_that_is_not_bound_are_refused_naming_the_fix(client):
    client.create_topic("renders")
    client.bind("renders", "gpu")
    with pytest.raises(errors.UnboundGroup) as refused:
        client.set_limits("renders", "gpus", max_in_flight=4)
    assert str(refused.value) == (
        "group 'gpus' is not bound to topic 'renders' (its groups: gpu), so no limit of it "
        "would hold anything: bind it first with bind('renders', 'gpus')")
    assert isinstance(refused.value, errors.InvalidArgument)
    with pytest.raises(errors.UnboundGroup):
        client.set_limits("renders", max_in_flight=4)  # default is no group once one is bound
    assert client.limits("renders", "gpus") == rmq.GroupLimits()
    # a group unbound since keeps what it holds, and may lose its limits
    client.set_limits("renders", "gpu", max_in_flight=2, rate=(5, 1))
    client.unbind("renders", "gpu")
    assert client.set_limits("renders", "gpu", max_in_flight=None) == rmq.GroupLimits(None,
                                                                                     (5, 1))
    assert client.set_limits("renders", "gpu", rate=None) == rmq.GroupLimits()
    assert client.limits("renders", "gpu") == rmq.GroupLimits()


@pytest.mark.both_deployments
def test_two_limits_set_at_once_by_two_clients_both_hold(make_client):
    """One operator sets a max_in_flight while another sets a rate: Redis merges each into
    what it holds, so neither writes back a copy missing the other's."""
    first, second = make_client(kind="sync"), make_client(kind="sync")
    first.create_topic("renders")
    first.bind("renders", "gpu")
    start = threading.Barrier(2, timeout=10)
    errors_seen: list[BaseException] = []

    def set_at_once(client, **limit):
        try:
            start.wait()
            client.set_limits("renders", "gpu", **limit)
        except BaseException as exc:  # asserted below
            errors_seen.append(exc)

    for trial in range(1, 201):
        first.set_limits("renders", "gpu", max_in_flight=None, rate=None)
        threads = [threading.Thread(target=set_at_once, args=(first,),
                                    kwargs={"max_in_flight": trial}),
                   threading.Thread(target=set_at_once, args=(second,),
                                    kwargs={"rate": (trial, 1)})]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert not errors_seen and not any(t.is_alive() for t in threads)
        assert first.limits("renders", "gpu") == rmq.GroupLimits(trial, (trial, 1)), trial


def test_a_limit_kept_by_the_merge_reads_back_as_it_was_set(client):
    client.create_topic("renders")
    client.set_limits("renders", max_in_flight=7, rate=(3, 1 / 3), max_batches=2)
    assert client.set_limits("renders", max_in_flight=8) == rmq.GroupLimits(8, (3, 1 / 3), 2)
    assert client.limits("renders") == rmq.GroupLimits(8, (3, 1 / 3), 2)
    assert client.set_limits("renders", rate=None) == rmq.GroupLimits(8, None, 2)
    assert client.set_limits("renders", max_batches=None, max_in_flight=None) == (
        rmq.GroupLimits())


def test_limits_are_seen_by_another_client_at_once(make_client):
    writer, reader = make_client(), make_client()
    writer.create_topic("renders")
    assert reader.limits("renders") == rmq.GroupLimits()
    writer.set_limits("renders", max_in_flight=2)
    assert reader.limits("renders") == rmq.GroupLimits(2)


@pytest.mark.parametrize(("max_in_flight", "rate", "problem"), [
    (0, None, "max_in_flight must be an integer from 1 to 1000000, got 0"),
    (1_000_001, None, "max_in_flight must be an integer from 1 to 1000000"),
    (2.5, None, "max_in_flight must be an integer"),
    (True, None, "max_in_flight must be an integer"),
    ("4", None, "max_in_flight must be an integer"),
    (None, 5, r"rate must be \(count, seconds\) or None, got 5"),
    (None, (1, 2, 3), r"rate must be \(count, seconds\)"),
    (None, "10/1", r"rate must be \(count, seconds\)"),
    (None, (0, 1), "rate count must be an integer from 1 to 1000000, got 0"),
    (None, (1_000_001, 1), "rate count must be an integer from 1 to 1000000"),
    (None, (1.5, 1), "rate count must be an integer"),
    (None, (10, 0), "rate seconds must be a number from 0.001 to 86400, got 0"),
    (None, (10, 86_401), "rate seconds must be a number from 0.001 to 86400"),
    (None, (10, float("nan")), "rate seconds must be a number"),
])
def test_bad_limits_raise_invalid_argument_and_write_nothing(client, max_in_flight, rate,
                                                             problem):
    client.create_topic("renders")
    client.set_limits("renders", max_in_flight=3, rate=(5, 1))
    with pytest.raises(errors.InvalidArgument, match=problem):
        client.set_limits("renders", max_in_flight=max_in_flight, rate=rate)
    assert client.limits("renders") == rmq.GroupLimits(3, (5, 1))


def test_limits_at_the_edges_of_their_ranges_are_accepted(client):
    client.create_topic("renders")
    client.set_limits("renders", max_in_flight=1_000_000, rate=(1_000_000, 0.001))
    assert client.limits("renders") == rmq.GroupLimits(1_000_000, (1_000_000, 0.001))
    client.set_limits("renders", max_in_flight=1, rate=(1, 86_400))
    assert client.limits("renders") == rmq.GroupLimits(1, (1, 86_400))


def test_limits_of_an_unknown_topic_or_a_bad_group_name_are_refused(client):
    with pytest.raises(errors.UnknownTopic):
        client.set_limits("nowhere", max_in_flight=1)
    with pytest.raises(errors.UnknownTopic):
        client.limits("nowhere")
    client.create_topic("renders")
    with pytest.raises(errors.InvalidGroupName):
        client.set_limits("renders", "no spaces", max_in_flight=1)


def test_stats_show_each_groups_limits(client):
    client.create_topic("renders")
    client.bind("renders", "gpu")
    client.bind("renders", "audit")
    client.set_limits("renders", "gpu", max_in_flight=4, rate=(100, 60))
    stats = client.stats("renders")
    assert stats.groups["gpu"].limits == rmq.GroupLimits(4, (100, 60))
    assert stats.groups["audit"].limits == rmq.GroupLimits()
    assert stats.to_dict()["groups"]["gpu"]["limits"] == {"max_in_flight": 4, "rate": (100, 60),
                                                          "max_batches": None}


def test_deleting_a_topic_removes_its_limits(client):
    client.create_topic("renders")
    client.set_limits("renders", max_in_flight=4)
    client.delete_topic("renders")
    client.create_topic("renders")
    assert client.limits("renders") == rmq.GroupLimits()


# -- max_in_flight at claim ----------------------------------------------------------------


def _send(client, topic, n):
    client.send_many(topic, [f"m{i}" for i in range(n)])


@pytest.mark.both_deployments
def test_a_claim_at_the_limit_returns_fewer_or_none(client):
    client.create_topic("renders", slots=4)
    _send(client, "renders", 10)
    client.set_limits("renders", max_in_flight=4)
    first = client.claim("renders", count=3)
    assert len(first) == 3
    assert len(client.claim("renders", count=3)) == 1
    assert client.claim("renders", count=3) == []
    assert client.stats("renders").groups["default"].ready == 6  # held back: still pending


@pytest.mark.both_deployments
def test_capacity_returns_on_ack_nack_and_release(client):
    client.create_topic("renders", retry_backoff=0)
    _send(client, "renders", 10)
    client.set_limits("renders", max_in_flight=3)
    held = client.claim("renders", count=10)
    assert len(held) == 3
    client.ack(held[0])
    (again,) = client.claim("renders", count=10)
    client.nack(held[1], "the GPU fell over")
    (third,) = client.claim("renders", count=10)
    client.release([held[2]])
    assert len(client.claim("renders", count=10)) == 1
    assert client.claim("renders", count=10) == []
    client.ack([again, third])
    assert len(client.claim("renders", count=10)) == 2


@pytest.mark.both_deployments
def test_capacity_returns_when_an_expired_lease_is_recovered(client, clock):
    client.create_topic("renders", visibility_timeout=5)
    _send(client, "renders", 4)
    client.set_limits("renders", max_in_flight=2)
    assert len(client.claim("renders", count=4)) == 2
    assert client.claim("renders", count=4) == []
    clock.advance(5_001)
    client.recover("renders")
    assert len(client.claim("renders", count=4)) == 2


@pytest.mark.both_deployments
def test_an_extended_lease_keeps_its_capacity(client, clock):
    client.create_topic("renders", visibility_timeout=5)
    _send(client, "renders", 4)
    client.set_limits("renders", max_in_flight=2)
    held = client.claim("renders", count=4)
    clock.advance(4_000)
    assert client.extend(held, 10) == [True, True]
    clock.advance(4_000)  # past the first lease, inside the extended one
    client.recover("renders")
    assert client.claim("renders", count=4) == []


@pytest.mark.both_deployments
def test_each_group_has_its_own_limit(client):
    client.create_topic("renders")
    client.bind("renders", "gpu")
    client.bind("renders", "audit")
    _send(client, "renders", 5)
    client.set_limits("renders", "gpu", max_in_flight=1)
    assert len(client.claim("renders", "gpu", count=5)) == 1
    assert len(client.claim("renders", "audit", count=5)) == 5


@pytest.mark.both_deployments
def test_a_changed_or_removed_limit_applies_to_the_next_claim(make_client):
    client, operator = make_client(), make_client()
    client.create_topic("renders")
    _send(client, "renders", 10)
    operator.set_limits("renders", max_in_flight=1)
    client.topic("renders", fresh=True)  # the client learns the group is limited
    assert len(client.claim("renders", count=10)) == 1
    operator.set_limits("renders", max_in_flight=3)
    assert len(client.claim("renders", count=10)) == 2
    operator.set_limits("renders", max_in_flight=None, rate=(100, 1))
    assert len(client.claim("renders", count=10)) == 7


@pytest.mark.parametrize("limits", [{"max_in_flight": 3}, {"rate": (3, 60)}])
@pytest.mark.both_deployments
def test_a_first_limit_applies_to_the_next_claim_of_a_client_whose_cache_is_warm(
        make_client, limits):
    client, operator = make_client(registry_ttl=3600), make_client()
    client.create_topic("renders", slots=4)
    _send(client, "renders", 20)
    early = client.claim("renders", count=2)  # the client's entry says: no limits
    operator.set_limits("renders", **limits)
    first = client.claim("renders", count=10)
    assert len(first) == 3  # the claim reads the limits in Redis, not in the client's cache
    assert client.claim("renders", count=10) == []
    client.ack(early)  # deliveries claimed before the group had a limit hold no unit of it
    assert client.claim("renders", count=10) == []
    if "max_in_flight" in limits:
        client.ack(first)  # the claim told the client: its deliveries hold permits to free
        assert len(client.claim("renders", count=10)) == 3


def _round_trips(client, act):
    executor = client._execute
    before = executor.round_trips
    result = act()
    return result, executor.round_trips - before


@pytest.mark.single_node
@pytest.mark.parametrize("slots", [4, 64])  # claim.lua; claim_heads.lua (a heads index)
def test_a_limited_claim_on_a_single_node_is_one_round_trip_acks_included(make_client, clock,
                                                                           slots):
    client = make_client(clock=clock, registry_ttl=3600)  # no TIME, no registry reads
    client.create_topic("renders", slots=slots)
    client.set_limits("renders", max_in_flight=10, rate=(1000, 60))
    _send(client, "renders", 30)
    client.ack(client.claim("renders", count=2))  # the entry cached, the heads index built
    held, trips = _round_trips(client, lambda: client.claim("renders", count=5))
    assert (len(held), trips) == (5, 1)  # not three: reserve, claim, settle
    more, trips = _round_trips(client, lambda: client.claim("renders", count=5, ack=held))
    assert (len(more), trips) == (5, 1)
    assert len(client.claim("renders", count=20)) == 5  # 10 in flight: the limit holds
    assert client.claim("renders", count=20) == []


def _script_calls(client):
    stats = client.redis.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0)
               for name in ("fcall", "evalsha", "eval"))


@pytest.mark.single_node
def test_an_ack_on_a_single_node_frees_its_permits_in_its_own_script_call(make_client,
                                                                          clock):
    client = make_client(clock=clock, registry_ttl=3600)
    client.create_topic("renders", slots=4)
    client.set_limits("renders", max_in_flight=8)
    _send(client, "renders", 20)
    client.ack(client.claim("renders", count=2))  # the entry cached
    held = client.claim("renders", count=8)
    assert client.claim("renders", count=8) == []
    client.redis.config_resetstat()
    assert client.ack(held) == 8
    assert _script_calls(client) == 1  # ack.lua alone, not ack.lua and limit_free.lua
    assert len(client.claim("renders", count=20)) == 8


@pytest.mark.both_deployments
def test_acks_in_the_claims_round_trip_free_capacity_first(client):
    client.create_topic("renders")
    _send(client, "renders", 6)
    client.set_limits("renders", max_in_flight=2)
    held = client.claim("renders", count=6)
    assert len(client.claim("renders", count=6, ack=held)) == 2


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_a_waiting_claim_at_the_limit_returns_once_an_ack_frees_capacity(make_client):
    holder, waiting = make_client("sync"), make_client()
    holder.create_topic("renders")
    holder.set_limits("renders", max_in_flight=1)
    _send(holder, "renders", 2)
    (held,) = holder.claim("renders")
    got = []
    claimer = threading.Thread(target=lambda: got.append(waiting.claim("renders", wait=20)))
    claimer.start()
    wait_for(lambda: holder.redis.zcard("rmq:{renders}:limit:default:waiters") == 1,
             what="the claim waiting for capacity")
    acked = time.monotonic()
    holder.ack(held)
    claimer.join(timeout=20)
    assert len(got[0]) == 1
    assert time.monotonic() - acked < 2  # woken by the ack, not by its lease's end (30 s)


@pytest.mark.both_deployments
def test_a_late_settle_of_an_earlier_topic_frees_no_capacity_of_the_topic_now(client):
    client.create_topic("renders", slots=1)
    client.set_limits("renders", max_in_flight=1)
    _send(client, "renders", 1)
    (old,) = client.claim("renders")
    client.delete_topic("renders")
    client.create_topic("renders", slots=1)
    client.set_limits("renders", max_in_flight=1)
    _send(client, "renders", 2)
    (new,) = client.claim("renders")
    assert new.id == old.id  # the same delivery id, in another creation of the topic
    client.ack(old)
    client.release([old])
    assert client.claim("renders") == []  # the new delivery still holds the one unit


class CountingWaits(rmq.Client):
    """A client that counts the waits for capacity of the consumers it runs."""

    waits = 0

    def wait_for_capacity(self, topic: str, group: str = "default",
                          timeout: float = 10.0) -> bool:
        held_back = super().wait_for_capacity(topic, group, timeout)
        self.waits += held_back
        return held_back


def test_a_consumer_held_back_at_its_groups_limit_says_so_once_for_each_limits(
        make_client, redis_url, caplog):
    caplog.set_level(logging.INFO, logger="rmq.consumer")

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "at its limit" in r.getMessage()]

    holder = make_client(kind="sync")
    holder.create_topic("renders")
    holder.set_limits("renders", max_in_flight=1)
    holder.send_many("renders", ["a", "b", "c"])
    (held,) = holder.claim("renders", count=1)
    with CountingWaits(redis_url) as client:
        consumer = rmq.Consumer(client, "renders", lambda m: None, recover_interval=0.05,
                                name="gpu-1").start()
        try:
            wait_for(lambda: client.waits >= 5, what="five waits at the limit")
            assert said() == ["gpu-1: group 'default' of topic 'renders' is at its limit (max "
                              "in flight 1): waiting for capacity, woken as it comes back "
                              "(said once for these limits)"]
            holder.set_limits("renders", rate=(100, 1))  # other limits: said again, once
            wait_for(lambda: len(said()) == 2, what="the new limits said")
            assert said()[1].endswith("at its limit (max in flight 1, rate 100 per 1s): "
                                      "waiting for capacity, woken as it comes back (said "
                                      "once for these limits)")
            waits = client.waits
            wait_for(lambda: client.waits >= waits + 5, what="five more waits")
            assert len(said()) == 2
        finally:
            consumer.stop(grace=1)
    holder.ack([held])
