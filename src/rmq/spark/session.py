"""A SparkSession for running RMQ's Spark jobs from a plain ``python`` process."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["spark_session"]


def spark_session(app_name: str = "rmq", master: str | None = None,
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """The active SparkSession (or a new one) with the ``rmq`` data source registered.

    ``master`` None keeps what the launcher says: ``spark-submit --master ...``, else
    ``local[*]``. Started from plain ``python`` (not ``spark-submit``), it defaults
    ``PYSPARK_PYTHON`` to this interpreter (so Spark's Python workers can import rmq) and
    ``SPARK_LOCAL_IP`` to 127.0.0.1; variables already set are left alone. ``conf``: more Spark
    settings, such as ``{"spark.sql.shuffle.partitions": "4"}``.
    """
    from pyspark.sql import SparkSession

    from . import register

    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # set by spark-submit for its Python
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
