"""The examples of docs/spark.md marked to run in a Spark session run as written in the
suite's session. They name no URL, so they read the embedded server (of the tests'
``RMQ_HOME``, which the session's Python processes inherited when it started)."""

from __future__ import annotations

import pytest
from doc_blocks import ROOT, blocks

import rmq

pytestmark = [pytest.mark.extras, pytest.mark.single_node]


def test_spark_examples_run_as_written(spark, capsys) -> None:
    with rmq.Client() as embedded:
        embedded.create_topic("renders", max_retries=0)
        try:
            embedded.send_many("renders", ["product:42", "product:7"])
            (failed,) = embedded.claim("renders", count=1)
            embedded.nack(failed, "font missing")  # a dead letter for the example to show

            ran = []
            for block in blocks(ROOT / "docs" / "spark.md"):
                if block.in_spark:
                    exec(compile(block.code, block.name, "exec"), {"spark": spark})  # noqa: S102
                    ran.append(block.name)
        finally:
            embedded.delete_topic("renders")

    assert ran, "docs/spark.md has no example marked to run in the Spark session"
    shown = capsys.readouterr().out
    assert "|default|ready|     128|    1|" in shown  # snap.groupBy(...).count().show()
    assert "font missing" in shown  # the dead letter's error
