"""One error mapping for every round trip: redis-py's connection, OOM, ACL and wrong-type
errors become RMQ's typed errors. Every script that stores new data declares itself a writer
(``#!lua``), so Redis refuses it whole under OOM: nothing is half-written."""

from __future__ import annotations

from typing import Any, Literal

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, OutOfMemoryError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import AccessDenied, RedisOutOfMemory, RedisUnavailable, WrongKeyType
from .retry import is_permanent

__all__ = ["map_errors", "TRANSIENT"]

TRANSIENT = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)


class map_errors:  # noqa: N801 - used as a context manager, reads as a phrase
    """Turn redis-py's connection, OOM, ACL and wrong-type errors into RMQ's typed errors."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: Any) -> Literal[False]:
        if exc is None:
            return False
        if isinstance(exc, TRANSIENT) and is_permanent(exc):
            raise RedisUnavailable(f"Redis refused the connection (not retried): {exc}") from exc
        if isinstance(exc, TRANSIENT):
            raise RedisUnavailable(f"Redis is unreachable after retrying: {exc}") from exc
        # redis-py parses the "OOM" reply into OutOfMemoryError and strips the prefix.
        if isinstance(exc, OutOfMemoryError) or (
                isinstance(exc, ResponseError) and str(exc).startswith("OOM")):
            raise RedisOutOfMemory(f"Redis refused the write, out of memory: {exc}") from exc
        if isinstance(exc, NoPermissionError) or (
                isinstance(exc, ResponseError) and "NOPERM" in str(exc)):
            raise AccessDenied(f"Redis's ACL refused this user: {exc}") from exc
        # a command or key refused inside RMQ's code: Redis says so without NOPERM
        if isinstance(exc, ResponseError) and str(exc).startswith(
                "The user executing the script can't"):
            raise AccessDenied(f"Redis's ACL refused a command of RMQ's code to this user "
                               f"(docs/reliability.md, \"Security\", lists what it needs): "
                               f"{exc}") from exc
        if isinstance(exc, ResponseError) and str(exc).startswith("WRONGTYPE"):
            raise WrongKeyType(f"a key holds another Redis type than RMQ's: {exc}") from exc
        return False
