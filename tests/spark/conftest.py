"""The Spark tests' session: one local Spark (``local[2]``) for the whole run, since starting
one takes several seconds. Skipped where pyspark or Java is missing."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The Spark suite needs pyspark, pyarrow and Java, which ./dev installs: fail plainly
# rather than skip when one is missing.
import pyarrow  # noqa: E402, F401
import pyspark  # noqa: E402, F401
import pytest

if shutil.which("java") is None:
    raise RuntimeError("the Spark tests need Java 17+: apt-get install openjdk-17-jre-headless")

import rmq  # noqa: E402
import rmq.spark  # noqa: E402


@pytest.fixture(scope="session")
def spark(isolated_environment: Path) -> Iterator[Any]:
    """A local Spark session with the ``rmq`` source registered. It starts after
    ``isolated_environment``, so its JVM and Python workers see the tests' ``RMQ_HOME``."""
    session = rmq.spark.spark_session("rmq-tests", master="local[2]", conf={
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.streaming.stopTimeout": "30s",
    })
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(name="client")
def client_fixture(redis_url: str) -> Iterator[rmq.Client]:
    """A wall-clock client on the shared server, emptied before the test (``redis_url``)."""
    with rmq.Client(redis_url) as client:
        yield client
