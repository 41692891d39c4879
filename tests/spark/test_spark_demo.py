"""The founding-case demo (SPEC §8) at a small size, on the embedded defaults."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from rmq.demo import app as demo

pytestmark = [pytest.mark.extras, pytest.mark.single_node]


def test_demo_renders_every_changed_product_with_its_latest_price(spark, tmp_path, capsys):
    out = tmp_path / "demo"

    status = demo.main(["--events", "4000", "--products", "150", "--waves", "2",
                        "--workers", "4", "--out", str(out)])

    assert status == 0
    summary = json.loads((out / "summary.json").read_text())
    prices = json.loads((out / "prices.json").read_text())
    assert summary["sent"] == 4000
    assert summary["merged"] + summary["stored"] == 4000
    assert summary["merged_pct"] > 50  # most changes hit a product already queued
    assert summary["products_changed"] == len(prices) > 100
    assert summary["rendered"] >= len(prices)
    assert summary["stale_images"] == []
    # bound with supersede: a message is rendered, or stopped early as a newer price came
    assert summary["supersede"] is True
    assert summary["rendered"] + summary["renders_stopped"] == summary["stored"]
    assert 0 <= summary["renders_stopped"] <= summary["superseded"]
    # the GPU-seconds count the time spent; the saved ones are the rest of the stopped images'
    images = summary["rendered"] + summary["renders_stopped"]
    assert summary["gpu_seconds"] + summary["gpu_seconds_saved"] == pytest.approx(
        (summary["batches"] * 40 + images * 4) / 1000, abs=0.02)
    assert 0 <= summary["gpu_seconds_saved"] <= summary["renders_stopped"] * 4 / 1000
    assert summary["mean_batch"] == round(images / summary["batches"], 2)  # stopped ones too
    for product, cents in prices.items():
        assert demo.image_price(out / f"{product}.png") == cents
    assert sorted(p.stem for p in out.glob("sku-*.png")) == sorted(prices)
    printed = capsys.readouterr().out
    assert "merged while queued" in printed and "images show the latest price" in printed
    assert "GPU batches" in printed and "one image a call" in printed
    assert "renders stopped" in printed and "GPU time saved" in printed
    # no line of progress before anything moved, and the embedded server's closing note
    assert not re.search(r"published +0/", printed), printed
    assert "rmq server stop" in printed
    assert (out / "spark.log").exists()


def test_the_demo_renders_in_batches_and_reports_the_gpu_time_they_saved(spark, tmp_path):
    out = tmp_path / "demo"

    # without supersede every render runs to its end: the GPU time is the nominal one
    status = demo.main(["--events", "4000", "--products", "150", "--waves", "2",
                        "--workers", "2", "--batch", "8", "--batch-wait-ms", "30",
                        "--no-supersede", "--out", str(out)])

    assert status == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stale_images"] == []
    assert (summary["batch"], summary["batch_wait_ms"]) == (8, 30)
    assert (summary["gpu_batch_ms"], summary["gpu_image_ms"]) == (40, 4)
    rendered, batches = summary["rendered"], summary["batches"]
    assert rendered / 8 <= batches < rendered  # batches of up to 8, some of more than one
    assert summary["mean_batch"] == round(rendered / batches, 2)
    assert summary["gpu_seconds"] == round((batches * 40 + rendered * 4) / 1000, 2)
    assert summary["gpu_seconds_one_per_call"] == round(rendered * 44 / 1000, 2)
    # a serial topic's claim takes a product once, so its newest price is drawn last
    assert summary["batches_repeating_a_product"] == 0
    assert summary["supersede"] is False
    assert (summary["superseded"], summary["renders_stopped"], summary["gpu_seconds_saved"]
            ) == (0, 0, 0)


def test_a_process_started_while_the_demo_starts_spark_logs_into_its_file(tmp_path, capfd):
    log = tmp_path / "spark.log"
    with demo._stderr_to(log):
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('jvm noise')"],
                       check=True)
    print("after", file=sys.stderr)
    assert log.read_text() == "jvm noise"
    assert capfd.readouterr().err == "after\n"
