"""Redis server processes RMQ runs itself: the embedded default server (``rmq server``,
``Client()`` with no URL) and the servers the tools and tests start."""

from .process import (
    INSTALL_HINT,
    RedisServer,
    TLSFiles,
    WaitTimedOut,
    check_version,
    embedded_server,
    ensure_embedded,
    find_server_binary,
    free_port,
    run_tool,
    wait_until,
)

__all__ = ["INSTALL_HINT", "RedisServer", "TLSFiles", "WaitTimedOut", "check_version",
           "embedded_server", "ensure_embedded", "find_server_binary", "free_port", "run_tool",
           "wait_until"]
