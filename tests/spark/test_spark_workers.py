"""``rmq.spark.register`` finds out, before any query, whether Spark's Python workers can
import rmq, and says so in one line naming their interpreter (``PYSPARK_PYTHON``).

The failing case needs a Spark whose workers run another Python, which the session of the
suite (rightly) does not have: it runs in a process of its own, with a SparkSession built
the way a user does (``SparkSession.builder``), and workers running a fresh virtual
environment's Python, which has nothing installed: the un-activated-venv mistake."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rmq
import rmq.spark

pytestmark = [pytest.mark.extras, pytest.mark.single_node]

SOURCES = Path(rmq.__file__).resolve().parents[1]  # the rmq under test, for the driver only

DRIVER = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(SOURCES)!r})
    from pyspark.sql import SparkSession
    import rmq.spark

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    try:
        rmq.spark.register(spark)
        print("registered")
    except rmq.spark.WorkersCannotImportRMQ as exc:
        print(exc)
    finally:
        spark.stop()
""")


def test_register_names_the_worker_python_that_cannot_import_rmq(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True, timeout=120)
    bare = tmp_path / "bare" / "bin" / "python"
    env = {**os.environ, "PYSPARK_PYTHON": str(bare), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYTHONPATH", None)  # Spark passes it to its workers: they must not find rmq
    done = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        f"Spark's Python workers cannot import rmq (No module named 'rmq'): they run {bare} "
        f"(PYSPARK_PYTHON); set PYSPARK_PYTHON={sys.executable} (this driver's Python) before "
        "the SparkSession starts, as rmq.spark.spark_session() does, or install rmq in that "
        "interpreter (docs/spark.md)"]


def test_register_passes_when_the_workers_can_import_rmq(spark) -> None:
    rmq.spark.register(spark)  # checked when the session started; again is free
    assert spark.sparkContext.applicationId in rmq.spark.workers._checked
    assert spark.sparkContext.getLocalProperty("spark.job.description") is None


def test_register_again_keeps_the_source_registered_so_spark_does_not_warn(spark) -> None:
    # Spark logs "The data source rmq replaced a previously registered data source" each
    # time the source is registered again: once per session is enough.
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    identity = spark._jvm.System.identityHashCode
    registered = identity(manager.lookupDataSource("rmq"))
    rmq.spark.register(spark)
    assert identity(manager.lookupDataSource("rmq")) == registered
