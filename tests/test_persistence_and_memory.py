"""Persistence and memory (SPEC §7, §9): the servers RMQ starts keep the queue on disk and
never evict it; a client connected to a server that could lose queued messages says so once;
a full Redis refuses a send whole, with a clear error and nothing half-written."""

from __future__ import annotations

import asyncio
import warnings

import pytest
import redis
from helpers import wait_for

import rmq
from rmq.errors import RedisOutOfMemory
from rmq.server import RedisServer, embedded_server, ensure_embedded
from rmq.storage.scripts import script


def _config(url: str, *names: str) -> dict[str, str]:
    with redis.Redis.from_url(url, decode_responses=True) as r:
        out: dict[str, str] = {}
        for name in names:
            out.update(r.config_get(name))
        return out


def test_embedded_server_appends_every_write_to_disk_and_never_evicts(tmp_path):
    url = ensure_embedded(tmp_path / "home")
    try:
        assert _config(url, "appendonly", "maxmemory-policy") == {
            "appendonly": "yes", "maxmemory-policy": "noeviction"}
    finally:
        embedded_server(tmp_path / "home").stop()


def test_test_servers_append_to_disk_and_never_evict(fresh_server):
    server = fresh_server(appendfsync="always")
    assert _config(server.url, "appendonly", "appendfsync", "maxmemory-policy") == {
        "appendonly": "yes", "appendfsync": "always", "maxmemory-policy": "noeviction"}


def _client_warnings(url: str, clients: int = 2) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(clients):
            rmq.Client(url).close()
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_client_warns_once_about_a_server_that_may_evict_queued_messages(fresh_server):
    server = fresh_server(extra={"maxmemory-policy": "allkeys-lru"})
    (warning,) = _client_warnings(server.url)
    assert "allkeys-lru" in warning and "noeviction" in warning


def test_client_warns_once_about_a_server_that_keeps_nothing_on_disk(fresh_server):
    server = fresh_server(appendonly=False)
    (warning,) = _client_warnings(server.url)
    assert "appendonly yes" in warning


def test_client_does_not_warn_about_snapshots_without_an_append_only_file(fresh_server):
    server = fresh_server(appendonly=False, extra={"save": "3600 1"})
    assert _client_warnings(server.url) == []


def test_client_does_not_warn_about_a_safe_server_or_cluster(redis_url):
    assert _client_warnings(redis_url, clients=1) == []


def _state(client: rmq.Client, topic: str) -> tuple[list, list]:
    """Every stored message, and per slot the sizes by state and the counters."""
    rows = sorted((r.state, r.body) for r in client.snapshot(topic))
    slots = [(s.ready, s.delayed, s.in_flight, s.dead, s.counters)
             for s in client.stats(topic).groups["default"].slots]
    return rows, slots


def _fill_until_refused(server: RedisServer, client: rmq.Client, topic: str) -> int:
    """Lower maxmemory to just above what is used, then send until Redis refuses."""
    with server.client() as r:
        r.config_set("maxmemory", r.info("memory")["used_memory"] + 200_000)
    for n in range(1000):
        try:
            client.send(topic, b"%06d" % n + b"x" * 20_000)
        except RedisOutOfMemory:
            return n
    raise AssertionError("Redis never ran out of memory")


def test_out_of_memory_is_a_clear_error_and_the_refused_send_writes_nothing(fresh_server):
    server = fresh_server()
    client = rmq.Client(server.url)
    client.create_topic("t", slots=4)
    stored = _fill_until_refused(server, client, "t")
    with server.client() as r:
        r.config_set("maxmemory", 0)  # read the state without limits in the way
    before = _state(client, "t")
    with server.client() as r:
        r.config_set("maxmemory", 1)
    with pytest.raises(RedisOutOfMemory, match="out of memory"):
        client.send("t", b"one more")
    with pytest.raises(RedisOutOfMemory):
        client.send_many("t", [b"a", b"b", b"c", b"d"])
    with server.client() as r:
        r.config_set("maxmemory", 0)
    assert _state(client, "t") == before
    assert len(before[0]) == stored
    client.close()


def test_consumers_can_drain_a_redis_that_is_out_of_memory(fresh_server):
    """Acknowledging frees memory, so claim and ack must work when sends are refused."""
    server = fresh_server()
    client = rmq.Client(server.url)
    client.create_topic("t", slots=4)
    # Load the consuming scripts first: the Lua VM's memory counts toward maxmemory too.
    client.send("t", b"warm-up")
    client.ack(client.claim("t"))
    client.stats("t")
    stored = _fill_until_refused(server, client, "t")
    assert client.stats("t").groups["default"].ready == stored
    drained = 0
    while batch := client.claim("t", count=10):
        drained += client.ack(batch)
    assert drained == stored
    client.send("t", b"room again")  # acknowledging made room
    client.close()


def test_a_full_redis_that_lacks_the_library_is_drained_through_the_plain_scripts(
        fresh_server):
    """A client whose Functions library a full Redis lacks (a new RMQ version started during
    the incident, or a FUNCTION FLUSH) cannot load it: FUNCTION LOAD is refused out of
    memory. It claims and acknowledges through the plain scripts instead, which their
    allow-oom flag lets run."""
    server = fresh_server()
    client = rmq.Client(server.url)
    client.create_topic("t", slots=4)
    stored = _fill_until_refused(server, client, "t")
    client.close()
    with server.client() as r:
        r.execute_command("FUNCTION", "FLUSH")
        r.config_set("maxmemory", 1)
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            r.execute_command("FUNCTION", "LOAD", script("claim").library.source)

    async def drain_one() -> int:  # the asyncio client's executor, the same way
        fresh = await rmq.AsyncClient.connect(server.url)
        try:
            return await fresh.ack(await fresh.claim("t", count=1))
        finally:
            await fresh.close()

    drained = asyncio.run(drain_one())
    with rmq.Client(server.url) as fresh:
        while batch := fresh.claim("t", count=10):
            drained += fresh.ack(batch)
        assert drained == stored
        with pytest.raises(RedisOutOfMemory):
            fresh.send("t", b"still full")


def test_a_consumer_starts_on_a_full_redis_when_its_group_is_bound(fresh_server):
    """Binding a bound group writes nothing, so a new consumer can help drain a full Redis."""
    server = fresh_server()
    client = rmq.Client(server.url)
    client.create_topic("t", slots=4)
    client.bind("t", "workers")
    client.send("t", b"warm-up")  # load the consuming scripts before memory runs out
    client.ack(client.claim("t", "workers"))
    client.stats("t")
    stored = _fill_until_refused(server, client, "t")
    handled: list[bytes] = []
    with rmq.Client(server.url) as fresh:
        consumer = rmq.Consumer(fresh, "t", lambda m: handled.append(m.body),
                                group="workers").start()
        try:
            wait_for(lambda: len(handled) == stored, timeout=30, what="the backlog drained")
        finally:
            consumer.stop()
    client.close()
