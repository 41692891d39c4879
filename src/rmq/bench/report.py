"""What a scenario reports: figures (RMQ's and the references'), targets, correctness checks,
and the three ways they leave the benchmark: a table on stdout, JSON and a PNG chart."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Target", "verdict", "Figure", "Check", "Report", "at_least", "at_most",
           "ratio_at_least", "write", "format_table", "format_value", "bar_chart"]


@dataclass(frozen=True)
class Target:
    """One target of the benchmark, judged on a figure of this run; ``met`` is None
    when it was not judged (``--quick``: tiny sizes say nothing about full-size targets)."""

    text: str
    met: bool | None


def verdict(met: bool | None) -> str:
    """``met``, ``MISSED`` or ``n/a`` (not judged)."""
    return "n/a" if met is None else "met" if met else "MISSED"


@dataclass
class Figure:
    """One measured figure. ``role`` is ``rmq`` (through rmq's public API) or ``reference``
    (Redis itself doing the same work). ``ratios`` holds the figure divided by the named
    reference figures of the same report."""

    name: str
    value: float
    unit: str
    role: str = "rmq"
    compare: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class Check:
    """A correctness check: counts that must come out exact."""

    what: str
    ok: bool
    detail: str


@dataclass
class Report:
    """Everything one scenario measured. ``series`` holds what the chart draws."""

    scenario: str
    params: dict[str, Any]
    figures: list[Figure] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)
    chart: Callable[[Report, Any], None] | None = None

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        return figure

    def add_bracketing(self, before: dict[str, float], after: dict[str, float],
                       between: str) -> None:
        """Add each reference (label -> msg/s) measured before and after ``between`` as the
        mean of the two: a machine's speed can drift within the minutes a scenario takes,
        and a reference taken on one side only would carry that drift into every ratio."""
        for label, rate in after.items():
            first = before[label]
            self.add(Figure(label, (first + rate) / 2, "msg/s", role="reference",
                            note=f"mean of {first / 1000:.1f} k/s before {between} "
                                 f"and {rate / 1000:.1f} k/s after"))

    def figure(self, name: str) -> Figure:
        return next(f for f in self.figures if f.name == name)

    def waive_targets(self) -> None:
        """Mark every target not judged (a ``--quick`` run checks correctness only)."""
        for fig in self.figures:
            fig.targets = [Target(t.text, None) for t in fig.targets]

    def check(self, what: str, ok: bool, detail: str) -> bool:
        self.checks.append(Check(what, bool(ok), detail))
        return bool(ok)

    def expect_equal(self, what: str, got: int, expected: int) -> bool:
        return self.check(what, got == expected, f"got {got}, expected {expected}")

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def resolve_ratios(self) -> None:
        by_name = {f.name: f for f in self.figures}
        for fig in self.figures:
            for ref in fig.compare:
                base = by_name.get(ref)
                if base is not None and base.value:
                    fig.ratios[ref] = fig.value / base.value

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "params": self.params, "ok": self.ok,
                "figures": [asdict(f) for f in self.figures],
                "checks": [asdict(c) for c in self.checks], "series": self.series}


def at_least(limit: float, unit: str, what: str = "") -> Callable[[float], Target]:
    suffix = f" ({what})" if what else ""
    return lambda value: Target(f"≥ {format_value(limit, unit)}{suffix}", value >= limit)


def at_most(limit: float, unit: str, what: str = "") -> Callable[[float], Target]:
    suffix = f" ({what})" if what else ""
    return lambda value: Target(f"≤ {format_value(limit, unit)}{suffix}", value <= limit)


def ratio_at_least(report: Report, figure: Figure, reference: str, factor: float) -> None:
    """Add the target ``figure ≥ factor × reference`` (judged once both are measured)."""
    base = report.figure(reference).value
    figure.targets.append(Target(f"≥ {factor:g} × {reference}",
                                 bool(base) and figure.value >= factor * base))


def format_value(value: float, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit == "msg/s":
        return f"{value / 1000:,.1f} k/s"
    if unit in ("ms", "µs"):
        return f"{value:,.2f} {unit}"
    if unit in ("B/msg", "B", "renders"):
        return f"{value:,.0f} {unit}"
    if unit == "GPU-s":
        return f"{value:,.1f} {unit}"
    return f"{value:,.3g} {unit}"


def _ratio_text(fig: Figure) -> str:
    return "; ".join(f"{r:.2f}× {name}" for name, r in fig.ratios.items())


def format_table(report: Report) -> str:
    rows = [("figure", "value", "vs reference", "target")]
    for fig in report.figures:
        label = fig.name if fig.role == "rmq" else f"[{fig.role}] {fig.name}"
        targets = ", ".join(f"{t.text} {verdict(t.met)}" for t in fig.targets)
        rows.append((label, format_value(fig.value, fig.unit), _ratio_text(fig), targets))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"== {report.scenario} =="]
    for i, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    # A note says how a figure was made (a reference's before/after rates, a figure not
    # measured here); on screen too, not only in the JSON, so a reader of the log sees it.
    for fig in report.figures:
        if fig.note:
            lines.append(f"note  {fig.name}: {fig.note}")
    for c in report.checks:
        lines.append(f"check {'ok  ' if c.ok else 'FAIL'} {c.what}: {c.detail}")
    return "\n".join(line.rstrip() for line in lines)


def write(report: Report, out: Path, environment: dict[str, Any]) -> Iterable[Path]:
    """Write ``<scenario>.json`` and, when the scenario draws one, ``<scenario>.png``."""
    out.mkdir(parents=True, exist_ok=True)
    data = report.to_json() | {"environment": environment}
    json_path = out / f"{report.scenario}.json"
    json_path.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    written = [json_path]
    if report.chart is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 5))
        report.chart(report, ax)
        fig.tight_layout()
        png = out / f"{report.scenario}.png"
        fig.savefig(png, dpi=100)
        plt.close(fig)
        written.append(png)
    return written


def bar_chart(report: Report, ax: Any, unit: str = "msg/s") -> None:
    """Horizontal bars of every figure in ``unit``, references in grey."""
    figs = [f for f in report.figures if f.unit == unit]
    scale, label = (1000, "thousand messages/s") if unit == "msg/s" else (1, unit)
    names = [f.name if f.role == "rmq" else f"[ref] {f.name}" for f in figs][::-1]
    values = [f.value / scale for f in figs][::-1]
    colors = ["#1f77b4" if f.role == "rmq" else "#999999" for f in figs][::-1]
    ax.barh(names, values, color=colors)
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:,.1f}", va="center", fontsize=8)
    ax.set_xlabel(label)
    ax.set_title(f"rmq bench: {report.scenario}")
