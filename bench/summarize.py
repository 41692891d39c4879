#!/usr/bin/env python3
"""Markdown tables from a ``rmq bench`` output folder, for docs/benchmarks.md.

    bench/summarize.py bench-results > tables.md

Reads the ``<scenario>.json`` files (so scenarios re-run into the folder replace their old
figures) and prints the environment, every target with its measured figure, the references it
was compared with, and met or missed; then, per scenario, every figure with its ratios.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rmq.bench.report import format_value
from rmq.bench.scenarios import SCENARIOS


def _ratios(figure: dict) -> str:
    return "<br>".join(f"{r:.2f}× {name}" for name, r in figure["ratios"].items()) or "–"


def summarize(folder: Path) -> str:
    reports = [json.loads((folder / f"{name}.json").read_text()) for name in SCENARIOS
               if (folder / f"{name}.json").exists()]
    env = reports[0]["environment"]
    out = [f"Run {env['date']}: {env['cpus']} CPUs, {env['system']}, Python {env['python']}, "
           f"redis-server {env['redis_server']}{' (--quick)' if env['quick'] else ''}.", "",
           "| scenario | figure | measured | vs references (same run) | target | |",
           "|---|---|---|---|---|---|"]
    for report in reports:
        for fig in report["figures"]:
            for target in fig["targets"]:
                out.append(f"| {report['scenario']} | {fig['name']} | "
                           f"{format_value(fig['value'], fig['unit'])} | {_ratios(fig)} | "
                           f"{target['text']} | {'met' if target['met'] else '**missed**'} |")
    for report in reports:
        out += ["", f"### {report['scenario']}", "", "| figure | measured | vs references |",
                "|---|---|---|"]
        for fig in report["figures"]:
            name = fig["name"] if fig["role"] == "rmq" else f"*{fig['role']}:* {fig['name']}"
            out.append(f"| {name} | {format_value(fig['value'], fig['unit'])} | "
                       f"{_ratios(fig)} |")
        failed = [c for c in report["checks"] if not c["ok"]]
        out.append("")
        out.append(f"Checks: {len(report['checks']) - len(failed)} of {len(report['checks'])} "
                   "exact." + "".join(f" FAILED: {c['what']} ({c['detail']})." for c in failed))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(summarize(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-results")), end="")
