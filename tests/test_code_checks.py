"""The code keeps its shape: imports run one way between the layers and make no cycles
(import-linter's contracts in pyproject.toml, explained in docs/architecture.md), and ruff
finds nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def check(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_imports_run_one_way_between_the_layers_without_cycles() -> None:
    done = check(str(BIN / "lint-imports"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken." in done.stdout


def test_ruff_finds_nothing() -> None:
    done = check(sys.executable, "-m", "ruff", "check", "src", "tests", "bench", "examples")
    assert done.returncode == 0, done.stdout + done.stderr
