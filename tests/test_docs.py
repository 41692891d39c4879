"""Every example of README.md and docs/*.md runs as written (docs/cli.md, "The docs run as
written"): python and bash blocks, in document order, from the checkout's root, with the
embedded server in a temporary RMQ_HOME, as a newcomer runs them after ``./dev install``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from doc_blocks import DOCUMENTS, ROOT, Block, blocks
from helpers import wait_for

from rmq.server import stop_embedded

pytestmark = pytest.mark.extras

RUNNABLE = ("python", "bash")
NOT_CODE = "text"  # a diagram or an example of output


def test_every_block_runs_or_says_why_not() -> None:
    for path in DOCUMENTS:
        for block in blocks(path):
            assert block.understood, f"{block.name}: unknown comment {block.comment!r}"
            assert block.language in (*RUNNABLE, NOT_CODE) or block.not_run, (
                f"{block.name}: a ```{block.language} block is not run: make it python or "
                "bash (or text, if it is no code), or say why with <!-- not run: REASON -->")


def environment(home: Path) -> dict[str, str]:
    """The newcomer's: ``rmq`` and ``python`` of this environment first on the PATH, no
    RMQ_REDIS_URL, the embedded server in ``home``."""
    env = {**os.environ, "RMQ_HOME": str(home),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    env.pop("RMQ_REDIS_URL", None)
    return env


def command(block: Block) -> list[str]:
    if block.language == "python":
        return [sys.executable, "-c", block.code]
    return ["bash", "-e", "-o", "pipefail", "-c", block.code]


def run_to_the_end(block: Block, env: dict[str, str]) -> None:
    done = subprocess.run(command(block), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{block.name} failed:\n{done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr, f"{block.name}:\n{done.stderr}"


def run_until_running_then_interrupt(block: Block, env: dict[str, str],
                                     scratch: Path) -> None:
    output = scratch / f"{block.line}.out"
    with output.open("w") as out:
        process = subprocess.Popen(command(block), cwd=ROOT, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def running() -> bool:
            assert process.poll() is None, f"{block.name} ended:\n{output.read_text()}"
            check = subprocess.run(["bash", "-o", "pipefail", "-c", block.running_when],
                                   cwd=ROOT, env=env, capture_output=True, timeout=60)
            return check.returncode == 0

        wait_for(running, 60, f"{block.name} to run ({block.running_when})")
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C, as in a terminal
        assert process.wait(timeout=60) == 0, f"{block.name}:\n{output.read_text()}"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert "Traceback" not in output.read_text(), f"{block.name}:\n{output.read_text()}"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: path.name)
def test_examples_run_as_written(path: Path, tmp_path: Path) -> None:
    env = environment(tmp_path / "home")
    try:
        for block in blocks(path):
            if block.not_run or block.in_spark or block.language not in RUNNABLE:
                continue
            if block.running_when:
                run_until_running_then_interrupt(block, env, tmp_path)
            else:
                run_to_the_end(block, env)
    finally:
        stop_embedded(tmp_path / "home")


def test_the_readme_install_block_names_every_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    (install,) = [b.code for b in blocks(ROOT / "README.md") if "pip install -e ." in b.code]
    for extra in extras:
        if not extra.startswith("test"):  # the suite's tools, which ./dev install sets up
            assert f"pip install -e '.[{extra}]'" in install, extra


def test_dev_without_a_command_lists_every_command() -> None:
    script = ROOT / "dev"
    commands = re.findall(r"^  (\w+)\)", script.read_text(), re.M)
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "floors" in commands
    for command in commands:
        assert f"./dev {command}" in done.stdout, command
