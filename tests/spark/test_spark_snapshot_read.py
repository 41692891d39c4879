"""Batch reads of a topic: ``spark.read.format("rmq")``, a non-destructive snapshot (SPEC §6)."""

from __future__ import annotations

import pytest

import rmq

pytestmark = [pytest.mark.extras, pytest.mark.single_node]


def load(spark, redis_url, topic, **options):
    reader = spark.read.format("rmq").option("topic", topic).option("url", redis_url)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def epoch_ms(moment):
    return None if moment is None else round(moment.timestamp() * 1000)


@pytest.fixture
def topic_in_every_state(client):
    """Topic ``renders`` (4 slots, no retries) bound to ``default`` and ``audit``. In
    ``default``: sku-taken in flight, sku-broken dead, sku-a and sku-b (HIGH) ready,
    sku-later delayed a minute. ``audit`` holds all five pending."""
    client.create_topic("renders", slots=4, max_retries=0)
    client.bind("renders", "default")
    client.bind("renders", "audit")
    client.send_many("renders", ["sku-taken", "sku-broken"])
    claimed = {m.text: m for m in client.claim("renders", count=2)}
    client.nack(claimed["sku-broken"], "renderer crashed")
    client.send("renders", "sku-a")
    client.send("renders", "sku-b", priority=rmq.Priority.HIGH)
    client.send("renders", "sku-later", delay_ms=60_000)
    return claimed["sku-taken"]


def test_snapshot_read_shows_every_state_including_dead_letters(spark, client, redis_url,
                                                                topic_in_every_state):
    taken = topic_in_every_state

    rows = {(r.group, bytes(r.body).decode()): r
            for r in load(spark, redis_url, "renders").collect()}

    default = {body: row.state for (group, body), row in rows.items() if group == "default"}
    audit = {body: row.state for (group, body), row in rows.items() if group == "audit"}
    assert default == {"sku-taken": "in_flight", "sku-broken": "dead", "sku-a": "ready",
                       "sku-b": "ready", "sku-later": "delayed"}
    assert audit == {"sku-taken": "ready", "sku-broken": "ready", "sku-a": "ready",
                     "sku-b": "ready", "sku-later": "delayed"}
    in_flight = rows[("default", "sku-taken")]
    assert (in_flight.id, in_flight.attempts) == (taken.id, 1)
    # the message id, the same in every group and state (a delivery has its own id)
    assert in_flight.message_id == taken.message_id == rows[("audit", "sku-taken")].message_id
    assert {row.message_id for row in rows.values()} == {
        rmq.message_id_of("renders", body.encode()) for _, body in rows}
    assert epoch_ms(in_flight.due_at) == taken.due_at
    assert in_flight.lease_until is not None
    dead = rows[("default", "sku-broken")]
    assert (dead.error, dead.attempts) == ("renderer crashed", 1)
    assert dead.dead_at is not None and dead.id is not None
    assert rows[("default", "sku-b")].priority == rmq.Priority.HIGH
    assert rows[("default", "sku-a")].priority == rmq.Priority.MEDIUM
    for stored in client.snapshot("renders"):
        row = rows[(stored.group, stored.body.decode())]
        assert (epoch_ms(row.due_at), row.slot, row.attempts) == \
            (stored.due_at, stored.slot, stored.attempts)


def test_snapshot_read_changes_nothing(spark, client, redis_url, topic_in_every_state):
    before = client.stats("renders").to_dict()

    load(spark, redis_url, "renders").collect()

    after = client.stats("renders").to_dict()
    for group in ("default", "audit"):
        for field in ("ready", "delayed", "in_flight", "dead", "counters"):
            assert after["groups"][group][field] == before["groups"][group][field]


def test_snapshot_read_has_one_partition_per_group_and_slot(spark, redis_url,
                                                            topic_in_every_state):
    assert load(spark, redis_url, "renders").rdd.getNumPartitions() == 2 * 4

    audit = load(spark, redis_url, "renders", group="audit")

    assert audit.rdd.getNumPartitions() == 4
    assert {row.group for row in audit.collect()} == {"audit"}


def error_line_within_the_first_lines(error: BaseException, line: str) -> None:
    """``line`` is in ``error``'s message after at most four other lines (Spark's heading
    and a one-frame traceback), not under the client's twenty frames."""
    text = str(error)
    assert line in text, text
    assert text[:text.index(line)].count("\n") <= 4, text


def test_a_read_of_a_missing_topic_fails_naming_the_topic_and_the_fix_first(spark,
                                                                          redis_url):
    with pytest.raises(Exception) as failure:  # Spark raises its AnalysisException
        load(spark, redis_url, "nothing-here").collect()
    error_line_within_the_first_lines(
        failure.value, "unknown topic 'nothing-here': create it with `rmq topic create "
                       "nothing-here` (or Client.create_topic) before the job runs")


def test_snapshot_read_of_unknown_topic_or_group_fails_clearly(spark, redis_url,
                                                               topic_in_every_state):
    with pytest.raises(Exception, match="unknown topic 'nothing-here'"):
        load(spark, redis_url, "nothing-here").collect()
    with pytest.raises(Exception, match="group 'billing' holds nothing on topic 'renders'"):
        load(spark, redis_url, "renders", group="billing").collect()
