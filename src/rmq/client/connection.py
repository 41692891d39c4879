"""Connecting to Redis and executing the operations' batches of calls, for both clients.

- No URL and no ``RMQ_REDIS_URL``: the embedded server (``rmq.server.ensure_embedded``).
- A URL of a cluster node: detected (``INFO cluster``) and served by ``RedisCluster``.
- One retry policy: connection errors are retried with exponential backoff for a bounded
  time, then raised as :class:`~rmq.errors.RedisUnavailable`; refused credentials and
  untrusted certificates are raised at once (retrying cannot cure them).
- One error mapping (:class:`map_errors`): Redis's OOM refusal becomes
  :class:`~rmq.errors.RedisOutOfMemory`, an ACL refusal :class:`~rmq.errors.AccessDenied`.
  Every script that stores new data declares itself a writer (``#!lua``), so Redis refuses
  it whole under OOM: nothing is half-written.
- One executor per client kind (:class:`Executor`, :class:`AsyncExecutor`): on a single node
  a batch is pipelined into one round trip; a cluster has its own (``cluster.py``: one
  pipeline per master, all masters at once).
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import redis
import redis.asyncio as aredis
import redis.asyncio.retry
import redis.retry
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

from ..errors import AccessDenied, InvalidURL, RedisOutOfMemory, RedisUnavailable, WrongKeyType
from ..storage.calls import Call
from .fallback import (
    functions_refused,
    is_code_missing,
    loaded_anyway,
    no_code_runs,
    not_run,
    scripts_refused,
)
from .packing import Packer, pack_async, packs_alike
from .replication import PRIMARY_ONLY, Replication

__all__ = ["resolve_url", "check_url", "connect", "open_async", "open_async_node", "Executor",
           "AsyncExecutor", "AsyncRedis", "map_errors", "retry_policy", "async_retry_policy",
           "is_permanent"]

AsyncRedis = aredis.Redis | aredis.RedisCluster
T = TypeVar("T")

_TRANSIENT = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)
_RETRIED = (RedisConnectionError, RedisTimeoutError, ConnectionError)
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


class _Permanent(Exception):
    """Carries a permanent error out of redis-py's retry loop, which does not retry it (it is
    not one of the retried errors). Every redis-py version has that loop; only newer ones
    take an ``is_retryable`` argument, so this works on all of them."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


class Retry(redis.retry.Retry):
    """redis-py's Retry, except that a permanent error is raised at once, not retried for the
    whole reconnect budget."""

    def call_with_retry(self, do: Callable[[], T], fail: Any, *args: Any, **kwargs: Any) -> T:
        def attempt() -> T:
            try:
                return do()
            except Exception as error:
                if is_permanent(error):
                    raise _Permanent(error) from error
                raise

        try:
            return super().call_with_retry(attempt, fail, *args, **kwargs)
        except _Permanent as escaped:
            permanent = escaped.error
        raise permanent  # outside the except block: keeps the error's own cause and context


class AsyncRetry(redis.asyncio.retry.Retry):
    """:class:`Retry` for ``redis.asyncio``."""

    async def call_with_retry(self, do: Callable[[], Awaitable[T]], fail: Any, *args: Any,
                              **kwargs: Any) -> T:
        async def attempt() -> T:
            try:
                return await do()
            except Exception as error:
                if is_permanent(error):
                    raise _Permanent(error) from error
                raise

        try:
            return await super().call_with_retry(attempt, fail, *args, **kwargs)
        except _Permanent as escaped:
            permanent = escaped.error
        raise permanent


def retry_policy(attempts: int = RETRY_ATTEMPTS) -> Retry:
    """A fresh reconnect policy (each connection pool needs its own)."""
    return Retry(ExponentialBackoff(cap=1.0, base=0.05), attempts, supported_errors=_RETRIED)


def async_retry_policy(attempts: int = RETRY_ATTEMPTS) -> AsyncRetry:
    """:func:`retry_policy` for ``redis.asyncio``."""
    # redis.asyncio's Retry annotates its errors as RedisError subclasses, but catches any
    # exception class it is given (as the sync Retry's annotation says).
    return AsyncRetry(ExponentialBackoff(cap=1.0, base=0.05), attempts,
                      supported_errors=_RETRIED)  # type: ignore[arg-type]


def resolve_url(url: str | None) -> str:
    """The URL to use: ``url``, else ``RMQ_REDIS_URL``, else the embedded server's; a URL
    given either way is checked first (:func:`check_url`)."""
    if url is not None and (url or not isinstance(url, str)):  # "" means "not given"
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
    if not isinstance(url, str):
        raise InvalidURL(f"url must be a Redis URL (str) or None, got {type(url).__name__}")
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


