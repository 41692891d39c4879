"""Packing commands for the wire in one hiredis call, without redis-py's pass over every
argument.

A script call carries the keys of every slot it touches and, for an ack, the id of every
delivery it settles: a ``claim(100)`` and its ``ack`` on 8 slots send close to 300 arguments.
redis-py looks at each of them before packing. Its sync serializer runs a generator over
them to turn ``bytearray`` and ``memoryview`` into ``bytes`` (then packs with hiredis); its
asyncio connection encodes and joins them one by one in Python. RMQ sends only ``str``,
``bytes`` and ``int`` (``outgoing.py`` turns a ``bytearray`` or ``memoryview`` body into
``bytes``), which ``hiredis.pack_command`` packs as they are, byte for byte as redis-py
would. Client instructions under callgrind, per message of ``claim(100)`` + ``ack``: 30.0 k
-> 25.8 k with the sync client, 51.5 k -> 30.5 k with the asyncio one (CHANGELOG.md).

A command whose name is not one word (redis-py's own ``"CLUSTER SLOTS"``, which it splits)
or with an argument hiredis refuses takes redis-py's own path, so what reaches Redis is
unchanged. hiredis encodes text as strict UTF-8, redis-py's default: a client given another
``encoding`` (or ``encoding_errors``) keeps redis-py's packing, which may honour it. Single-node
clients only: redis-py's cluster clients take neither a packer nor a connection class of ours.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from typing import Any

import hiredis
import redis.asyncio as aredis
from redis.connection import HiredisRespSerializer

__all__ = ["Packer", "pack_async", "packs_alike"]


def packs_alike(options: Mapping[str, Any]) -> bool:
    """Whether packing as here sends what redis-py would for a client of these options."""
    return (codecs.lookup(options.get("encoding", "utf-8")).name == "utf-8"
            and options.get("encoding_errors", "strict") == "strict")


def _packed(args: tuple[Any, ...]) -> list[bytes] | None:
    """The command in one piece, or None where redis-py must pack it."""
    name = args[0]
    if isinstance(name, str) and name.isalpha():
        try:
            return [hiredis.pack_command(args)]
        except TypeError:  # an argument hiredis does not pack: redis-py says what is wrong
            return None
    return None


class Packer(HiredisRespSerializer):
    """A sync connection's ``command_packer``."""

    def pack(self, *args: Any) -> list[bytes]:
        return _packed(args) or super().pack(*args)


class _AsyncPacking:
    """Mixed in ahead of a redis-py asyncio connection class."""

    def pack_command(self, *args: Any) -> list[bytes]:
        return _packed(args) or super().pack_command(*args)  # type: ignore[misc]


# redis-py's three kinds of asyncio connection, each with the packing above ahead of it
_PACKING: dict[type[Any], type[Any]] = {
    kind: type(kind.__name__, (_AsyncPacking, kind), {})
    for kind in (aredis.Connection, aredis.SSLConnection, aredis.UnixDomainSocketConnection)}


def pack_async(pool: aredis.ConnectionPool) -> None:
    """Make the connections ``pool`` opens from now on pack as above, if they are of one of
    redis-py's three kinds. (redis-py picks the kind from the URL's scheme, over one passed
    to it: the pool's is replaced instead.)"""
    pool.connection_class = _PACKING.get(pool.connection_class, pool.connection_class)
