"""Connecting to Redis and executing the operations' batches of calls.

- No URL and no ``RMQ_REDIS_URL``: the embedded server (``rmq.server.ensure_embedded``).
- A URL of a cluster node: detected (``INFO cluster``) and served by ``RedisCluster``.
- Connection errors are retried with exponential backoff for a bounded time, then raised
  as :class:`~rmq.errors.RedisUnavailable`; refused credentials and untrusted certificates
  are raised as that at once (retrying cannot cure them); Redis's OOM refusal becomes
  :class:`~rmq.errors.RedisOutOfMemory`. Every script declares itself a writer (``#!lua``),
  so Redis refuses it whole under OOM: nothing is half-written.

On a single node a batch is pipelined into one round trip. On a cluster each script call goes
alone to its slot's node: redis-py's cluster pipeline does not carry EVALSHA reliably.
"""

from __future__ import annotations

import os
import re
import ssl
import warnings
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AuthenticationError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ..errors import AccessDenied, InvalidURL, RedisOutOfMemory, RedisUnavailable
from ..storage.calls import Call

__all__ = ["resolve_url", "check_url", "connect", "SyncExecutor", "is_cluster", "map_errors",
           "retry_policy", "is_permanent"]

_TRANSIENT = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)
# About 10 s of reconnect attempts (50 ms doubling to 1 s) before RedisUnavailable.
RETRY_ATTEMPTS = 14


def is_permanent(error: BaseException) -> bool:
    """A connection error that retrying cannot cure: Redis refused the credentials, or its
    TLS certificate is not signed by a trusted CA."""
    if isinstance(error, AuthenticationError):
        return True
    cause = error.__cause__ or error.__context__
    return isinstance(cause, ssl.SSLCertVerificationError) or (
        "CERTIFICATE_VERIFY_FAILED" in str(error))


class _Retry(Retry):
    """redis-py's Retry, except that a permanent error is raised at once, not retried
    for the whole reconnect budget."""

    def call_with_retry(self, do: Any, fail: Any, is_retryable: Any = None,
                        with_failure_count: bool = False) -> Any:
        def retryable(error: Exception) -> bool:
            return not is_permanent(error) and (is_retryable is None or is_retryable(error))

        return super().call_with_retry(do, fail, retryable, with_failure_count)


def retry_policy() -> Retry:
    """A fresh reconnect policy (each connection pool needs its own)."""
    return _Retry(ExponentialBackoff(cap=1.0, base=0.05), RETRY_ATTEMPTS,
                  supported_errors=(RedisConnectionError, RedisTimeoutError, ConnectionError))


def resolve_url(url: str | None) -> str:
    """The URL to use: ``url``, else ``RMQ_REDIS_URL``, else the embedded server's; a URL
    given either way is checked first (:func:`check_url`)."""
    if url:
        return check_url(url)
    env = os.environ.get("RMQ_REDIS_URL")
    if env:
        return check_url(env, "RMQ_REDIS_URL ")
    from ..server import ensure_embedded

    return ensure_embedded()


SCHEMES = ("redis://", "rediss://", "unix://")


def _redacted(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for error messages)."""
    return re.sub(r"^([a-z]+://[^/@:]*:)[^@]*@", r"\1***@", url)


def check_url(url: str, source: str = "") -> str:
    """``url`` if it is a Redis URL redis-py can connect with; else :class:`InvalidURL`
    naming what is wrong (the password masked). ``source`` prefixes the message."""
    shown = f"{source}{_redacted(url)!r}"
    if not url.startswith(SCHEMES):
        raise InvalidURL(f"{shown} is not a Redis URL: use redis://HOST:PORT[/DB], "
                         "rediss://... (TLS) or unix:///PATH/TO/SOCKET")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidURL(f"{shown} is not a valid Redis URL: {exc}") from None
    database = parts.path.strip("/")
    if parts.scheme != "unix" and database and not database.isdigit():
        raise InvalidURL(f"{shown} names database {database!r}: a database is a number "
                         "(redis://HOST:PORT/0)")
    if parts.scheme == "unix" and not parts.path:
        raise InvalidURL(f"{shown} names no socket: use unix:///PATH/TO/SOCKET")
    try:
        pool = redis.ConnectionPool.from_url(url)
        pool.connection_class(**pool.connection_kwargs)  # builds, does not connect
    except TypeError as exc:
        option = re.search(r"keyword argument '([^']+)'", str(exc))
        raise InvalidURL(f"{shown} has an unknown option {option.group(1) if option else exc!r}"
                         " in its query") from None
    except ValueError as exc:
        raise InvalidURL(f"{shown} is not a valid Redis URL: {exc}") from None
    return url


_DATABASE_REFUSALS = ("DB index is out of range", "SELECT is not allowed in cluster mode")


def _database_refused(url: str, error: ResponseError) -> InvalidURL:
    """What to raise when Redis refused the URL's database (SELECT on connecting)."""
    database = redis.connection.parse_url(url).get("db")
    if "cluster" in str(error):
        return InvalidURL(f"{_redacted(url)!r} is a Redis Cluster node, and a cluster has only "
                          "database 0: remove the /DB from the URL")
    return InvalidURL(f"Redis at {_redacted(url)!r} has no database {database} ({error}): use "
                      "one below its `databases` setting (16 by default), such as /0")


