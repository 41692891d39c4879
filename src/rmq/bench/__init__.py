"""``rmq bench``: RMQ's speed, memory and latency against Redis Streams and a raw merge-enqueue
Lua call measured in the same run, with exact correctness checks (``--quick`` for CI).

Run ``rmq bench --help`` or ``python -m rmq.bench``.
"""

from .runner import main

__all__ = ["main"]
