"""Connecting: a redis-py client (sync or asyncio) for a URL, a cluster detected and served
by ``RedisCluster``, every server checked for a configuration that could lose messages.

- No URL and no ``RMQ_REDIS_URL``: the embedded server (``rmq.server.ensure_embedded``).
- A URL of a cluster node: detected (``INFO cluster``) and served by ``RedisCluster``.
- Every connection pool gets the one reconnect policy (``retry.py``) and a read timeout.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio as aredis
from redis.exceptions import ResponseError

from ..errors import AccessDenied, InvalidURL, RedisUnavailable
from .error_map import map_errors
from .packing import Packer, pack_async, packs_alike
from .retry import async_retry_policy, retry_policy
from .urls import redacted, resolve_url

__all__ = ["connect", "open_async", "open_async_node", "connect_node", "AsyncRedis"]

AsyncRedis = aredis.Redis | aredis.RedisCluster


_DATABASE_REFUSALS = ("DB index is out of range", "SELECT is not allowed in cluster mode")


def _database_refused(url: str, error: ResponseError) -> InvalidURL:
    """What to raise when Redis refused the URL's database (SELECT on connecting)."""
    database = redis.connection.parse_url(url).get("db")
    if "cluster" in str(error):
        return InvalidURL(f"{redacted(url)!r} is a Redis Cluster node, and a cluster has only "
                          "database 0: remove the /DB from the URL")
    return InvalidURL(f"Redis at {redacted(url)!r} has no database {database} ({error}): use "
                      "one below its `databases` setting (16 by default), such as /0")


def _options(url: str, kwargs: dict[str, Any], retry: Any) -> dict[str, Any]:
    # No command of RMQ blocks in Redis (waiting is pub/sub with its own timeout), so a
    # read that takes 30 s is a dead connection: time out and reconnect, never hang.
    options: dict[str, Any] = {"retry": retry, "health_check_interval": 30,
                               "socket_timeout": 30.0, "socket_connect_timeout": 5.0}
    if not url.startswith("unix://"):
        options["socket_keepalive"] = True  # redis-py's unix socket connection refuses it
    options.update(kwargs)
    options["decode_responses"] = False  # bodies are bytes
    return options


def _is_cluster(url: str, kwargs: dict[str, Any]) -> bool:
    if not url.startswith(("redis://", "rediss://")):
        return False
    probe = redis.Redis.from_url(url, **_options(url, kwargs, retry_policy()))
    try:
        with map_errors():
            return probe.info("cluster").get("cluster_enabled") == 1
    except AccessDenied:
        # An ACL user without INFO: a cluster user has CLUSTER SLOTS (redis-py's cluster
        # client needs it); a single node answers it with an error, as it does a user
        # without it.
        try:
            with map_errors():
                return bool(probe.execute_command("CLUSTER", "SLOTS"))
        except (ResponseError, AccessDenied):
            return False
    finally:
        probe.close()


def connect(url: str | None = None, **kwargs: Any) -> redis.Redis | redis.RedisCluster:
    """A redis-py client for ``url`` (see module doc), checked for a safe configuration.
    ``kwargs`` go to redis-py (a ``retry`` there replaces RMQ's reconnect policy)."""
    url = resolve_url(url)
    try:
        kind: Any = redis.RedisCluster if _is_cluster(url, kwargs) else redis.Redis
        options = _options(url, kwargs, retry_policy())
        if kind is redis.Redis and packs_alike(options):
            options.setdefault("command_packer", Packer())  # packing.py: why
        client: redis.Redis | redis.RedisCluster = kind.from_url(url, **options)
        _warn_if_unsafe(client)
    except ResponseError as exc:
        if not str(exc).startswith(_DATABASE_REFUSALS):
            raise
        raise _database_refused(url, exc) from None
    return client


