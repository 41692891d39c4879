"""Redis server processes RMQ runs itself: the embedded default server (``rmq server``,
``Client()`` with no URL), single servers and clusters (``rmq.server.cluster``) that the
benchmark and the tests start."""

from .embedded import (
    EmbeddedStatus,
    embedded_home,
    embedded_server,
    embedded_status,
    ensure_embedded,
    stop_embedded,
)
from .process import (
    INSTALL_HINT,
    RedisServer,
    TLSFiles,
    WaitTimedOut,
    check_version,
    find_server_binary,
    free_port,
    pid_alive,
    run_tool,
    wait_until,
)

__all__ = ["INSTALL_HINT", "EmbeddedStatus", "RedisServer", "TLSFiles", "WaitTimedOut",
           "check_version", "embedded_home", "embedded_server", "embedded_status",
           "ensure_embedded", "find_server_binary", "free_port", "pid_alive", "run_tool",
           "stop_embedded", "wait_until"]
