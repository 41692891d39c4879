"""The servers behind a test's ``redis_url``: the single node, or every master of the
session's cluster; and what a test does on each of them (count a channel's subscribers, cut
the pub/sub connections).

A module that uses the fixture imports it (``from support.nodes import node_urls_fixture  #
noqa: F401``); it is registered as ``node_urls``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import redis

__all__ = ["node_urls_fixture", "subscribers", "cut_pubsub_connections"]


@pytest.fixture(name="node_urls")
def node_urls_fixture(redis_url: str, request: pytest.FixtureRequest) -> list[str]:
    """The URL of each master behind ``redis_url``, ``redis_url``'s own first: the single
    node's alone, or the cluster's three."""
    with redis.Redis.from_url(redis_url) as probe:
        clustered = probe.info("cluster").get("cluster_enabled") == 1
    if not clustered:
        return [redis_url]
    urls = [master.url for master in request.getfixturevalue("cluster").masters()]
    return sorted(urls, key=lambda url: url != redis_url)


def subscribers(urls: Sequence[str], channel: str) -> int:
    """How many connections to these servers subscribe to ``channel`` (a cluster node
    counts its own only: PUBSUB NUMSUB)."""
    total = 0
    for url in urls:
        with redis.Redis.from_url(url) as node:
            ((_, count),) = node.pubsub_numsub(channel)
            total += int(count)
    return total


def cut_pubsub_connections(urls: Sequence[str]) -> int:
    """Close every pub/sub connection of these servers (CLIENT KILL TYPE pubsub), as a
    network fault or a restarted proxy would; returns how many were closed."""
    closed = 0
    for url in urls:
        with redis.Redis.from_url(url) as node:
            closed += int(node.client_kill_filter(_type="pubsub"))
    return closed
