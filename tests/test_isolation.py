"""Isolation (SPEC §7): a topic whose registry entry is broken in any way is reported, by
name and with what is wrong, and skipped by every operation over many topics; the other
topics are served. Operations on the broken topic itself raise CorruptRegistry, never a raw
Redis error. Console surfaces: tests/console/test_isolation.py."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading

import pytest
from broken_topics import BREAKAGES, break_topic
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq.errors import CorruptRegistry, UnknownTopic

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]

KINDS = sorted(BREAKAGES)


@pytest.mark.parametrize("kind", KINDS)
def test_recover_of_every_topic_recovers_the_others_and_logs_the_broken_one(
        client, clock, kind, caplog):
    client.create_topic("good", retry_backoff=0)
    client.create_topic("broken")
    break_topic(client.redis, "broken", kind)
    client.send("good", b"work")
    client.claim("good", lease=1)
    clock.advance(2000)
    with caplog.at_level(logging.WARNING, logger="rmq.client"):
        assert client.recover() == 1
    warned = [r.getMessage() for r in caplog.records if "'broken'" in r.getMessage()]
    assert len(warned) == 1 and BREAKAGES[kind] in warned[0], caplog.text


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_each_topic_reads_the_others_and_names_the_broken_one_with_its_problem(
        client, client_kind, kind):
    client.create_topic("a")
    client.create_topic("broken")
    client.create_topic("z", slots=2)
    break_topic(client.redis, "broken", kind)

    async def slots_async(info: rmq.TopicInfo) -> int:  # AsyncClient.each_topic awaits it
        return info.settings.slots

    found = client.each_topic(slots_async if client_kind == "async"
                              else lambda info: info.settings.slots)
    assert found.results == {"a": 8, "z": 2}
    assert list(found.broken) == ["broken"] and BREAKAGES[kind] in found.broken["broken"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_broken_topic_itself_raises_a_typed_error_naming_it(client, kind):
    client.create_topic("broken")
    break_topic(client.redis, "broken", kind)
    expected = UnknownTopic if kind == "no settings" else CorruptRegistry
    for call in (lambda: client.topic("broken", fresh=True), lambda: client.send("broken", b"x"),
                 lambda: client.stats("broken"), lambda: client.recover("broken")):
        with pytest.raises(expected, match="'broken'") as raised:
            call()
        if expected is CorruptRegistry:
            assert BREAKAGES[kind] in raised.value.problem


@pytest.mark.parametrize("kind", KINDS)
def test_a_broken_topic_can_be_deleted(client, kind):
    client.create_topic("broken", slots=4)
    client.send_many("broken", [b"%d" % i for i in range(20)])
    break_topic(client.redis, "broken", kind)
    client.delete_topic("broken")
    assert client.topics() == []
    assert client.redis.keys("rmq:{broken*") == []


@pytest.mark.parametrize("kind", KINDS)
def test_topic_list_lists_the_others_and_names_the_broken_one_on_stderr(redis_url, kind):
    with rmq.Client(redis_url) as client:
        client.create_topic("good")
        client.create_topic("broken")
        break_topic(client.redis, "broken", kind)
    for json in ((), ("--json",)):
        done = subprocess.run([sys.executable, "-m", "rmq", "--url", redis_url, "topic",
                               "list", *json], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "good" in done.stdout
        warning, = done.stderr.splitlines()
        assert "topic 'broken'" in warning and BREAKAGES[kind] in warning
    rows = {line.split()[0]: line.split()[-1]
            for line in subprocess.run(
                [sys.executable, "-m", "rmq", "--url", redis_url, "topic", "list"],
                capture_output=True, text=True, timeout=60).stdout.splitlines()[1:]}
    assert rows == {"broken": "broken", "good": "active"}


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "no settings"])
def test_run_serves_the_other_topics_handlers_when_one_topic_is_broken(make_client, kind,
                                                                      caplog):
    producer = make_client()
    worker = make_client(kind="sync")
    producer.create_topic("good")
    producer.create_topic("broken")
    break_topic(producer.redis, "broken", kind)
    seen: list[bytes] = []

    @worker.handler("good", heartbeat_interval=60)
    def on_good(message: rmq.Message) -> None:
        seen.append(message.body)

    @worker.handler("broken", heartbeat_interval=60)
    def on_broken(message: rmq.Message) -> None:
        raise AssertionError("nothing is claimed from a broken topic")

    runner = threading.Thread(target=worker.run)
    with caplog.at_level(logging.ERROR, logger="rmq.consumer"):
        runner.start()
        try:
            wait_for(lambda: on_good.consumer.running, what="the good topic's consumer")
            producer.send("good", b"served")
            wait_for(lambda: seen == [b"served"], what="the good topic's message handled")
        finally:
            on_good.consumer.stop(grace=1)
            runner.join(10)
    assert not runner.is_alive() and not on_broken.consumer.running
    (refused,) = [r.getMessage() for r in caplog.records if "'broken'" in r.getMessage()]
    assert BREAKAGES[kind] in refused


def test_a_consumer_of_a_broken_topic_alone_does_not_start(make_client):
    client = make_client(kind="sync")
    client.create_topic("broken")
    break_topic(client.redis, "broken", "settings of the wrong Redis type")
    with pytest.raises(CorruptRegistry, match="'broken'"):
        rmq.Consumer(client, "broken", lambda message: None).run()
