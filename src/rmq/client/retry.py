"""The one reconnect policy: connection errors are retried with exponential backoff for a
bounded time (then :func:`~rmq.client.error_map.map_errors` raises
:class:`~rmq.errors.RedisUnavailable`); refused credentials and untrusted certificates are
raised at once, since retrying cannot cure them."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio.retry
import redis.retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["Retry", "AsyncRetry", "retry_policy", "async_retry_policy", "is_permanent",
           "RETRY_ATTEMPTS"]

T = TypeVar("T")

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
