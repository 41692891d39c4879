"""Security (SPEC §7): TLS with a CA the tests generate and an ACL user with a password work
end to end; wrong credentials or an untrusted certificate fail at once with a clear error;
no topic or group name can reach another topic's keys."""

from __future__ import annotations

import re
import threading
import time

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tls import make_tls_files

import rmq
from rmq.errors import AccessDenied, InvalidGroupName, InvalidTopicName, RedisUnavailable

NAME_CHARS = "ABCXYZabcxyz0189._-"
HOSTILE_CHARS = "{}:*?[]\\ \n\t\x00/é" + NAME_CHARS


def _tls_client(server, **options: object) -> rmq.Client:
    return rmq.Client(server.url, password=server.password, ssl_ca_certs=str(server.ca_cert),
                      **options)


def test_acl_user_over_tls_sends_claims_acknowledges_and_is_woken(tls_acl_server):
    with _tls_client(tls_acl_server) as client:
        for name in client.topics():
            client.delete_topic(name)
        client.create_topic("secure", slots=4)
        assert client.send("secure", b"secret").merged is False
        (message,) = client.claim("secure")
        assert message.body == b"secret"
        assert client.ack([message]) == 1
        handled = threading.Event()
        # Recovery polls every 60 s here: only the wake-up channel can deliver within 5 s.
        consumer = rmq.Consumer(client, "secure", lambda m: handled.set(), concurrency=1,
                                recover_interval=60)
        consumer.start()
        try:
            client.send("secure", b"wake up")
            assert handled.wait(5), "the consumer was not woken over TLS"
        finally:
            consumer.stop(grace=5)
        assert client.stats("secure").groups["default"].counters["acked"] == 2


def test_wrong_password_fails_at_once_with_a_clear_error(tls_acl_server):
    began = time.monotonic()
    with pytest.raises(RedisUnavailable, match="refused.*(password|WRONGPASS)"):
        rmq.Client(tls_acl_server.url, password="not-the-password",
                   ssl_ca_certs=str(tls_acl_server.ca_cert)).topics()
    assert time.monotonic() - began < 3, "a refused password must not be retried"


def test_certificate_from_an_unknown_ca_is_refused_at_once(tls_acl_server, tmp_path):
    stranger = make_tls_files(tmp_path / "stranger")
    began = time.monotonic()
    with pytest.raises(RedisUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        rmq.Client(tls_acl_server.url, password=tls_acl_server.password,
                   ssl_ca_certs=str(stranger.ca_cert)).topics()
    assert time.monotonic() - began < 3


def test_the_acl_user_cannot_touch_keys_outside_rmq(tls_acl_server):
    with _tls_client(tls_acl_server) as client, pytest.raises(redis.exceptions.NoPermissionError):
        client.redis.set("not-rmq", 1)


@given(name=st.text(alphabet=HOSTILE_CHARS, max_size=140))
def test_only_names_of_the_documented_charset_are_accepted(name):
    valid = re.fullmatch(r"[A-Za-z0-9._-]{1,128}", name) is not None
    for check, error in ((rmq.settings.check_topic_name, InvalidTopicName),
                         (rmq.settings.check_group_name, InvalidGroupName)):
        if valid:
            assert check(name) == name
        else:
            with pytest.raises(error):
                check(name)


def _hash_tag(key: bytes) -> bytes:
    start = key.index(b"{")
    return key[start + 1 : key.index(b"}", start)]


names = st.text(alphabet=NAME_CHARS, min_size=1, max_size=12)


@pytest.mark.single_node
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topics=st.lists(names, min_size=2, max_size=3, unique=True),
       group=names, hostile=st.text(alphabet=HOSTILE_CHARS, min_size=1, max_size=20))
def test_no_name_reaches_another_topics_keys(redis_url, topics, group, hostile):
    """Every key a topic's messages create carries that topic's own hash tag, and a name
    outside the charset is refused before it reaches Redis."""
    with redis.Redis.from_url(redis_url) as raw:
        raw.flushall()
    with rmq.Client(redis_url) as client:
        for topic in topics:
            client.create_topic(topic, slots=2)
            client.bind(topic, group)
            client.send_many(topic, [f"{topic}-{i}" for i in range(4)])
            (message,) = client.claim(topic, group, count=1)
            client.nack(message, "boom")
        if re.fullmatch(r"[A-Za-z0-9._-]{1,128}", hostile) is None:
            with pytest.raises(InvalidTopicName):
                client.create_topic(hostile)
            with pytest.raises(InvalidGroupName):
                client.bind(topics[0], hostile)
    with redis.Redis.from_url(redis_url) as raw:
        keys = [k for k in raw.scan_iter(count=1000) if k != b"rmq:topics"]
    owners = set()
    for key in keys:
        topic, _, slot = _hash_tag(key).partition(b":")  # names cannot contain ":"
        assert key.startswith(b"rmq:{" + topic) and (slot == b"" or slot.isdigit())
        owners.add(topic)
    assert owners == {t.encode() for t in topics}


def test_a_user_the_acl_keeps_out_of_rmq_keys_gets_access_denied(fresh_server):
    server = fresh_server(users=[("outsider", "pw", "on >pw ~other:* &* +@all")],
                          disable_default_user=True)
    url = server.url.replace("redis://", "redis://outsider:pw@")
    with rmq.Client(url) as client, pytest.raises(AccessDenied, match="ACL refused"):
        client.create_topic("t")
