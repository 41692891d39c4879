"""Every public argument is checked (issue 12, point 4): a lease or extension that would
never run out, a wrong type for any parameter, JSON nested past the recursion limit, a URL
of another scheme, a consumer option out of range: each raises a typed InputError naming
the argument, before anything is written."""

from __future__ import annotations

import re

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401

import rmq
from rmq import errors

pytestmark = pytest.mark.single_node

NAN, INF = float("nan"), float("inf")


def _deep(levels: int) -> object:
    value: object = []
    for _ in range(levels):
        value = [value]
    return value


# (call on (client, a delivery), the argument the error must name)
BAD_CALLS = {
    "claim lease 1e300": (lambda c, m: c.claim("t", lease=1e300), "lease"),
    "claim lease negative": (lambda c, m: c.claim("t", lease=-1), "lease"),
    "claim lease NaN": (lambda c, m: c.claim("t", lease=NAN), "lease"),
    "claim lease infinite": (lambda c, m: c.claim("t", lease=INF), "lease"),
    "claim lease text": (lambda c, m: c.claim("t", lease="5"), "lease"),
    "claim wait negative": (lambda c, m: c.claim("t", wait=-1), "wait"),
    "claim wait NaN": (lambda c, m: c.claim("t", wait=NAN), "wait"),
    "claim count zero": (lambda c, m: c.claim("t", count=0), "count"),
    "claim count float": (lambda c, m: c.claim("t", count=2.0), "count"),
    "claim ack None": (lambda c, m: c.claim("t", ack=None), "ack"),
    "claim_due lease 1e300": (lambda c, m: c.claim_due("t", lease=1e300), "lease"),
    "wait_for_capacity timeout negative": (
        lambda c, m: c.wait_for_capacity("t", timeout=-1), "timeout"),
    "wait_for_capacity timeout NaN": (
        lambda c, m: c.wait_for_capacity("t", timeout=NAN), "timeout"),
    "wait_for_capacity group": (lambda c, m: c.wait_for_capacity("t", "a b"), "group"),
    "set_limits max_in_flight": (lambda c, m: c.set_limits("t", max_in_flight=0),
                                 "max_in_flight"),
    "set_limits rate": (lambda c, m: c.set_limits("t", rate=(1, -1)), "rate seconds"),
    "extend seconds text": (lambda c, m: c.extend(m, "5"), "seconds"),
    "extend seconds 1e300": (lambda c, m: c.extend(m, 1e300), "seconds"),
    "extend seconds NaN": (lambda c, m: c.extend(m, NAN), "seconds"),
    "extend seconds zero": (lambda c, m: c.extend(m, 0), "seconds"),
    "extend no message": (lambda c, m: c.extend("0-1", 5), "messages"),
    "ack None": (lambda c, m: c.ack(None), "messages"),
    "ack numbers": (lambda c, m: c.ack([1, 2]), "messages[0]"),
    "ack a dict": (lambda c, m: c.ack({"id": "0-1"}), "messages"),
    "release text": (lambda c, m: c.release("x"), "messages"),
    "nack None": (lambda c, m: c.nack(None), "message"),
    "nack error number": (lambda c, m: c.nack(m, 5), "error"),
    "requeue_dead ids number": (lambda c, m: c.requeue_dead("t", ids=5), "ids"),
    "requeue_dead ids text": (lambda c, m: c.requeue_dead("t", ids="0-1"), "ids"),
    "requeue_dead ids of numbers": (lambda c, m: c.requeue_dead("t", ids=[1]), "ids"),
    "send json nested deeply": (lambda c, m: c.send("t", json=_deep(100_000)), "json"),
    "send priority float": (lambda c, m: c.send("t", b"x", priority=1.5), "priority"),
    "send delay NaN": (lambda c, m: c.send("t", b"x", delay_ms=NAN), "delay_ms"),
    "send deliver_at float": (lambda c, m: c.send("t", b"x", deliver_at=1e12), "deliver_at"),
    "consumers dead_after NaN": (lambda c, m: c.consumers("t", dead_after=NAN), "dead_after"),
    "topic fresh text": (lambda c, m: c.topic("t", fresh="yes"), "fresh"),
    "snapshot slot out of range": (lambda c, m: list(c.snapshot("t", slots=[99])), "slot"),
    "snapshot groups text": (lambda c, m: list(c.snapshot("t", groups="abc")), "groups"),
    "recover topic number": (lambda c, m: c.recover(5), "topic name"),
    "heartbeat not a state": (lambda c, m: c.heartbeat({"id": "x"}), "state"),
    "forget_consumer id number": (lambda c, m: c.forget_consumer("t", 5), "consumer id"),
    "alter_topic lease 1e300": (lambda c, m: c.alter_topic("t", visibility_timeout=1e300),
                                "visibility_timeout"),
    "create_topic slots text": (lambda c, m: c.create_topic("u", slots="8"), "slots"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_a_bad_argument_raises_an_input_error_naming_it_and_writes_nothing(client, case):
    client.create_topic("t")
    client.send("t", b"held")
    client.send("t", b"waiting")
    (message,) = client.claim("t", count=1)
    before = sorted(map(repr, client.snapshot("t"))), client.topics()
    call, argument = BAD_CALLS[case]
    with pytest.raises(errors.InputError, match=re.escape(argument)) as raised:
        call(client, message)
    assert type(raised.value).__module__ == "rmq.errors"
    assert (sorted(map(repr, client.snapshot("t"))), client.topics()) == before


@pytest.mark.parametrize("url", ["http://localhost:6379", "localhost:6379", "redis:/x", 6379])
def test_a_url_of_another_scheme_raises_invalid_url(url):
    with pytest.raises(errors.InvalidURL, match="Redis URL"):
        rmq.Client(url)
    with pytest.raises(errors.InvalidURL, match="Redis URL"):
        rmq.AsyncClient(url)


CONSUMER_OPTIONS = {
    "concurrency zero": ({"concurrency": 0}, "concurrency"),
    "concurrency float": ({"concurrency": 2.5}, "concurrency"),
    "prefetch zero": ({"prefetch": 0}, "prefetch"),
    "prefetch beyond a claim": ({"prefetch": 10_001}, "prefetch"),
    "lease NaN": ({"lease": NAN}, "lease"),
    "lease 1e300": ({"lease": 1e300}, "lease"),
    "grace negative": ({"grace": -1}, "grace"),
    "recover_interval zero": ({"recover_interval": 0}, "recover_interval"),
    "heartbeat_interval infinite": ({"heartbeat_interval": INF}, "heartbeat_interval"),
    "name empty": ({"name": ""}, "name"),
    "group invalid": ({"group": "a:b"}, "group"),
}


@pytest.mark.parametrize("case", sorted(CONSUMER_OPTIONS))
def test_a_consumer_option_out_of_range_raises_an_input_error_naming_it(redis_url, case):
    options, argument = CONSUMER_OPTIONS[case]
    with rmq.Client(redis_url) as client:
        client.create_topic("t")
        with pytest.raises(errors.InputError, match=argument):
            rmq.Consumer(client, "t", lambda m: None, **options)
        with pytest.raises(errors.InvalidArgument, match="handler"):
            rmq.Consumer(client, "t", None)
        with pytest.raises(errors.InvalidTopicName):
            rmq.Consumer(client, "a{b}", lambda m: None)
