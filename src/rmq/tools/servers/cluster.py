"""A Redis Cluster on loopback, built from :class:`rmq.server.RedisServer` nodes with
``redis-cli --cluster create``: for tests, the chaos suite and the benchmark."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import redis

from ...errors import ServerNotFound
from ...server import INSTALL_HINT, RedisServer, find_server_binary, run_tool, wait_until

__all__ = ["Cluster"]

class Cluster:
    """A Redis Cluster of ``masters`` masters with ``replicas`` replicas each, on free ports
    (``appendonly=False`` for throughput runs, like the benchmark's own server)."""

    def __init__(self, masters: int = 3, replicas: int = 0, data_dir: str | Path | None = None,
                 node_timeout_ms: int = 2000, binary: str | None = None,
                 appendonly: bool = True):
        self.binary = binary or find_server_binary()
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="rmq-cluster-"))
        self.replicas = replicas
        # The node timeout is how long a master must be unreachable before its replica takes
        # over, so it sets how long a failover takes.
        extra = {"cluster-node-timeout": str(node_timeout_ms)}
        self.nodes = [RedisServer(data_dir=self.data_dir / f"node-{i}", cluster=True, extra=extra,
                                  binary=self.binary, appendonly=appendonly)
                      for i in range(masters * (1 + replicas))]

    @property
    def url(self) -> str:
        """The URL of a live node, to seed a cluster client with."""
        return next(n.url for n in self.nodes if n.pid is not None)

    def cli_binary(self) -> str:
        """``redis-cli`` (or ``valkey-cli`` for Valkey), next to the server binary or on PATH."""
        names = ["valkey-cli", "redis-cli"] if "valkey" in Path(self.binary).name else \
            ["redis-cli", "valkey-cli"]
        for name in names:
            sibling = Path(self.binary).with_name(name)
            found = str(sibling) if os.access(sibling, os.X_OK) else shutil.which(name)
            if found:
                return found
        raise ServerNotFound(f"building a cluster needs redis-cli; {INSTALL_HINT}")

    def start(self) -> Cluster:
        """Start every node, join them into a cluster and wait until all slots are served."""
        try:
            for node in self.nodes:
                node.start()
            run_tool([self.cli_binary(), "--cluster", "create",
                  *[f"127.0.0.1:{n.port}" for n in self.nodes], "--cluster-replicas",
                  str(self.replicas), "--cluster-yes"], "redis-cli --cluster create")
            self.wait_ok()
            # A replica that has never synced refuses to fail over (its data is too old to
            # trust), so the cluster is not ready until every replica has synced.
            wait_until(lambda: all(n.info("replication").get("master_link_status", "up") == "up"
                                  for n in self.nodes), 30.0, "replicas to sync")
        except BaseException:
            self.stop()
            raise
        return self

    def _healthy(self) -> bool:
        live = [n for n in self.nodes if n.pid is not None]
        live_ports = {n.port for n in live}
        for node in live:
            try:
                with node.client() as c:
                    info, slots = c.cluster("info"), c.cluster("slots")
            except (redis.ConnectionError, redis.TimeoutError):
                return False
            # "ok" alone is not enough: right after a crash nodes still report ok for the
            # dead master's slots until they agree it failed.
            covered = sum(end - start + 1 for start, end, master, *_ in slots
                          if master[1] in live_ports)
            if info["cluster_state"] != "ok" or covered != 16384 or \
                    int(info["cluster_known_nodes"]) != len(self.nodes):
                return False
        return bool(live)

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Wait until every live node reports ``cluster_state:ok`` with all 16384 slots served."""
        wait_until(self._healthy, timeout, "the cluster to serve all 16384 slots")

    def masters(self) -> list[RedisServer]:
        """The live nodes that are masters now (roles change on failover)."""
        return [n for n in self.nodes
                if n.pid is not None and n.info("replication")["role"] == "master"]

    def kill_master(self, i: int = 0) -> RedisServer:
        """SIGKILL the ``i``-th live master, as a crash would; return its node."""
        node = self.masters()[i]
        node.kill()
        return node

    def failover_wait(self, timeout: float = 30.0) -> None:
        """Wait until replicas have taken over every dead master's slots."""
        self.wait_ok(timeout)

    def stop(self) -> None:
        """Kill every node (their data is throwaway) and delete the data if we created it."""
        for node in self.nodes:
            node.kill()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
