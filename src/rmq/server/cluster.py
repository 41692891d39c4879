"""A throwaway Redis Cluster on loopback, built from :class:`RedisServer` nodes with
``redis-cli --cluster create``: the clusters ``rmq bench``'s scale-out scenario measures, and
a local cluster (with replicas, if asked) to try an application on."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import redis

from ..errors import ServerNotFound
from .process import (
    INSTALL_HINT,
    RedisServer,
    WaitTimedOut,
    find_server_binary,
    run_tool,
    wait_until,
)

__all__ = ["Cluster", "NodeReplication", "describe_replication"]


@dataclass(frozen=True)
class NodeReplication:
    """What one node's ``INFO replication`` says: enough to tell whether a replica holds
    everything its master has written, and to report it when a failover goes wrong."""

    port: int
    role: str  # "master", "slave", or "?" for a node that did not answer
    offset: int = 0  # master_repl_offset on a master, slave_repl_offset on a replica
    replid: str = ""  # the replication history the offset counts in
    master_port: int | None = None  # a replica's master
    link: str | None = None  # a replica's master_link_status: "up" once it has synced


def describe_replication(states: Mapping[int, NodeReplication]) -> str:
    """One part per master: its offset, and each of its replicas' link and lag behind it
    (bytes of the replication stream the replica lacked when read; "caught up" when it had
    all the master had when the master was read); then the nodes that fit no live master."""
    masters = {s.port: s for s in states.values() if s.role == "master"}
    parts = {port: f"{port} master at {m.offset}" for port, m in masters.items()}
    others = []
    for node in states.values():
        master = masters.get(node.master_port or 0)
        if node.role == "?":
            others.append(f"{node.port} did not answer")
        elif node.role == "slave" and master is None:
            others.append(f"{node.port} replica of {node.master_port} (no live master) "
                          f"link {node.link} at {node.offset}")
        elif node.role == "slave" and master is not None:
            lag = master.offset - node.offset
            state = f"{lag} behind" if lag > 0 else "caught up"
            history = "" if node.replid == master.replid else ", another history"
            parts[master.port] += (f" <- {node.port} link {node.link} at {node.offset} "
                                   f"({state}{history})")
    return "; ".join([*parts.values(), *others])


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
        """Start every node, join them into a cluster and wait until all slots are served
        and every replica replicates its master."""
        try:
            for node in self.nodes:
                node.start()
            run_tool([self.cli_binary(), "--cluster", "create",
                  *[f"127.0.0.1:{n.port}" for n in self.nodes], "--cluster-replicas",
                  str(self.replicas), "--cluster-yes"], "redis-cli --cluster create")
            self.wait_ok()
            # A replica that has never synced refuses to fail over (its data is too old to
            # trust), so the cluster is not ready until every replica has synced.
            self.wait_replicated()
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
        """Wait until every live node reports ``cluster_state:ok`` with all 16384 slots served
        by live masters (after a master died: until a replica has taken over its slots)."""
        wait_until(self._healthy, timeout, "the cluster to serve all 16384 slots")

    def replication(self) -> dict[int, NodeReplication]:
        """Each live node's replication state now, by port (role "?" if it did not answer
        within a second: a stopped process must not stall a report). The nodes are read one
        after another, so a replica read after its master may be further on than the
        master's offset as read."""
        states = {}
        for node in (n for n in self.nodes if n.pid is not None):
            try:
                with node.client(socket_timeout=1, socket_connect_timeout=1) as c:
                    info = c.info("replication")
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                states[node.port] = NodeReplication(node.port, "?")
                continue
            replica = info["role"] == "slave"
            states[node.port] = NodeReplication(
                node.port, info["role"],
                int(info.get("slave_repl_offset" if replica else "master_repl_offset", 0)),
                str(info.get("master_replid", "")),
                int(info["master_port"]) if replica else None,
                str(info.get("master_link_status")) if replica else None)
        return states

    def wait_replicated(self, timeout: float = 30.0) -> None:
        """Wait until every master has its ``replicas`` replicas and each of them holds
        everything its master had written when this was called: linked
        (``master_link_status:up``), in its master's replication history, and at least at
        the offset the master had then. Meant for a whole cluster (every node alive).

        A node whose INFO has no ``master_link_status`` is not a synced replica: it is a
        master, or a replica-to-be that ``CLUSTER REPLICATE`` has not reached (redis-cli
        ignores a replica's failed ``CLUSTER REPLICATE``), so the count of masters and of
        each one's replicas is checked too. The offsets matter once data exists: a link
        that is up says nothing about how far behind the replica is (replication is
        asynchronous), and a master that dies before its replica has a write loses it."""
        targets: dict[int, int] = {}  # each master's offset when first seen here
        masters_wanted = len(self.nodes) // (1 + self.replicas)

        def replicated() -> bool:
            states = self.replication()
            masters = [s for s in states.values() if s.role == "master"]
            for master in masters:
                targets.setdefault(master.port, master.offset)
            if len(states) != len(self.nodes) or len(masters) != masters_wanted:
                return False
            for master in masters:
                replicas = [s for s in states.values() if s.master_port == master.port]
                if len(replicas) != self.replicas or not all(
                        r.link == "up" and r.replid == master.replid
                        and r.offset >= targets[master.port] for r in replicas):
                    return False
            return True

        try:
            wait_until(replicated, timeout, "every replica to hold its master's writes")
        except WaitTimedOut as exc:
            raise WaitTimedOut(f"{exc}: {describe_replication(self.replication())}") from None

    def masters(self) -> list[RedisServer]:
        """The live nodes that are masters now (roles change on failover)."""
        return [n for n in self.nodes
                if n.pid is not None and n.info("replication")["role"] == "master"]

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
