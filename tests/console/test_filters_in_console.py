"""Tags, properties and filters in the console: the bind form and API set a group's filters,
the topic page lists them with the group's filtered count (test_browser.py), the finder
shows each message's tag and properties, and ``/metrics`` counts what each group's filters
rejected."""

from __future__ import annotations

import pytest
from console_helpers import TestClient
from test_metrics import labels, scrape

import rmq

pytestmark = pytest.mark.extras


def test_the_api_binds_with_filters_and_shows_them_with_tags_and_properties(
        api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t", slots=2)
    bound = api.post("/api/topics/t/bindings",
                     json={"group": "eu", "tags": "order", "where": "region = 'eu'"})
    assert bound.json()["added"], bound.text
    refused = api.post("/api/topics/t/bindings", json={"group": "bad", "where": "region ="})
    assert refused.status_code == 400 and "column 9" in refused.json()["error"]
    for tag, region in (("order", "eu"), ("order", "us"), ("refund", "eu")):
        sent = api.post("/api/topics/t/messages", json={"body": f"{tag}-{region}", "tag": tag,
                                                        "properties": {"region": region}})
        assert sent.status_code == 201, sent.text
    detail = api.get("/api/topics/t").json()
    assert detail["filters"] == {"eu": {"tags": "order", "where": "region = 'eu'"}}
    (eu,) = [g for g in detail["groups"] if g["group"] == "eu"]
    assert (eu["counters"]["sent"], eu["counters"]["filtered"]) == (1, 2)
    (row,) = api.get("/api/topics/t/find", params={"body": "order-eu"}).json()["rows"]
    assert (row["tag"], row["properties"]) == ("order", {"region": "eu"})
    assert client.topic("t", fresh=True).groups == ("eu",)  # the refused bind wrote nothing


def test_metrics_count_each_groups_filtered_messages(api: TestClient,
                                                     client: rmq.Client) -> None:
    client.create_topic("t")
    client.bind("t", "big", where="n > 5")
    client.bind("t", "all")
    client.send_many("t", [{"body": str(n), "properties": {"n": n}} for n in range(10)])
    samples = scrape(api.get("/metrics").text)
    filtered = samples["rmq_messages_filtered_total"]
    assert filtered[labels(topic="t", group="big")] == 6
    assert filtered[labels(topic="t", group="all")] == 0
