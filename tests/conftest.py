"""Shared fixtures: real Redis servers from ``tests/servers.py``."""

from servers import (
    cluster,
    cluster_url,
    fresh_server,
    isolated_environment,
    redis_server,
    redis_url,
    tls_acl_server,
)

__all__ = ["isolated_environment", "redis_server", "redis_url", "cluster", "cluster_url",
           "tls_acl_server", "fresh_server"]
