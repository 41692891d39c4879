"""RMQ's errors as a Spark user meets them.

Spark reports a failure of the data source as the Python traceback of the worker that ran
it, then the error's line. The data source raises an RMQ error again from the method Spark
called, without the frames of the client beneath it, so that traceback is one frame and the
line that names the problem and its fix comes right after it, not twenty lines down.
"""

from __future__ import annotations

from ..errors import RMQError, UnknownTopic

__all__ = ["plainly"]


def plainly(error: RMQError) -> RMQError:
    """``error`` without its traceback, to raise ``from None``; an unknown topic names the
    command that creates it (a job's topics are usually created by whoever runs the queue,
    not by the job)."""
    if isinstance(error, UnknownTopic):
        return UnknownTopic(error.topic, f"create it with `rmq topic create {error.topic}` "
                                         "(or Client.create_topic) before the job runs")
    return error.with_traceback(None)
