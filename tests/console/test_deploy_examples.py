"""The examples under deploy/ (SPEC §16): the KEDA ScaledObjects (a pool scaled in messages,
a batch GPU pool in batches) and the Grafana dashboard load, and every metric their queries
name is one RMQ's /metrics serves, with labels it gives, so a renamed metric cannot leave
them reading nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from console_helpers import TestClient
from helpers import wait_for
from prometheus_client.parser import text_string_to_metric_families

import rmq
from rmq.storage.registry import ConsumerState

pytestmark = pytest.mark.extras

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRIC = re.compile(r"\brmq_[a-z_]+\b")
# a label matcher inside a selector: name, then = != =~ !~
MATCHER = re.compile(r"\b([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"")
SELECTOR = re.compile(r"\{([^{}]*)\}")


def exported(api: TestClient, client: rmq.Client) -> dict[str, set[str]]:
    """Each sample name /metrics serves, with its label names, from a queue that has one of
    everything: a group with every limit, expired leases, a transaction, a consumer's handler
    times."""
    client.create_topic("renders", slots=2)
    client.bind("renders", "gpu")
    client.set_limits("renders", "gpu", max_in_flight=4, max_batches=2, rate=(100, 1))
    client.send_many("renders", ["a", "b", "c", {"body": "d", "priority": 200}])
    client.claim("renders", "gpu", count=1, lease=0.05)
    client.transaction("renders", id="order-17").send("e")
    client.heartbeat(ConsumerState("gpu-1", "renders", "gpu", "h", 1, client.now(), 4, 0, 1, 0,
                                   rmq.HandlerTimes((1,) + (0,) * 16, 0.001)))
    wait_for(lambda: client.stats("renders").groups["gpu"].expired == 1, 10, "a lease to end")
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(api.get("/metrics").text):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def queries_of_the_dashboard(dashboard: dict[str, Any]) -> list[str]:
    queries = [target["expr"] for panel in dashboard["panels"]
               for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def queries_of_the_scaled_object(scaled: dict[str, Any]) -> list[str]:
    assert scaled["apiVersion"] == "keda.sh/v1alpha1" and scaled["kind"] == "ScaledObject"
    triggers = scaled["spec"]["triggers"]
    assert triggers and {t["type"] for t in triggers} == {"prometheus"}
    for trigger in triggers:
        float(trigger["metadata"]["threshold"])  # KEDA takes it as a number in a string
    return [t["metadata"]["query"] for t in triggers]


def assert_only_exported(queries: list[str], names: dict[str, set[str]]) -> None:
    assert queries
    for query in queries:
        used = METRIC.findall(query)
        assert used, f"a query that names no RMQ metric: {query}"
        unknown = sorted(set(used) - set(names))
        assert not unknown, f"{query}\nnames metrics RMQ does not export: {unknown}"
        given = set().union(*(names[name] for name in used))
        for selector in SELECTOR.findall(query):
            labels = set(MATCHER.findall(selector))
            assert labels <= given, f"{query}\nfilters on labels RMQ does not give: {labels}"


def scaled_objects() -> dict[str, dict[str, Any]]:
    """Every ScaledObject under deploy/keda, by file name."""
    found = {path.name: yaml.safe_load(path.read_text())
             for path in sorted((DEPLOY / "keda").glob("*.yaml"))}
    assert found
    return found


def test_the_keda_scaled_objects_query_only_metrics_rmq_exports(
        api: TestClient, client: rmq.Client) -> None:
    names = exported(api, client)
    for scaled in scaled_objects().values():
        assert scaled["spec"]["scaleTargetRef"]["name"]
        assert_only_exported(queries_of_the_scaled_object(scaled), names)


def test_the_keda_examples_scale_a_pool_in_messages_and_a_batch_pool_in_batches() -> None:
    examples = scaled_objects()
    messages = examples["scaledobject.yaml"]
    batches = examples["scaledobject-batches.yaml"]
    assert messages["spec"]["scaleTargetRef"] != batches["spec"]["scaleTargetRef"]
    assert "rmq_in_flight_limit" in METRIC.findall(
        " ".join(queries_of_the_scaled_object(messages)))
    # capped at the group's max_batches, counting the claims in flight: a unit is a batch
    named = set(METRIC.findall(" ".join(queries_of_the_scaled_object(batches))))
    assert {"rmq_batches_limit", "rmq_batches_limit_used"} <= named


def test_the_grafana_dashboard_queries_only_metrics_rmq_exports(
        api: TestClient, client: rmq.Client) -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "rmq-dashboard.json").read_text())
    assert dashboard["panels"] and dashboard["uid"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    names = exported(api, client)
    queries = queries_of_the_dashboard(dashboard)
    assert_only_exported(queries, names)
    # what an operator looks at first is on it
    shown = set(METRIC.findall(" ".join(queries)))
    assert {"rmq_messages", "rmq_oldest_ready_age_seconds", "rmq_messages_expired",
            "rmq_in_flight_limit_used", "rmq_in_flight_limit",
            "rmq_handler_seconds_bucket"} <= shown


def test_a_query_naming_a_metric_rmq_does_not_export_is_caught(
        api: TestClient, client: rmq.Client) -> None:
    names = exported(api, client)
    with pytest.raises(AssertionError, match="rmq_messages_ready"):
        assert_only_exported(['sum(rmq_messages_ready{topic="renders"})'], names)
    with pytest.raises(AssertionError, match="queue"):
        assert_only_exported(['sum(rmq_messages{queue="renders"})'], names)