async def open_async(url: str | None, **kwargs: Any) -> tuple[str, AsyncRedis]:
    """The resolved URL and a ``redis.asyncio`` client for it (cluster detected, the server
    checked as :func:`connect` does). A ``retry`` among ``kwargs`` must be an
    ``redis.asyncio`` Retry."""
    # Resolving may start the embedded server and the check is sync redis-py: it runs once
    # per client, so a thread is cheap enough.
    resolved = await asyncio.to_thread(resolve_url, url)
    sync_options = {k: v for k, v in kwargs.items() if k != "retry"}
    probe = await asyncio.to_thread(connect, resolved, **sync_options)
    kind: Any = aredis.RedisCluster if isinstance(probe, redis.RedisCluster) else aredis.Redis
    probe.close()
    options = _options(resolved, kwargs, async_retry_policy())
    client = kind.from_url(resolved, **options)
    if kind is aredis.Redis and packs_alike(options):
        pack_async(client.connection_pool)  # packing.py: why
    return resolved, client


def open_async_node(url: str, **kwargs: Any) -> aredis.Redis:
    """A ``redis.asyncio`` client of the one server ``url`` names, even if it is a cluster
    node: what a pub/sub subscription needs (redis-py before 8 has no cluster pub/sub for
    asyncio; a cluster forwards every PUBLISH to every node, so any node will do)."""
    return aredis.Redis.from_url(url, **_options(url, kwargs, async_retry_policy()))


def connect_node(url: str, host: str | None = None, port: int | None = None,
                 **kwargs: Any) -> redis.Redis:
    """A client of one connection to one server, speaking RESP2 with no health checks:
    ``url``'s server, or the node ``host:port`` with ``url``'s scheme, user and options (a
    node of its cluster). What a connection needs that keeps state of its own on the server
    (a pub/sub subscription read by hand, ``CLIENT TRACKING``): one that redis-py neither
    shares, swaps nor pings behind its back."""
    if host is not None:
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        where = f"[{host}]" if ":" in host else host
        url = urlunsplit(parts._replace(netloc=f"{user}@{where}:{port}" if user
                                        else f"{where}:{port}"))
    options = _options(url, kwargs, retry_policy())
    options.update(protocol=2, health_check_interval=0, single_connection_client=True)
    return redis.Redis.from_url(url, **options)


_warned: set[tuple[str, str]] = set()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _name(node: redis.Redis) -> str:
    kwargs = node.connection_pool.connection_kwargs
    return str(kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}")


def _warn_if_unsafe(client: Any) -> None:
    """Warn once per server (each node of a cluster) when it could evict queue keys, or
    keeps nothing on disk (no append-only file and no RDB ``save`` rule)."""
    nodes = ([client.get_redis_connection(n) for n in client.get_nodes()]
             if isinstance(client, redis.RedisCluster) else [client])
    for node in nodes:
        try:
            with map_errors():
                config = node.config_get("maxmemory-policy") | node.config_get("save")
                aof = node.info("persistence").get("aof_enabled")
        except (ResponseError, RedisUnavailable, AccessDenied) as exc:
            if str(exc).startswith(_DATABASE_REFUSALS):
                raise  # the URL's database does not exist: connect() says so
            return  # CONFIG may be forbidden by ACL; the URL may still be fine for queue work
        where = _name(node)
        policy = _text(config.get("maxmemory-policy", "noeviction"))
        if policy != "noeviction" and (where, "evict") not in _warned:
            _warned.add((where, "evict"))
            warnings.warn(f"Redis at {where} has maxmemory-policy {policy!r}: it may evict "
                          "queued messages; set it to 'noeviction'", RuntimeWarning,
                          stacklevel=4)
        if not aof and not _text(config.get("save", "")).strip() and (
                where, "persist") not in _warned:
            _warned.add((where, "persist"))
            warnings.warn(f"Redis at {where} has no append-only file and no snapshots: a "
                          "restart loses every queued message; set appendonly yes",
                          RuntimeWarning, stacklevel=4)