def _options(url: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    # No command of RMQ blocks in Redis (waiting is pub/sub with its own timeout), so a
    # read that takes 30 s is a dead connection: time out and reconnect, never hang.
    options: dict[str, Any] = {"retry": retry_policy(), "health_check_interval": 30,
                               "socket_timeout": 30.0, "socket_connect_timeout": 5.0}
    if not url.startswith("unix://"):
        options["socket_keepalive"] = True  # redis-py's unix socket connection refuses it
    options.update(kwargs)
    options["decode_responses"] = False  # bodies are bytes
    return options


def is_cluster(url: str, **kwargs: Any) -> bool:
    probe = redis.Redis.from_url(url, **_options(url, kwargs))
    try:
        with map_errors():
            return probe.info("cluster").get("cluster_enabled") == 1
    finally:
        probe.close()


def connect(url: str | None = None, **kwargs: Any) -> redis.Redis | redis.RedisCluster:
    """A redis-py client for ``url`` (see module doc), checked for a safe configuration."""
    url = resolve_url(url)
    try:
        if url.startswith(("redis://", "rediss://")) and is_cluster(url, **kwargs):
            client: Any = redis.RedisCluster.from_url(url, **_options(url, kwargs))
        else:
            client = redis.Redis.from_url(url, **_options(url, kwargs))
        _warn_if_unsafe(client)
    except ResponseError as exc:
        if not str(exc).startswith(_DATABASE_REFUSALS):
            raise
        raise _database_refused(url, exc) from None
    return client


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
        except (ResponseError, RedisUnavailable) as exc:
            if str(exc).startswith(_DATABASE_REFUSALS):
                raise  # the URL's database does not exist: connect() says so
            return  # CONFIG may be forbidden by ACL; the URL may still be fine for queue work
        where = _name(node)
        policy = _text(config.get("maxmemory-policy", "noeviction"))
        if policy != "noeviction" and (where, "evict") not in _warned:
            _warned.add((where, "evict"))
            warnings.warn(f"Redis at {where} has maxmemory-policy {policy!r}: it may evict "
                          "queued messages; set it to 'noeviction'", RuntimeWarning,
                          stacklevel=3)
        if not aof and not _text(config.get("save", "")).strip() and (
                where, "persist") not in _warned:
            _warned.add((where, "persist"))
            warnings.warn(f"Redis at {where} has no append-only file and no snapshots: a "
                          "restart loses every queued message; set appendonly yes",
                          RuntimeWarning, stacklevel=3)


class map_errors:  # noqa: N801 - used as a context manager, reads as a phrase
    """Turn redis-py's connection and OOM errors into RMQ's typed errors."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: Any) -> bool:
        if exc is None:
            return False
        if isinstance(exc, _TRANSIENT) and is_permanent(exc):
            raise RedisUnavailable(f"Redis refused the connection (not retried): {exc}") from exc
        if isinstance(exc, _TRANSIENT):
            raise RedisUnavailable(f"Redis is unreachable after retrying: {exc}") from exc
        # redis-py parses the "OOM" reply into OutOfMemoryError and strips the prefix.
        if isinstance(exc, OutOfMemoryError) or (
                isinstance(exc, ResponseError) and str(exc).startswith("OOM")):
            raise RedisOutOfMemory(f"Redis refused the write, out of memory: {exc}") from exc
        if isinstance(exc, NoPermissionError) or (
                isinstance(exc, ResponseError) and "NOPERM" in str(exc)):
            raise AccessDenied(f"Redis's ACL refused this user: {exc}") from exc
        return False


class SyncExecutor:
    """Executes batches of :class:`Call` on a redis-py client (single node or cluster)."""

    def __init__(self, client: redis.Redis | redis.RedisCluster):
        self.client = client
        self.cluster = isinstance(client, redis.RedisCluster)

    def __call__(self, batch: list[Call]) -> list[Any]:
        with map_errors():
            if self.cluster or len(batch) == 1:
                return [self._one(call) for call in batch]
            return self._pipelined(batch)

    def _one(self, call: Call) -> Any:
        if call.script is None:
            return self.client.execute_command(*call.args)
        try:
            return self.client.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        except NoScriptError:
            # First use on this server, or it restarted: EVAL also caches it for next time.
            return self.client.eval(call.script.source, len(call.keys), *call.keys, *call.args)

    def _pipelined(self, batch: list[Call]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for call in batch:
            if call.script is None:
                pipe.execute_command(*call.args)
            else:
                pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        results = pipe.execute(raise_on_error=False)
        for i, result in enumerate(results):
            if isinstance(result, NoScriptError):
                results[i] = self._one(batch[i])  # it did not run; run it now
            elif isinstance(result, Exception):
                raise result
        return results

