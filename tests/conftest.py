"""Shared fixtures: real Redis servers from ``tests/support/servers.py``, and the suite's
client x deployment matrix.

The matrix: a test that takes ``redis_url`` can run on one Redis node (``[single]``) and on
the session's 3-master Redis Cluster (``[cluster]``), each emptied before the test; a test
that takes ``make_client`` (the behaviour suite, ``core_fixtures.py``) or ``client_kind`` can
run with ``rmq.Client`` (``[sync]``) and with ``rmq.AsyncClient`` (``[async]``). The matrix
is crossed only where a behaviour can differ, as redis-py's ``onlycluster`` and
``onlynoncluster`` do, so the suite stays fast enough to run after every change. The rule:

* The cluster runs a test when the cluster may do it differently: an operation over several
  slots or nodes (a claim across slots, priority across slots, delete, stats, snapshot,
  recover, requeue over every slot), a script run on several nodes, the cluster's script
  fallback, pub/sub wake-ups, fleet-wide limits, transactions spanning slots, ACL rules a
  cluster adds, the cluster's failovers. What one slot's script decides (merging, retries,
  backoffs, leases, filters, the trace's events) and what is refused before any I/O (the
  bad-argument tables) runs on the single node only.
* The asyncio client runs a test when its driver does something of its own: waiting (a
  claim's ``wait``, wake-ups, ``wait_for_capacity``), the tasks' group commit and shared
  registry loads, ``each_topic`` and ``snapshot``'s async forms, transactions (``async
  with``), the errors it maps from Redis, replication's give-back, and at least one call of
  every public method. The flows both clients run (``client/base.py``) are otherwise
  proven once, with ``rmq.Client``.

A module declares its choice with ``pytestmark`` and a test may declare its own, the closest
declaration winning: ``single_node`` (single node only) or ``both_deployments``;
``sync_client`` (``rmq.Client`` only) or ``both_clients``. Undeclared, a test runs on both
deployments with both clients. The worker runtime's modules are ``sync_client`` (it runs on
threads of a ``Client``); the command line, the console's app, the server process and Spark
are edges over the same client and run on the single node (the console's peek and find are
the client's own views over every slot, and run on both).

``RMQ_TEST_DEPLOYMENTS=single`` and ``RMQ_TEST_CLIENTS=sync`` narrow any run further.

``./dev floors`` (the core suite on the lowest declared redis-py and hiredis) leaves out the
tests marked ``extras``, ``faults`` and ``model``: see ``pyproject.toml``'s markers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.servers import (
    cluster,
    cluster_url,
    fresh_server,
    isolated_environment,
    redis_server,
    tls_acl_server,
)

import rmq

__all__ = ["isolated_environment", "redis_server", "redis_url", "cluster", "cluster_url",
           "tls_acl_server", "fresh_server", "consumers"]

DEPLOYMENTS = ("single", "cluster")
CLIENT_KINDS = ("sync", "async")
# marker -> what it selects; the closest node (test, then module) that declares one decides
DEPLOYMENT_MARKS = {"single_node": ("single",), "both_deployments": DEPLOYMENTS}
CLIENT_MARKS = {"sync_client": ("sync",), "both_clients": CLIENT_KINDS}


def _declared(definition: pytest.Function, marks: dict[str, tuple[str, ...]],
              default: tuple[str, ...]) -> tuple[str, ...]:
    for node in reversed(definition.listchain()):
        names = {mark.name for mark in node.own_markers} & marks.keys()
        if len(names) > 1:
            raise pytest.UsageError(f"{node.nodeid} declares both {' and '.join(sorted(names))}")
        if names:
            return marks[names.pop()]
    return default


def _chosen(variable: str, offered: tuple[str, ...], allowed: tuple[str, ...]) -> list[str]:
    narrowed = os.environ.get(variable, ",".join(offered)).split(",")
    return [choice for choice in offered if choice in allowed and choice in narrowed]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    definition = metafunc.definition
    if "redis_url" in metafunc.fixturenames:
        deployments = _declared(definition, DEPLOYMENT_MARKS, DEPLOYMENTS)
        metafunc.parametrize("redis_url", _chosen("RMQ_TEST_DEPLOYMENTS", DEPLOYMENTS,
                                                  deployments), indirect=True)
    if "make_client" in metafunc.fixturenames or "client_kind" in metafunc.fixturenames:
        kinds = _declared(definition, CLIENT_MARKS, CLIENT_KINDS)
        metafunc.parametrize("client_kind", _chosen("RMQ_TEST_CLIENTS", CLIENT_KINDS, kinds))


@pytest.fixture
def redis_url(request: pytest.FixtureRequest) -> str:
    """The URL of an empty Redis: the shared single node, or a node of the shared cluster
    (every master FLUSHALLed), as the test's parameter says."""
    if getattr(request, "param", "single") == "cluster":
        return request.getfixturevalue("cluster_url")
    server = request.getfixturevalue("redis_server")
    with server.client() as client:
        client.flushall()
    return server.url


@pytest.fixture
def consumers() -> Iterator[Callable[..., rmq.Consumer]]:
    """Start consumers through this (``start(client, topic, handler, **options)``, a quiet
    heartbeat unless given); any still running at teardown are stopped."""
    started: list[rmq.Consumer] = []

    def start(client: rmq.Client, topic: str, handler: Callable[..., Any],
              **options: Any) -> rmq.Consumer:
        options.setdefault("heartbeat_interval", 60)
        consumer = rmq.Consumer(client, topic, handler, **options)
        started.append(consumer)
        return consumer.start()

    yield start
    for consumer in started:
        consumer.stop(grace=1)
