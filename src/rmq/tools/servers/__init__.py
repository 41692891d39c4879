"""Servers for tests, benchmarks and fault scenarios: a Redis Cluster on loopback, TLS
certificates."""
