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


ARCHITECTURE = ROOT / "docs" / "architecture.md"
INDEXED_PACKAGES = ("client", "storage", "runtime")  # src/rmq/<package>/, every module
# A module as the page names it: client/base.py, storage/lua-free paths, or rmq/errors.py
_MODULE_PATH = re.compile(r"\b((?:client|storage|runtime)(?:/\w+)+\.py|rmq/\w+\.py)\b")


def core_modules() -> set[str]:
    """The modules docs/architecture.md must index, from the file system: every ``.py``
    of the core packages (``client/base.py``) and of the package's top level
    (``rmq/errors.py``)."""
    package = ROOT / "src" / "rmq"
    found = {f"rmq/{path.name}" for path in package.glob("*.py")}
    for name in INDEXED_PACKAGES:
        found |= {path.relative_to(package).as_posix()
                  for path in (package / name).rglob("*.py")}
    return found


def test_the_architecture_page_indexes_every_core_module_and_no_other() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    indexed = set(re.findall(r"^\| `([\w/]+\.py)` \|", text, re.M))
    named = set(_MODULE_PATH.findall(text))
    modules = core_modules()
    assert "client/base.py" in modules and "rmq/errors.py" in modules  # the listing works
    missing = sorted(modules - indexed)
    assert not missing, (
        f"docs/architecture.md, 'Modules', lacks {missing}: add a row "
        "| `<package>/<module>.py` | what it is | for each")
    gone = sorted((named | indexed) - modules)
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"


CHANGELOG = ROOT / "CHANGELOG.md"
CHANGE_KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_changelog_lists_releases_newest_first_in_keep_a_changelog_sections() -> None:
    text = CHANGELOG.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "Unreleased", headings[0]
    releases = []
    for heading in headings[1:]:
        found = re.fullmatch(r"(\d+)\.(\d+)\.(\d+) - (\d{4}-\d{2}-\d{2})", heading)
        assert found, f"CHANGELOG.md: {heading!r} is not 'X.Y.Z - YYYY-MM-DD'"
        releases.append((tuple(int(n) for n in found.groups()[:3]), found.group(4)))
    assert releases, "CHANGELOG.md has no released version"
    versions, dates = [v for v, _ in releases], [d for _, d in releases]
    assert versions == sorted(set(versions), reverse=True), versions
    assert dates == sorted(dates, reverse=True), dates
    kinds = set(re.findall(r"^### (.+)$", text, re.M))
    assert kinds <= CHANGE_KINDS, kinds - CHANGE_KINDS
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target.split("#")[0]).exists(), f"CHANGELOG.md links {target}"


def _anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them."""
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)}


def test_every_link_between_the_pages_reaches_its_page_and_heading() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             ROOT / "deploy" / "README.md"]
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            linked = page.parent / path if path else page
            assert linked.exists(), f"{page.name} links {target}: no such file"
            if anchor and linked.suffix == ".md":
                assert anchor in _anchors(linked), f"{page.name} links {target}: no such heading"


def test_the_pages_showing_tags_and_properties_say_they_merge_and_point_to_merging_by_key(
        ) -> None:
    assert "merging-by-key" in _anchors(ROOT / "docs" / "semantics.md")
    for page in ("README.md", "docs/semantics.md", "docs/cli.md"):
        text = " ".join((ROOT / page).read_text(encoding="utf-8").split())
        assert re.search(r"(Tag and properties|Both) are part of what merges", text), page
        assert "merging-by-key" in text, page


REFERENCE = ROOT / "docs" / "reference.md"


def returned_types() -> dict[str, set[str]]:
    """Every dataclass or NamedTuple ``rmq`` exports, with its public fields and
    properties, from the code."""
    import dataclasses

    import rmq

    found = {}
    for name in rmq.__all__:
        kind = getattr(rmq, name)
        if dataclasses.is_dataclass(kind):
            fields = {f.name for f in dataclasses.fields(kind)}
        elif isinstance(kind, type) and issubclass(kind, tuple) and hasattr(kind, "_fields"):
            fields = set(kind._fields)
        else:
            continue
        properties = {attribute for attribute, value in vars(kind).items()
                      if isinstance(value, property)}
        found[name] = {n for n in fields | properties if not n.startswith("_")}
    return found


def reference_tables() -> dict[str, set[str]]:
    """The fields docs/reference.md lists under each ``### `Type` `` heading."""
    tables: dict[str, set[str]] = {}
    current = None
    for line in REFERENCE.read_text(encoding="utf-8").splitlines():
        heading = re.fullmatch(r"#+ `(\w+)`", line)
        if heading:
            current = heading.group(1)
            tables[current] = set()
        elif line.startswith("#"):
            current = None
        elif current and (row := re.match(r"^\| `(\w+)` \|", line)):
            tables[current].add(row.group(1))
    return tables


