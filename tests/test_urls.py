"""The client checks a Redis URL before it connects: a URL it cannot use raises
:class:`~rmq.errors.InvalidURL` (an input error) naming what is wrong, never redis-py's
ValueError or TypeError from deep inside a connection, and never the password."""

from __future__ import annotations

import pytest

import rmq
from rmq.errors import InputError, InvalidURL


@pytest.mark.parametrize(("url", "words"), [
    ("http://127.0.0.1:6379", "is not a Redis URL"),
    ("127.0.0.1:6379", "is not a Redis URL"),
    ("redis://127.0.0.1:port", "Port could not be cast"),
    ("redis://127.0.0.1:70000", "Port out of range"),
    ("redis://127.0.0.1:6379/zero", "names database 'zero'"),
    ("redis://127.0.0.1:6379/0?colour=red", "unknown option 'colour'"),
    ("redis://[::1", "Invalid IPv6 URL"),
    ("unix://", "names no socket"),
])
def test_a_url_the_client_cannot_use_raises_invalid_url(url: str, words: str) -> None:
    with pytest.raises(InvalidURL, match=words) as raised:
        rmq.Client(url)
    assert isinstance(raised.value, InputError | ValueError)


def test_the_password_of_a_bad_url_is_not_in_the_error() -> None:
    with pytest.raises(InvalidURL) as raised:
        rmq.Client("redis://app:s3cret@127.0.0.1:port/0")
    assert "s3cret" not in str(raised.value) and "app:***@" in str(raised.value)


def test_a_database_the_server_lacks_raises_invalid_url(redis_url: str) -> None:
    # A single node has 16 databases; a cluster node refuses every database but 0.
    with pytest.raises(InvalidURL, match="has no database 99|has only database 0"):
        rmq.Client(f"{redis_url}/99")
