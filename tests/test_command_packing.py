"""Packing commands for the wire (``rmq.client.packing``): RMQ packs each command in one
hiredis call, and what it sends must be byte for byte what redis-py would have sent, for
anything a caller can pass. Then the wiring: a single-node client, sync or asyncio (over TCP,
TLS and a unix socket: redis-py picks its connection class by the URL), packs so, and a
claim and an ack over many slots reach Redis whole. The rest of the suite runs every call
through it too."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from hypothesis import example, given
from hypothesis import strategies as st
from redis.connection import HiredisRespSerializer

import rmq
from rmq.client.packing import Packer, pack_async, packs_alike

NAMES = st.sampled_from(["FCALL", "EVALSHA", "HSET", "PING", "CLUSTER SLOTS", "CONFIG GET",
                         b"FCALL", b"CLIENT SETINFO", "fcall"])
ARGUMENTS = st.lists(st.one_of(
    st.binary(max_size=40), st.text(max_size=20), st.integers(-2**63, 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.binary(max_size=40).map(bytearray), st.binary(max_size=40).map(memoryview),
    st.binary(min_size=7000, max_size=7000),  # past asyncio's 6 kB chunking
    st.booleans(), st.none()), max_size=12)  # what redis-py refuses, RMQ must refuse alike


def _async_packer() -> aredis.Connection:
    pool = aredis.ConnectionPool()
    pack_async(pool)
    return pool.make_connection()


def _outcome(pack: Any, command: tuple[Any, ...]) -> tuple[str, Any]:
    """What packing ``command`` gives: its bytes, or the error it raises."""
    try:
        return "packed", b"".join(pack(*command))
    except redis.DataError as error:
        return "refused", str(error)


@given(NAMES, ARGUMENTS)
@example("FCALL", ["rmq_f", 2, "rmq:{t:0}:seq", b"\x00key", 1700000000000, -5])
def test_commands_are_packed_byte_for_byte_as_redis_py_packs_them(name: Any, args: list[Any]):
    command = (name, *args)
    assert (_outcome(Packer().pack, command)
            == _outcome(HiredisRespSerializer().pack, command))
    assert (_outcome(_async_packer().pack_command, command)
            == _outcome(aredis.Connection().pack_command, command))


@pytest.mark.parametrize("bad", [None, object(), ["a", "list"]])
def test_an_argument_redis_py_refuses_is_refused_as_redis_py_refuses_it(bad: Any):
    with pytest.raises(redis.DataError) as ours:
        Packer().pack("FCALL", "f", 0, bad)
    with pytest.raises(redis.DataError) as theirs:
        HiredisRespSerializer().pack("FCALL", "f", 0, bad)
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(redis.DataError) as ours:
        _async_packer().pack_command("FCALL", "f", 0, bad)
    with pytest.raises(redis.DataError) as theirs:
        aredis.Connection().pack_command("FCALL", "f", 0, bad)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.single_node  # redis-py's cluster clients take no packer: they pack as before
def test_a_sync_client_packs_its_commands_so_and_they_reach_redis_whole(redis_url: str):
    with rmq.Client(redis_url) as client:
        assert isinstance(client.redis.connection_pool.connection_kwargs["command_packer"],
                          Packer)
        client.create_topic("packed", slots=64)
        client.send_many("packed", [b"m%d" % i for i in range(300)])
        assert client.ack(client.claim("packed", count=300)) == 300
        assert client.stats("packed").groups["default"].counters["acked"] == 300


async def _claim_and_ack(url: str, **options: Any) -> tuple[type, int, int]:
    """A claim and an ack of 300 messages over 64 slots through an AsyncClient: its pool's
    connection class, the count the ack returned and the acked counter."""
    async with rmq.AsyncClient(url, **options) as client:
        await client.create_topic("packed", slots=64)
        try:
            await client.send_many("packed", [b"m%d" % i for i in range(300)])
            acked = await client.ack(await client.claim("packed", count=300))
            stats = await client.stats("packed")
        finally:
            await client.delete_topic("packed")
        assert client.redis is not None
        return client.redis.connection_pool.connection_class, acked, \
            stats.groups["default"].counters["acked"]


@pytest.mark.single_node
def test_an_asyncio_client_packs_its_commands_so_and_they_reach_redis_whole(
        redis_url: str, tls_acl_server: Any, fresh_server: Any, tmp_path: Path):
    unix = fresh_server(port=0, unixsocket=tmp_path / "r.sock")
    for url, options, redis_kind in [
            (redis_url, {}, aredis.Connection),
            (tls_acl_server.url, {"password": tls_acl_server.password,
                                  "ssl_ca_certs": str(tls_acl_server.ca_cert)},
             aredis.SSLConnection),
            (unix.url, {}, aredis.UnixDomainSocketConnection)]:
        kind, acked, counted = asyncio.run(_claim_and_ack(url, **options))
        assert issubclass(kind, redis_kind) and kind.__module__ == "rmq.client.packing", url
        assert acked == counted == 300, url


@pytest.mark.parametrize(("options", "alike"), [
    ({}, True), ({"encoding": "UTF8"}, True), ({"encoding": "utf_8"}, True),
    ({"encoding": "latin-1"}, False), ({"encoding_errors": "replace"}, False)])
def test_a_client_given_another_text_encoding_keeps_redis_pys_packing(
        options: dict[str, str], alike: bool):
    # hiredis encodes text as strict UTF-8; redis-py's asyncio connection (and its sync one
    # without hiredis) as it is told
    assert packs_alike(options) is alike


@pytest.mark.single_node
def test_a_client_told_to_encode_text_as_latin_1_is_left_to_redis_py(redis_url: str):
    with rmq.Client(redis_url, encoding="latin-1") as client:
        assert "command_packer" not in client.redis.connection_pool.connection_kwargs

    async def set_async() -> type:
        async with rmq.AsyncClient(redis_url, encoding="latin-1") as client:
            assert client.redis is not None
            await client.redis.execute_command("SET", "packed:async", "é")
            return client.redis.connection_pool.connection_class

    assert asyncio.run(set_async()) is aredis.Connection
    with redis.Redis.from_url(redis_url) as plain:
        assert plain.get("packed:async") == "é".encode("latin-1")
