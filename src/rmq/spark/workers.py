"""Checking that Spark's Python workers can import rmq, once per Spark application.

The ``rmq`` data source's readers and writers run in Spark's Python workers, which use
``PYSPARK_PYTHON`` (default ``python3`` on the PATH), not necessarily the driver's Python. A
driver started from a virtual environment that is not activated then plans queries fine and
its first task fails much later with ``ModuleNotFoundError``. :func:`check_workers` runs a
one-task job whose function lives in this module, so a worker must import rmq to run it, and
turns that failure into one line naming the interpreter, at registration.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import RMQError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["WorkersCannotImportRMQ", "check_workers"]

_checked: set[str] = set()  # application ids whose workers imported rmq
_lock = threading.Lock()


class WorkersCannotImportRMQ(RMQError):
    """Spark's Python workers run an interpreter that cannot import rmq (or what rmq needs)."""


def _import_rmq(_: object) -> bool:
    # Unpickling this function makes the worker import rmq.spark.workers, so rmq itself.
    return True


def check_workers(spark: SparkSession) -> None:
    """Raise :class:`WorkersCannotImportRMQ` if the Python workers of ``spark`` cannot import
    rmq, naming their interpreter and the fix; checked once per application. Skipped on Spark
    Connect, whose client has no SparkContext to run the check with."""
    try:
        context = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect raises its own "not implemented" error
        return
    with _lock:
        if context.applicationId in _checked:
            return
        probe(context, _import_rmq)
        _checked.add(context.applicationId)


def probe(context: Any, function: Callable[[object], object]) -> None:
    """Run ``function`` in one task; a worker that cannot import a module it needs raises
    :class:`WorkersCannotImportRMQ`, any other failure what Spark raised."""
    described = context.getLocalProperty("spark.job.description")
    context.setJobDescription("rmq: checking that Spark's Python workers can import rmq")
    try:
        context.parallelize([0], 1).map(function).collect()
    except Exception as exc:
        missing = re.search(r"No module named '([^']+)'", str(exc))
        if missing is None:
            raise
        raise WorkersCannotImportRMQ(_explain(missing.group(1), context.pythonExec)) from None
    finally:
        context.setJobDescription(described)


def _explain(module: str, worker_python: str) -> str:
    what = "rmq" if module.split(".")[0] == "rmq" else f"{module!r}, which rmq needs"
    if worker_python != sys.executable:
        fix = (f"set PYSPARK_PYTHON={sys.executable} (this driver's Python) before the "
               "SparkSession starts, as rmq.spark.spark_session() does, or install rmq in "
               "that interpreter")
    else:
        fix = "install rmq in the executors' Python, or ship it with --py-files"
    return (f"Spark's Python workers cannot import {what} (No module named {module!r}): they "
            f"run {worker_python} (PYSPARK_PYTHON); {fix} (docs/spark.md)")
