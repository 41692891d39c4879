"""The streaming reader's driver side, driven the way Spark drives it (no Spark needed):
claims per offset, acknowledgement only after Spark committed, replays after a restart."""

from __future__ import annotations

import logging

import pytest
from helpers import wait_for
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from rmq.spark.options import parse
from rmq.spark.stream_reader import TopicStreamReader

pytestmark = [pytest.mark.extras, pytest.mark.single_node]


@pytest.fixture
def reader(client, redis_url):
    client.create_topic("renders", slots=4, retry_backoff=0)
    client.send_many("renders", [f"sku-{i}" for i in range(25)])
    made = []

    def make(**options: str) -> TopicStreamReader:
        made.append(TopicStreamReader(parse({"topic": "renders", "url": redis_url,
                                             **options}, "stream")))
        return made[-1]

    yield make
    for r in made:
        r._stopping.set()


def default_group(client):
    return client.stats("renders").groups["default"]


def test_each_offset_claims_a_batch_acknowledged_once_spark_moves_past_it(client, reader):
    source = reader(batchSize="10")
    start = source.initialOffset()

    first = source.latestOffset(start, source.getDefaultReadLimit())
    rows = [row for part in source.partitions(start, first) for row in source.read(part)]

    assert (start, first) == ({"batch": 0}, {"batch": 1})
    assert len(rows) == 10 and {row[3] for row in rows} == {"in_flight"}
    assert (default_group(client).in_flight, default_group(client).counters["acked"]) == (10, 0)

    second = source.latestOffset(first, ReadMaxRows(10))  # Spark committed batch 1
    assert second == {"batch": 2}
    assert (default_group(client).in_flight, default_group(client).counters["acked"]) == (10, 10)

    source.commit(second)
    assert (default_group(client).in_flight, default_group(client).counters["acked"]) == (0, 20)


def test_no_due_message_means_no_new_offset(client, reader):
    source = reader()
    end = source.latestOffset({"batch": 0}, ReadAllAvailable())
    assert end == {"batch": 1}
    assert source.latestOffset(end, ReadAllAvailable()) == end
    assert default_group(client).counters["acked"] == 25


def test_an_offset_not_yet_planned_is_handed_out_again_without_claiming_more(client, reader):
    source = reader(batchSize="10")
    assert source.latestOffset({"batch": 0}, ReadMaxRows(10)) == {"batch": 1}
    assert source.latestOffset({"batch": 0}, ReadMaxRows(10)) == {"batch": 1}
    assert default_group(client).in_flight == 10


def test_a_batch_claimed_by_a_previous_run_replays_empty_and_comes_back_after_its_lease(
        client, reader, caplog):
    crashed = reader(batchSize="10", lease="0.5")
    crashed.latestOffset({"batch": 0}, ReadMaxRows(10))
    crashed._stopping.set()  # the driver died: nobody extends or acknowledges batch 1

    restarted = reader(batchSize="30", lease="0.5", recoverInterval="0.1")
    with caplog.at_level(logging.WARNING, logger="rmq.spark"):
        assert restarted.partitions({"batch": 0}, {"batch": 1}) == []
    assert caplog.messages == [
        "rmq: topic 'renders': the micro-batch from offset {\"batch\": 0} to {\"batch\": 1} "
        "(Spark's startOffset and endOffset) holds claims of an earlier run of this query "
        "({\"batch\": 1}); their messages are missing from this batch and are read again once "
        "their leases expire"]
    wait_for(lambda: client.recover("renders") == 10, timeout=10,
             what="the dead run's leases to expire and be recovered")
    end = restarted.latestOffset({"batch": 1}, ReadMaxRows(30))

    rows = [row for part in restarted.partitions({"batch": 1}, end)
            for row in restarted.read(part)]
    assert end == {"batch": 2}
    assert len(rows) == 25
    assert sorted(row[6] for row in rows) == [1] * 15 + [2] * 10  # attempts


def test_available_now_takes_only_what_was_pending_when_the_query_started(client, reader):
    source = reader(batchSize="10")
    source.prepareForTriggerAvailableNow()
    client.send_many("renders", [f"late-{i}" for i in range(25)])

    offsets = [{"batch": 0}]
    while (end := source.latestOffset(offsets[-1], ReadMaxRows(10))) != offsets[-1]:
        offsets.append(end)

    assert len(offsets) - 1 == 3  # 10 + 10 + 5 messages: the 25 pending at the start
    assert default_group(client).counters["acked"] == 25


def test_deliveries_whose_lease_ran_out_before_the_commit_are_logged_by_offset(
        client, reader, caplog):
    source = reader(batchSize="10", lease="0.5")
    first = source.latestOffset({"batch": 0}, ReadMaxRows(10))
    source._stopping.set()  # no keeper: the leases run out before Spark commits
    wait_for(lambda: client.recover("renders") == 10, timeout=10,
             what="the leases to expire and be recovered")
    with caplog.at_level(logging.WARNING, logger="rmq.spark"):
        source.commit(first)
    assert caplog.messages == [
        "rmq: topic 'renders': 10 deliveries up to offset {\"batch\": 1} had lost their lease "
        "before Spark committed them and will be delivered again"]