class map_errors:  # noqa: N801 - used as a context manager, reads as a phrase
    """Turn redis-py's connection, OOM, ACL and wrong-type errors into RMQ's typed errors."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: Any) -> Literal[False]:
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
        if isinstance(exc, ResponseError) and str(exc).startswith("WRONGTYPE"):
            raise WrongKeyType(f"a key holds another Redis type than RMQ's: {exc}") from exc
        return False


def _fcall_args(call: Call) -> tuple[Any, ...]:
    assert call.script is not None
    return ("FCALL", call.script.function, len(call.keys), *call.keys, *call.args)


def _evalsha_args(call: Call) -> tuple[Any, ...]:
    assert call.script is not None
    return ("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args)


def _eval_args(call: Call) -> tuple[Any, ...]:
    assert call.script is not None
    return ("EVAL", call.script.source, len(call.keys), *call.keys, *call.args)


def _queue(pipe: Any, batch: list[Call], functions: bool) -> None:
    for call in batch:
        if call.script is None:
            pipe.execute_command(*call.args)
        else:
            pipe.execute_command(*(_fcall_args(call) if functions else _evalsha_args(call)))


class Executor:
    """Executes batches of :class:`Call` on a single node's redis-py client: one pipeline.

    Scripts run as functions of RMQ's library (``FCALL``), loaded on first use; once Redis
    refuses this user functions (``functions`` False), as scripts (``EVALSHA``, then
    ``EVAL`` where the server lacks one): ``fallback.py`` tells the ladder's steps,
    ``storage/scripts.py`` why both forms."""

    def __init__(self, client: redis.Redis, replication: Replication = PRIMARY_ONLY):
        self.client = client
        self.functions = True
        self.replication = replication

    def __call__(self, batch: list[Call]) -> list[Any]:
        with map_errors():
            waits = self.replication.waits(batch)  # replication.py: WAIT after a write
            calls = batch + waits
            if len(calls) == 1:
                return [self._one(calls[0])]
            pipe = self.client.pipeline(transaction=False)
            _queue(pipe, calls, self.functions)
            results: list[Any] = pipe.execute(raise_on_error=False)
            missing = not_run(results)
            rerun = Executor(self.client.client(), self.replication) if missing and waits else self
            try:  # a WAIT covers its own connection's writes: re-runs and it share one
                rerun.functions = self.functions
                for i in missing + (list(range(len(batch), len(calls))) if rerun is not self
                                    else []):
                    results[i] = rerun._one(calls[i])
            finally:
                self.functions = rerun.functions
                if rerun is not self:
                    rerun.client.close()
            if waits and (error := self.replication.shortfall(batch, results[len(batch):],
                                                              results[:len(batch)])):
                raise error
            return results[:len(batch)] if waits else results

    def _one(self, call: Call) -> Any:
        if call.script is None:
            return self.client.execute_command(*call.args)
        if self.functions:
            try:
                return self.client.execute_command(*_fcall_args(call))
            except ResponseError as error:
                if not (is_code_missing(error) or functions_refused(error)):
                    raise
                self.functions = not functions_refused(error) and self._load(call)
            if self.functions:
                return self.client.execute_command(*_fcall_args(call))
        try:
            try:
                return self.client.execute_command(*_evalsha_args(call))
            except NoScriptError:  # EVAL also caches the script for next time
                return self.client.execute_command(*_eval_args(call))
        except ResponseError as error:
            if not scripts_refused(error):
                raise
            self.functions = True  # the library may be loaded by the next call (fallback.py)
            raise no_code_runs(call, error) from error

    def _load(self, call: Call) -> bool:
        """Load RMQ's library; False when Redis will not (:func:`load_refused`)."""
        assert call.script is not None
        try:
            self.client.execute_command("FUNCTION", "LOAD", call.script.library.source)
        except ResponseError as error:
            return loaded_anyway(error)
        return True


class AsyncExecutor:
    """:class:`Executor` on a single node's ``redis.asyncio`` client."""

    def __init__(self, client: aredis.Redis, replication: Replication = PRIMARY_ONLY):
        self.client = client
        self.functions = True
        self.replication = replication

    async def __call__(self, batch: list[Call]) -> list[Any]:
        with map_errors():
            waits = self.replication.waits(batch)  # replication.py: WAIT after a write
            calls = batch + waits
            if len(calls) == 1:
                return [await self._one(calls[0])]
            pipe = self.client.pipeline(transaction=False)
            _queue(pipe, calls, self.functions)
            results: list[Any] = await pipe.execute(raise_on_error=False)
            missing = not_run(results)
            rerun = (AsyncExecutor(self.client.client(), self.replication) if missing and waits
                     else self)
            try:  # as Executor: re-runs and their WAIT share one connection
                rerun.functions = self.functions
                for i in missing + (list(range(len(batch), len(calls))) if rerun is not self
                                    else []):
                    results[i] = await rerun._one(calls[i])
            finally:
                self.functions = rerun.functions
                if rerun is not self:
                    await rerun.client.aclose()
            if waits and (error := self.replication.shortfall(batch, results[len(batch):],
                                                              results[:len(batch)])):
                raise error
            return results[:len(batch)] if waits else results

    async def _one(self, call: Call) -> Any:
        if call.script is None:
            return await self.client.execute_command(*call.args)
        if self.functions:
            try:
                return await self.client.execute_command(*_fcall_args(call))
            except ResponseError as error:
                if not (is_code_missing(error) or functions_refused(error)):
                    raise
                self.functions = not functions_refused(error) and await self._load(call)
            if self.functions:
                return await self.client.execute_command(*_fcall_args(call))
        try:
            try:
                return await self.client.execute_command(*_evalsha_args(call))
            except NoScriptError:  # EVAL also caches the script for next time
                return await self.client.execute_command(*_eval_args(call))
        except ResponseError as error:
            if not scripts_refused(error):
                raise
            self.functions = True  # the library may be loaded by the next call (fallback.py)
            raise no_code_runs(call, error) from error

    async def _load(self, call: Call) -> bool:
        assert call.script is not None
        try:
            await self.client.execute_command("FUNCTION", "LOAD", call.script.library.source)
        except ResponseError as error:
            return loaded_anyway(error)
        return True
