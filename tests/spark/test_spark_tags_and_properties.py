"""Spark's ``tag`` and ``properties`` columns (SPEC §13): written as each message's tag and
properties, so the groups' filters apply to a DataFrame's rows; read back by the batch
snapshot, properties as a JSON object."""

from __future__ import annotations

import json

import pytest

import rmq
import rmq.spark
from rmq.spark.rows import InvalidSchema

pytestmark = [pytest.mark.extras, pytest.mark.single_node]


def test_map_and_struct_properties_reach_the_groups_filters(spark, client, redis_url):
    client.create_topic("orders", slots=2)
    client.bind("orders", "eu", tags="order", where="region = 'eu' AND total > 10")
    client.bind("orders", "all")
    # a map holds one value type: as strings, "12" never compares with the number 10
    as_map = spark.createDataFrame(
        [("a", "order", {"region": "eu", "total": "12"}),
         ("b", "order", {"region": "us", "total": "50"}),
         ("c", "refund", {"region": "eu", "total": "99"})],
        "body string, tag string, properties map<string,string>")
    counts = rmq.spark.publish(as_map, "orders", url=redis_url)
    assert counts.sent == 3
    as_struct = spark.createDataFrame(
        [("d", "order", ("eu", 12.5, True)), ("e", "order", ("eu", 3.0, None)),
         ("f", None, ("eu", 99.0, False))],
        "body string, tag string, properties struct<region:string,total:double,vip:boolean>")
    rmq.spark.publish(as_struct, "orders", url=redis_url)

    eu = sorted((r.body, r.tag, dict(r.properties)) for r in client.snapshot(
        "orders", groups=["eu"]))
    assert eu == [(b"d", "order", {"region": "eu", "total": 12.5, "vip": True})]
    assert client.stats("orders").groups["eu"].counters["filtered"] == 5
    (e,) = [r for r in client.snapshot("orders", groups=["all"]) if r.body == b"e"]
    assert e.properties == {"region": "eu", "total": 3.0}  # a null field is no property

    rows = {r.body: r for r in spark.read.format("rmq").option("url", redis_url)
            .option("topic", "orders").load().where("group = 'all'").collect()}
    assert rows[b"d"].tag == "order"
    assert json.loads(rows[b"d"].properties) == {"region": "eu", "total": 12.5, "vip": True}
    assert rows[b"f"].tag is None


def test_a_properties_column_of_another_type_is_refused_before_any_write(spark, client,
                                                                         redis_url):
    client.create_topic("orders")
    bad = spark.createDataFrame([("a", {"x": [1]})],
                                "body string, properties map<string,array<int>>")
    with pytest.raises(InvalidSchema, match="column 'properties' must be a map"):
        rmq.spark.rows.check_write_schema(bad.schema)
    with pytest.raises(Exception, match="column 'properties' must be a map"):
        rmq.spark.publish(bad, "orders", url=redis_url)
    invalid = spark.createDataFrame([("a", {"1x": 1})], "body string, properties map<string,int>")
    with pytest.raises(Exception, match="invalid property name '1x'"):
        rmq.spark.publish(invalid, "orders", url=redis_url)
    assert client.stats("orders").groups["default"].ready == 0
    assert isinstance(rmq.errors.InvalidProperties("x"), ValueError)
