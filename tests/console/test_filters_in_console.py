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


def test_the_api_notes_a_comparison_of_two_properties_and_names_the_groups_that_turned_a_send_away(
        api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t")
    bound = api.post("/api/topics/t/bindings", json={"group": "eu", "where": "region = eu"})
    assert bound.status_code == 200, bound.text
    assert bound.json()["notes"] == [
        "eu is read as a property name (region = eu compares two properties); quote a "
        "string: region = 'eu'"]
    assert client.topic("t", fresh=True).filter_of("eu").where == "region = eu"
    assert api.post("/api/topics/t/bindings", json={"group": "us", "where": "region = 'us'"}
                    ).json()["notes"] == []
    sent = api.post("/api/topics/t/messages", json={"body": "x", "properties": {"region": "us"}})
    assert sent.json()["filtered_by"] == ["eu"]
    assert len(sent.json()["message_id"]) == 16
