"""``rmq bench --quick``: every scenario completes on a server of its own, writes its JSON and
chart, and its counts come out exact. No test here asserts a speed."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rmq.bench import main
from rmq.bench.report import Report
from rmq.bench.scenarios import SCENARIOS

pytestmark = pytest.mark.extras

CONSUMING = ("consume", "priority", "delay", "headline", "scale-out")


class QuickRun:
    def __init__(self, done: subprocess.CompletedProcess[str], out: Path):
        self.returncode, self.stdout, self.stderr, self.out = (
            done.returncode, done.stdout, done.stderr, out)

    def report(self, scenario: str) -> dict[str, Any]:
        return json.loads((self.out / f"{scenario}.json").read_text())


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    out = tmp_path_factory.mktemp("bench-results")
    done = subprocess.run([sys.executable, "-m", "rmq.bench", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=240)
    return QuickRun(done, out)


def test_quick_benchmark_exits_zero_when_every_count_is_exact(quick_run: QuickRun) -> None:
    assert quick_run.returncode == 0, quick_run.stderr[-3000:]
    assert "== targets ==" in quick_run.stdout


def test_quick_benchmark_judges_no_target_from_its_tiny_sizes(quick_run: QuickRun) -> None:
    targets = quick_run.stdout.split("== targets ==\n", 1)[1].splitlines()
    assert targets[0] == "(not judged: --quick runs tiny sizes and checks correctness only)"
    assert targets[1:] and all(line.startswith("n/a    ") for line in targets[1:]), targets
    assert "MISSED" not in quick_run.stdout and " met" not in quick_run.stdout
    rows = json.loads((quick_run.out / "summary.json").read_text())["targets"]
    assert rows and {row["met"] for row in rows} == {None}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_quick_scenario_writes_json_and_chart_with_exact_counts(quick_run: QuickRun,
                                                                scenario: str) -> None:
    report = quick_run.report(scenario)
    assert (quick_run.out / f"{scenario}.png").stat().st_size > 0
    assert report["figures"], "no figures measured"
    assert report["checks"], "no correctness checks ran"
    failed = [c for c in report["checks"] if not c["ok"]]
    assert not failed, failed
    assert report["environment"]["quick"] is True


@pytest.mark.parametrize("scenario", CONSUMING)
def test_quick_scenario_proves_every_message_consumed_exactly_once(quick_run: QuickRun,
                                                                    scenario: str) -> None:
    checks = quick_run.report(scenario)["checks"]
    assert any("exactly once" in c["what"] and c["ok"] for c in checks), checks


def test_quick_merge_counts_exactly_the_duplicates_as_merged(quick_run: QuickRun) -> None:
    report = quick_run.report("merge")
    sends, distinct = report["params"]["sends"], report["params"]["distinct"]
    merged_checks = [c for c in report["checks"] if "merged" in c["what"]]
    assert merged_checks and all(c["ok"] for c in merged_checks)
    assert f"expected {sends - distinct}" in merged_checks[0]["detail"]
    rate = next(f for f in report["figures"] if f["name"] == "merge rate")
    assert rate["value"] == pytest.approx(100 * (sends - distinct) / sends)


def test_quick_newest_measures_supersede_and_the_renders_with_and_without_it(
        quick_run: QuickRun) -> None:
    report = quick_run.report("newest")
    params, figures = report["params"], {f["name"]: f for f in report["figures"]}
    checks = {c["what"]: c for c in report["checks"]}
    # a group that supersedes against one that does not, in the same run
    for workload in ("send_many", "claim+ack"):
        on, off = (figures[f"{workload}, merge by key{with_}"]
                   for with_ in (", supersede on", ""))
        assert on["ratios"] == {off["name"]: pytest.approx(on["value"] / off["value"])}
    assert checks["supersede on: a send of an identity not in flight pays no extra round "
                  "trip"]["ok"]
    p50, p99 = (figures[f"supersede: send to the running handler told, {q}"]
                for q in ("p50", "p99"))
    assert (p50["unit"], p99["unit"]) == ("ms", "ms") and 0 < p50["value"] <= p99["value"]
    assert [t["text"] for t in p99["targets"]] == ["≤ 100.00 ms"]
    assert len(report["series"]["stop_latency_ms"]) == params["supersede_probes"]
    on, off = (figures[f"renders: GPU time, supersede {label}"] for label in ("on", "off"))
    assert on["ratios"] == {off["name"]: pytest.approx(on["value"] / off["value"])}
    renders = report["series"]["renders"]
    assert renders["off"]["stopped"] == 0  # without supersede every render runs to its end
    assert renders["off"]["gpu_seconds"] >= 0.999 * renders["off"]["completed"] * params[
        "render_s"]
    for label in ("on", "off"):
        assert figures[f"renders completed, supersede {label}"]["value"] == renders[label][
            "completed"]
        assert renders[label]["gpu_seconds"] == pytest.approx(
            figures[f"renders: GPU time, supersede {label}"]["value"])
        check = checks[f"renders, supersede {label}: every product's last completed render "
                       "shows its latest price"]
        assert check["ok"] and check["detail"] == (f"{params['render_products']} of "
                                                   f"{params['render_products']} products")
    assert figures["renders stopped early, supersede on"]["value"] == renders["on"]["stopped"]
    assert params["render_hot"] == 1  # 5 % of the quick run's 20 products


def test_quick_references_are_reported_as_ratios(quick_run: QuickRun) -> None:
    send = quick_run.report("send")
    assert any(f["role"] == "reference" for f in send["figures"])
    many = next(f for f in send["figures"] if f["name"] == "send_many, 1 process")
    assert "Streams XADD pipelined, 1 process" in many["ratios"]


def test_quick_consume_measures_its_references_before_and_after_and_counts_their_mean(
        quick_run: QuickRun) -> None:
    report = quick_run.report("consume")
    references = [f for f in report["figures"] if f["role"] == "reference"]
    assert len(references) == 3
    for figure in references:
        for when in ("before", "after"):
            (check,) = [c for c in report["checks"]
                        if c["what"] == f"{figure['name']} ({when}): read"]
            assert check["ok"], check
        before, after = (float(x) for x in re.findall(r"([\d.]+) k/s", figure["note"]))
        assert figure["value"] / 1000 == pytest.approx((before + after) / 2, abs=0.1)
    consumer = next(f for f in report["figures"]
                    if f["name"] == "Consumer threads, no-op handler, default prefetch, 1 process")
    streams = next(f for f in references if f["name"] == consumer["compare"][0])
    assert consumer["ratios"][streams["name"]] == pytest.approx(
        consumer["value"] / streams["value"])


def test_quick_benchmark_prints_each_figures_note_beside_its_table(quick_run: QuickRun) -> None:
    """A note (here consume's references: their rates before and after) is on screen, not
    only in the JSON."""
    consume = quick_run.stdout.split("== consume ==\n", 1)[1].split("\n== ", 1)[0]
    noted = [f for f in quick_run.report("consume")["figures"] if f["note"]]
    assert noted
    for figure in noted:
        assert f"note  {figure['name']}: {figure['note']}" in consume.splitlines()


def test_quick_scale_out_runs_on_a_cluster_of_its_own_and_reports_the_rate_per_master(
        quick_run: QuickRun) -> None:
    report = quick_run.report("scale-out")
    assert report["params"]["masters"] == [3]
    figures = {f["name"]: f for f in report["figures"]}
    for workload, who in (("send_many", "producers"), ("claim+ack", "processes"),
                          ("Consumer, no-op handler", "processes")):
        single, cluster = (figures[f"{workload}, 2 {who}, {where}"]
                           for where in ("1 node", "3 masters"))
        per_master = figures[f"per master, {workload}, 3 masters"]
        assert per_master["value"] == pytest.approx(cluster["value"] / 3)
        assert per_master["ratios"][single["name"]] == pytest.approx(
            per_master["value"] / single["value"])
        assert any(name.startswith("Streams") for name in single["ratios"])
    checked = {c["what"].rsplit(":", 1)[0] for c in report["checks"]}
    assert {"claim+ack, 3 masters", "Consumer, no-op handler, 3 masters"} <= checked


def test_quick_scale_out_stops_the_cluster_it_started(quick_run: QuickRun) -> None:
    ports = quick_run.report("scale-out")["params"]["cluster_ports"]["3"]
    assert len(ports) == 3
    for port in ports:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()


@pytest.mark.parametrize("option", ["--scale-masters=2", "--scale-masters=3,x",
                                    "--scale-processes=0", "--scale-slots=48"])
def test_benchmark_refuses_an_impossible_scale_out_before_any_work(
        tmp_path: Path, option: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--quick", "--scenarios", "scale-out", option, "--out", str(tmp_path)])
    assert exited.value.code == 2
    assert option.split("=")[1] in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_benchmark_exits_non_zero_when_a_count_is_wrong(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def miscounted(bench: Any) -> Report:
        report = Report("send", {})
        report.expect_equal("consumed", 9, 10)
        return report

    monkeypatch.setitem(SCENARIOS, "send", miscounted)
    assert main(["--quick", "--scenarios", "send", "--out", str(tmp_path)]) == 1
    assert json.loads((tmp_path / "send.json").read_text())["ok"] is False


def test_benchmark_rejects_an_unknown_scenario(tmp_path: Path) -> None:
    assert main(["--quick", "--scenarios", "nope", "--out", str(tmp_path)]) == 2


def test_a_scenario_run_again_into_the_folder_replaces_only_its_own_targets(
        quick_run: QuickRun, tmp_path: Path) -> None:
    for name in ("send.json", "memory.json", "summary.json"):
        (tmp_path / name).write_bytes((quick_run.out / name).read_bytes())
    assert main(["--quick", "--scenarios", "memory", "--out", str(tmp_path)]) == 0
    before = json.loads((quick_run.out / "summary.json").read_text())["targets"]
    after = json.loads((tmp_path / "summary.json").read_text())["targets"]
    assert [r for r in after if r["scenario"] == "send"] == [
        r for r in before if r["scenario"] == "send"]
    assert [r["figure"] for r in after if r["scenario"] == "memory"] == [
        r["figure"] for r in before if r["scenario"] == "memory"]
    assert [r["scenario"] for r in after] == [r["scenario"] for r in before]  # same order
