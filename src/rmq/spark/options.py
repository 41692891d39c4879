"""The ``rmq`` data source's options, parsed and checked on the driver before any work starts.

Spark hands every option over as a string, in a case-insensitive dict. Each mode accepts its
own set; an unknown name (a typo such as ``batchsize=`` is fine, ``batch_size=`` is not) fails
the query at once, naming the options the mode accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import InputError

__all__ = ["InvalidOption", "SourceOptions", "parse", "MAX_CLAIM"]

MAX_CLAIM = 10_000  # the most one Client.claim (and one send_many batch here) handles

# Every client of a query waits for this many replicas after each write (rmq.Client's
# replicas, replica_timeout, replica_fsync): a streaming read's claims and acks write too.
_COMMON = ("url", "topic", "replicas", "replicaTimeout", "replicaFsync")
_ACCEPTED = {
    "write": _COMMON + ("batchSize", "reportPath"),
    "read": _COMMON + ("group",),
    "stream": _COMMON + ("group", "batchSize", "lease", "maxPartitions", "recoverInterval"),
}
_DEFAULT_BATCH = {"write": 1000, "stream": 1000}
_SPARKS_OWN = {"checkpointlocation", "path"}  # options Spark passes along to every source


class InvalidOption(InputError):
    """An option of the ``rmq`` data source is missing, unknown or malformed."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What one read or write of the data source was asked to do.

    url: the Redis URL, or None for ``RMQ_REDIS_URL`` / the embedded server (resolved on the
        driver, see :func:`rmq.spark.clients.resolve`).
    topic: the topic to write to or read from.
    group: the group to read (batch read: None means every group; streaming: ``default``).
    batch_size: messages per ``send_many`` call (write) or per micro-batch (streaming read).
    lease: seconds of a streaming read's leases (None: the topic's visibility_timeout).
    max_partitions: at most this many Spark partitions per streaming micro-batch.
    recover_interval: seconds between a streaming read's recoveries of expired leases.
    report_path: a driver-local file where a write records its sent and merged counts.
    replicas, replica_timeout, replica_fsync: as ``rmq.Client``'s (docs/reliability.md,
        "Replicated writes"): every write of the query returns once that many replicas
        hold it, else the task fails with NotReplicated.
    """

    topic: str
    url: str | None = None
    group: str | None = None
    batch_size: int = 1000
    lease: float | None = None
    max_partitions: int = 8
    recover_interval: float = 3.0
    report_path: str | None = None
    replicas: int = 0
    replica_timeout: float = 1.0
    replica_fsync: bool = False


def _number(options: Mapping[str, str], name: str, kind: Callable[[str], float], low: float,
            high: float, default: float | None) -> float | None:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = kind(str(raw).strip())
    except ValueError:
        raise InvalidOption(
            f"option {name}={raw!r} is not {'an integer' if kind is int else 'a number'}"
        ) from None
    if not low <= value <= high:
        raise InvalidOption(f"option {name}={raw!r} must be from {low:g} to {high:g}")
    return value


def parse(options: Mapping[str, str], mode: str) -> SourceOptions:
    """Check the options of one ``mode`` (``write``, ``read`` or ``stream``).

    Raises :class:`InvalidOption` naming the offending option.
    """
    accepted = _ACCEPTED[mode]
    known = {name.lower() for name in accepted}
    unknown = sorted(name for name in options
                     if name.lower() not in known and name.lower() not in _SPARKS_OWN)
    if unknown:
        raise InvalidOption(
            f"unknown option(s) {unknown} for {'a write' if mode == 'write' else 'a read'} of "
            f"format 'rmq'; accepted: {', '.join(accepted)}"
        )
    topic = options.get("topic")
    if not topic:
        raise InvalidOption("option 'topic' is required: .option('topic', 'name-of-topic')")
    group = options.get("group") or ("default" if mode == "stream" else None)
    batch = _number(options, "batchSize", int, 1, MAX_CLAIM, _DEFAULT_BATCH.get(mode, 1000))
    lease = _number(options, "lease", float, 0.1, 86_400, None)
    partitions = _number(options, "maxPartitions", int, 1, 4096, 8)
    recover = _number(options, "recoverInterval", float, 0.1, 3600, 3.0)
    replicas = _number(options, "replicas", int, 0, 1000, 0)
    replica_timeout = _number(options, "replicaTimeout", float, 0.001, 25, 1.0)
    fsync = str(options.get("replicaFsync") or "false").strip().lower()
    if fsync not in ("true", "false"):
        raise InvalidOption(f"option replicaFsync={options.get('replicaFsync')!r} must be "
                            "true or false")
    return SourceOptions(
        topic=topic,
        url=options.get("url") or None,
        group=group,
        batch_size=int(batch or 1000),
        lease=lease,
        max_partitions=int(partitions or 8),
        recover_interval=float(recover or 3.0),
        report_path=options.get("reportPath") or None,
        replicas=int(replicas or 0),
        replica_timeout=float(replica_timeout or 1.0),
        replica_fsync=fsync == "true",
    )
