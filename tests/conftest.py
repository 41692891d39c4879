"""Shared fixtures: real Redis servers from ``tests/support/servers.py``.

Every test that takes ``redis_url`` runs twice: on one Redis node (``[single]``) and on the
session's 3-master Redis Cluster (``[cluster]``), each emptied before the test. Left out of
the cluster run: tests marked ``single_node`` (a cluster run would prove nothing more, or
something a cluster does not promise), tests about the server process itself
(``test_server.py``), the command line (``test_cli.py``, ``test_cli_errors.py``,
``test_cli_filters.py``: an edge
over the same client) and the Spark suite. The fault scenarios of ``faults/`` that take
``redis_url`` run on both; those that kill or cut off a server start their own.
``RMQ_TEST_DEPLOYMENTS=single`` runs everything on the single node only.

Every test that takes ``make_client`` (the behaviour suite, ``core_fixtures.py``) also runs
with both clients: ``rmq.Client`` (``[sync]``) and ``rmq.AsyncClient`` (``[async]``), except
the modules about the threaded worker runtime and the threads' group commit, which need a
``Client``. ``RMQ_TEST_CLIENTS=sync`` runs the sync client only.
"""

from __future__ import annotations

import os

import pytest
from support.servers import (
    cluster,
    cluster_url,
    fresh_server,
    isolated_environment,
    redis_server,
    tls_acl_server,
)

__all__ = ["isolated_environment", "redis_server", "redis_url", "cluster", "cluster_url",
           "tls_acl_server", "fresh_server"]

DEPLOYMENTS = ("single", "cluster")
CLIENT_KINDS = ("sync", "async")
_SYNC_CLIENT_ONLY_FILES = {"test_consumer_runtime.py", "test_handler_decorator.py",
                           "test_send_coalescing.py"}
_SINGLE_ONLY_FILES = {"test_server.py", "test_cli.py", "test_cli_errors.py",
                      "test_cli_filters.py"}
_SINGLE_ONLY_DIRS = {"spark"}


def _deployments(definition: pytest.Function) -> list[str]:
    chosen = os.environ.get("RMQ_TEST_DEPLOYMENTS", ",".join(DEPLOYMENTS)).split(",")
    path = definition.path
    if (definition.get_closest_marker("single_node") or path.name in _SINGLE_ONLY_FILES
            or path.parent.name in _SINGLE_ONLY_DIRS):
        chosen = [d for d in chosen if d == "single"]
    return [d for d in DEPLOYMENTS if d in chosen]


def _client_kinds(definition: pytest.Function) -> list[str]:
    chosen = os.environ.get("RMQ_TEST_CLIENTS", ",".join(CLIENT_KINDS)).split(",")
    if definition.path.name in _SYNC_CLIENT_ONLY_FILES:
        chosen = ["sync"]
    return [k for k in CLIENT_KINDS if k in chosen]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "redis_url" in metafunc.fixturenames:
        metafunc.parametrize("redis_url", _deployments(metafunc.definition), indirect=True)
    if "make_client" in metafunc.fixturenames or "client_kind" in metafunc.fixturenames:
        metafunc.parametrize("client_kind", _client_kinds(metafunc.definition))


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
