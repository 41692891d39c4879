"""A user's code is checked against true types: the handler decorators return each function
with its own signature, under ``mypy --strict`` (``[tool.mypy]`` in pyproject.toml). The
code's own checks (ruff, the import contracts, mypy on the package) are ``./dev check``,
which CI runs beside the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.extras

ROOT = Path(__file__).resolve().parent.parent
# mypy's own settings are pyproject.toml's; a MYPYPATH from the environment would add others.
MYPY_ENV = {name: value for name, value in os.environ.items() if name != "MYPYPATH"}


def check(*command: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=MYPY_ENV)


# A user's handlers, type-checked only (never run). Each misuse on the last lines is an error
# only because the decorators return the function with its own signature, not Any.
DECORATED = """\
import rmq


async def decorate(client: rmq.Client, async_client: rmq.AsyncClient,
                   message: rmq.Message) -> None:
    @client.handler("images", concurrency=2)
    def render(message: rmq.Message) -> int:
        return len(message.body)

    @async_client.handler("images")
    async def render_later(message: rmq.Message) -> int:
        return len(message.body)

    reveal_type(render)
    reveal_type(render_later)
    size: str = render(message)
    render(b"body")
    done: str = await render_later(message)
"""


def test_the_handler_decorators_keep_the_handlers_type(tmp_path: Path) -> None:
    (tmp_path / "handlers.py").write_text(DECORATED)
    done = check(sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                 "handlers.py", cwd=tmp_path)
    output = done.stdout + done.stderr
    revealed = re.findall(r'handlers\.py:\d+: note: Revealed type is "(.*)"', output)
    assert [re.sub(r"\bbuiltins\.", "", r) for r in revealed] == [
        "def (message: rmq.message.Message) -> int",
        "def (message: rmq.message.Message) -> typing.Coroutine[Any, Any, int]",
    ], output
    errors = re.findall(r"handlers\.py:(\d+): error: (.*)  \[([a-z-]+)\]", output)
    assert [(int(line), code) for line, _, code in errors] == [
        (16, "assignment"), (17, "arg-type"), (18, "assignment")], output
    assert 'expression has type "int", variable has type "str"' in errors[0][1], output
    assert 'incompatible type "bytes"; expected "Message"' in errors[1][1], output
    assert 'expression has type "int", variable has type "str"' in errors[2][1], output
