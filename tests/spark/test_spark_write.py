"""Batch writes into a topic: ``df.write.format("rmq")`` (SPEC §6)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest
from helpers import states

import rmq
import rmq.spark
from rmq.spark.rows import InvalidSchema

pytestmark = [pytest.mark.extras, pytest.mark.single_node]


def bodies_frame(spark, rows, schema):
    return spark.createDataFrame(rows, schema).repartition(2)


def test_batch_write_merges_duplicates_and_reports_the_counts_redis_holds(spark, client, redis_url):
    client.create_topic("prices", slots=4)
    rows = [(f"sku-{i % 37}", 200 if i % 37 == 5 else 128) for i in range(1000)]
    df = bodies_frame(spark, rows, "body string, priority int")

    counts = rmq.spark.publish(df, "prices", url=redis_url, batchSize=64)

    group = client.stats("prices").groups["default"]
    assert counts == rmq.SendCounts(sent=1000, merged=1000 - 37)
    assert group.counters["sent"] == counts.sent
    assert group.counters["merged"] == counts.merged
    assert group.ready == 37
    assert states(client, "prices")["ready"] == sorted(f"sku-{i}".encode() for i in range(37))
    urgent = [row for row in client.snapshot("prices") if row.body == b"sku-5"]
    assert [row.priority for row in urgent] == [200]


def test_a_version_column_leaves_each_products_highest_version_whatever_the_order(
        spark, client, redis_url):
    # (a topic name of its own: a Spark worker may still cache an earlier test's "prices")
    client.create_topic("versioned", merge="key", slots=4)
    rows = [(f"{product}:{version}", product, version)
            for product in ("p1", "p2", "p3") for version in range(1, 11)]
    random.Random(5).shuffle(rows)
    df = bodies_frame(spark, rows, "body string, key string, version long")

    counts = rmq.spark.publish(df, "versioned", url=redis_url, batchSize=4)

    assert counts.sent == 30 and counts.outdated > 0
    assert states(client, "versioned")["ready"] == [b"p1:10", b"p2:10", b"p3:10"]
    group = client.stats("versioned").groups["default"]
    assert group.counters["outdated"] == counts.outdated


def test_json_column_is_canonicalised_so_equal_objects_merge(spark, client, redis_url):
    client.create_topic("events")
    rows = [('{"sku": 1, "shop": 2}',), ('{"shop":2,"sku":1}',), ('{"sku": 3}',)]

    counts = rmq.spark.publish(bodies_frame(spark, rows, "json string"), "events",
                               url=redis_url)

    assert counts == rmq.SendCounts(sent=3, merged=1)
    assert states(client, "events")["ready"] == [b'{"shop":2,"sku":1}', b'{"sku":3}']


def test_optional_columns_become_send_options(spark, client, redis_url):
    client.create_topic("options", slots=4)
    later = datetime.now(UTC) + timedelta(hours=1)
    rows = [
        ("delayed", None, 60_000, None, None, None),
        ("fixed-time", None, None, later, None, None),
        ("keyed", 7, None, None, "basis", "k1"),
        (b"\x00binary", None, None, None, None, None),
    ]
    schema = ("body binary, priority int, delay_ms long, deliver_at timestamp, "
              "slot_basis string, key string")
    rows = [(r[0].encode() if isinstance(r[0], str) else r[0], *r[1:]) for r in rows]

    rmq.spark.publish(bodies_frame(spark, rows, schema), "options", url=redis_url)

    by_body = {row.body: row for row in client.snapshot("options")}
    assert by_body[b"delayed"].state == "delayed"
    assert by_body[b"fixed-time"].state == "delayed"
    assert by_body[b"fixed-time"].due_at == int(later.timestamp() * 1000)
    assert (by_body[b"keyed"].priority, by_body[b"keyed"].key) == (7, b"k1")
    assert by_body[b"\x00binary"].state == "ready"


INVALID_WRITES = {
    "unknown topic": (["sku-1"], "body string", {"topic": "missing"},
                      "unknown topic 'missing': create it with `rmq topic create missing`"),
    "no body column": (["sku-1"], "text string", {}, "cannot be written"),
    "body and json": ([("a", "{}")], "body string, json string", {}, "exactly one of"),
    "badly typed priority": ([("a", "high")], "body string, priority string", {},
                             "'priority' must be an integer type"),
    "misspelt option": (["sku-1"], "body string", {"batch_size": "10"},
                        "unknown option(s) ['batch_size']"),
    "batch size out of range": (["sku-1"], "body string", {"batchSize": "0"},
                                "batchSize='0' must be from 1"),
    "negative replicas": (["sku-1"], "body string", {"replicas": "-1"},
                          "replicas='-1' must be from 0"),
    "replica fsync not a boolean": (["sku-1"], "body string", {"replicaFsync": "yes"},
                                    "replicaFsync='yes' must be true or false"),
}


@pytest.mark.parametrize("case", INVALID_WRITES, ids=list(INVALID_WRITES))
def test_invalid_write_fails_clearly_before_anything_is_sent(spark, client, redis_url, case):
    client.create_topic("prices")
    rows, schema, options, error = INVALID_WRITES[case]
    rows = [r if isinstance(r, tuple) else (r,) for r in rows]
    writer = bodies_frame(spark, rows, schema).write.format("rmq").mode("append")
    for name, value in {"topic": "prices", "url": redis_url, **options}.items():
        writer = writer.option(name, value)

    with pytest.raises(Exception, match="rmq") as failure:
        writer.save()

    assert error in str(failure.value)
    assert client.stats("prices").groups["default"].counters["sent"] == 0


def test_overwrite_mode_is_refused(spark, client, redis_url):
    client.create_topic("prices")
    df = bodies_frame(spark, [("a",)], "body string")
    with pytest.raises(Exception, match="can only be appended to"):
        df.write.format("rmq").mode("overwrite").option("topic", "prices") \
            .option("url", redis_url).save()


def test_a_row_send_refuses_fails_the_task_naming_the_rows(spark, client, redis_url):
    client.create_topic("prices")
    df = bodies_frame(spark, [("a", 300)], "body string, priority int").coalesce(1)

    with pytest.raises(Exception) as failure:
        rmq.spark.publish(df, "prices", url=redis_url)

    assert "rows 0-0 of this partition were refused" in str(failure.value)
    assert "priority must be an integer from 0 to 255, got 300" in str(failure.value)
    assert client.stats("prices").groups["default"].counters["sent"] == 0


def test_publish_report_is_what_the_driver_totalled(spark, client, redis_url, tmp_path):
    client.create_topic("prices")
    report = tmp_path / "report.json"
    df = bodies_frame(spark, [(f"sku-{i % 3}",) for i in range(30)], "body string")

    df.write.format("rmq").mode("append").option("topic", "prices").option("url", redis_url) \
        .option("reportPath", str(report)).save()

    assert json.loads(report.read_text()) == {"topic": "prices", "partitions": 2, "sent": 30,
                                              "merged": 27, "outdated": 0}


def test_schema_check_names_the_accepted_columns():
    from pyspark.sql.types import StringType, StructType

    with pytest.raises(InvalidSchema, match="body, json, priority, delay_ms, deliver_at"):
        rmq.spark.rows.check_write_schema(StructType().add("prio", StringType()))


def test_a_write_asking_for_a_replica_redis_lacks_fails_with_not_replicated(spark, client,
                                                                           redis_url):
    client.create_topic("prices")
    df = bodies_frame(spark, [("a",)], "body string").coalesce(1)

    with pytest.raises(Exception) as failure:
        rmq.spark.publish(df, "prices", url=redis_url, replicas=1, replicaTimeout=0.2)

    assert "NotReplicated" in str(failure.value)
    assert "only 0 of 1 replicas acknowledged within 0.2 s" in str(failure.value)