def test_the_reference_page_lists_every_field_of_every_returned_type() -> None:
    types, tables = returned_types(), reference_tables()
    assert {"Message", "GroupStats", "Cancelled", "TraceEvent"} <= types.keys()
    assert sorted(types.keys() - tables.keys()) == [], "docs/reference.md lacks a section"
    for name, fields in types.items():
        missing, gone = sorted(fields - tables[name]), sorted(tables[name] - fields)
        assert not missing, f"docs/reference.md, `{name}`, lacks a row for {missing}"
        assert not gone, f"docs/reference.md, `{name}`, lists what it has not: {gone}"
    for page in ("README.md", "docs/architecture.md"):
        assert "reference.md" in (ROOT / page).read_text(encoding="utf-8"), page


LUA = ROOT / "src" / "rmq" / "storage" / "lua"
# What the scripts write a trace line for, by the form that names the event: the
# trace_* calls of lua/includes/trace.lua, its lines' heads, trace_save.lua's own lines,
# and the event a settle's failure traces (the last argument of settle.lua's fail)
_TRACE_CALL = re.compile(
    r"(?<!function )\btrace_(?:message|delivery|present)\(\s*\w+,\s*(\"?)(\w+)\"?")
_LINE_HEAD = re.compile(r"\bhead\([^,()]+,\s*\"(\w+)\"\)|\badd_line\(\w+,\s*\"(\w+)\\t\"")
_FAIL_CALL = re.compile(r"\bfail\(k,(?:[^()]|\([^()]*\))*,\s*\"(\w+)\"\)")
NOT_AN_EVENT = {"rescored"}  # a line the reader uses to name merges (storage/trace.py)


def events_the_scripts_write() -> set[str]:
    found: set[str] = set()
    for path in LUA.rglob("*.lua"):
        code = re.sub(r"--\[\[.*?\]\]|--[^\n]*", "", path.read_text(encoding="utf-8"),
                      flags=re.S)
        for quoted, event in _TRACE_CALL.findall(code):
            assert quoted or (path.name, event) == ("settle.lua", "event"), (
                f"{path.name}: a trace call names its event by a variable ({event}): "
                "teach this test where it comes from")
            if quoted:
                found.add(event)
        found |= {a or b for a, b in _LINE_HEAD.findall(code)}
        found |= set(_FAIL_CALL.findall(code))
    return found - NOT_AN_EVENT


def test_the_trace_page_lists_every_event_the_scripts_write() -> None:
    from rmq.storage.trace import EVENTS

    text = (ROOT / "docs" / "trace.md").read_text(encoding="utf-8")
    table = text.split("### Events", 1)[1].split("\n#", 1)[0]
    listed = re.findall(r"^\| `(\w+)` \|", table, re.M)
    written = events_the_scripts_write()
    assert {"sent", "merged", "claimed", "failed", "expired", "cancelled"} <= written
    assert sorted(written) == sorted(EVENTS), "storage/trace.py's EVENTS differ from the scripts"
    assert sorted(listed) == sorted(written), "docs/trace.md, 'Events', differs from the scripts"
