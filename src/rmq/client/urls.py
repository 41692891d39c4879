"""Which Redis a client talks to: the URL given, else ``RMQ_REDIS_URL``, else the embedded
server; a URL is checked before any connection is tried, and named (its password masked)
in every error about it."""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

import redis

from ..errors import InvalidURL

__all__ = ["resolve_url", "check_url", "redacted", "SCHEMES"]


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


def redacted(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for error messages)."""
    return re.sub(r"^([a-z]+://[^/@:]*:)[^@]*@", r"\1***@", url)


def check_url(url: str, source: str = "") -> str:
    """``url`` if it is a Redis URL redis-py can connect with; else :class:`InvalidURL`
    naming what is wrong (the password masked). ``source`` prefixes the message."""
    if not isinstance(url, str):
        raise InvalidURL(f"url must be a Redis URL (str) or None, got {type(url).__name__}")
    shown = f"{source}{redacted(url)!r}"
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
