"""The Lua script loader (``rmq.storage.scripts``): a script's flags kept as its first line,
includes resolved recursively, each pasted once per script before the code that needs it,
and every fault in the Lua tree (no flags, a cycle, a missing include, an include named
twice) refused with the files named. The loader is pure logic, tested on small Lua trees
written for each test; the shipped scripts are then checked for their header discipline,
loaded into a real Redis, and their flags checked as Redis applies them."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest
import redis

from rmq.storage.scripts import ScriptSourceError, load_script, script

SHIPPED = resources.files("rmq.storage").joinpath("lua")
SCRIPT_NAMES = sorted(f.name.removesuffix(".lua") for f in SHIPPED.iterdir()
                      if f.name.endswith(".lua"))
INCLUDE_NAMES = sorted(f.name.removesuffix(".lua") for f in SHIPPED.joinpath("includes").iterdir()
                       if f.name.endswith(".lua"))


def lua_tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (path under ``root`` -> text) and return ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_an_include_cycle_is_refused_naming_every_file_in_it(tmp_path):
    tree = lua_tree(tmp_path, {
        "s.lua": '#!lua\n--- @include "a"\n',
        "includes/a.lua": '--- @include "b"\n',
        "includes/b.lua": '--- @include "c"\n',
        "includes/c.lua": '--- @include "a"\n',
    })
    with pytest.raises(ScriptSourceError, match=re.escape(
            "include cycle: includes/a.lua -> includes/b.lua -> includes/c.lua"
            " -> includes/a.lua (reached from s.lua)")):
        load_script(tree, "s")


def test_an_include_that_names_itself_is_a_cycle(tmp_path):
    tree = lua_tree(tmp_path, {"s.lua": '#!lua\n--- @include "a"\n',
                               "includes/a.lua": '--- @include "a"\n'})
    with pytest.raises(ScriptSourceError,
                       match=re.escape("include cycle: includes/a.lua -> includes/a.lua")):
        load_script(tree, "s")


def test_a_missing_include_is_refused_naming_the_files_that_lead_to_it(tmp_path):
    tree = lua_tree(tmp_path, {"s.lua": '#!lua\n--- @include "a"\n',
                               "includes/a.lua": 'local x = 1\n--- @include "nope"\n'})
    with pytest.raises(ScriptSourceError, match=re.escape(
            "s.lua -> includes/a.lua includes includes/nope.lua, which does not exist")):
        load_script(tree, "s")


def test_a_missing_script_is_refused(tmp_path):
    with pytest.raises(ScriptSourceError, match="there is no script nope.lua"):
        load_script(lua_tree(tmp_path, {}), "nope")


@pytest.mark.parametrize(("where", "error"), [
    ("s.lua", 's.lua:5: includes "b" a second time (already on line 3)'),
    ("includes/a.lua", 'includes/a.lua:4: includes "b" a second time (already on line 2)'),
])
def test_a_file_naming_the_same_include_twice_is_refused(tmp_path, where, error):
    files = {"s.lua": '#!lua\n--- @include "a"\n', "includes/a.lua": "local a = 1\n",
             "includes/b.lua": "local b = 2\n"}
    files[where] += '--- @include "b"\n\n--- @include "b"\n'
    with pytest.raises(ScriptSourceError, match=re.escape(error)):
        load_script(lua_tree(tmp_path, files), "s")


@pytest.mark.parametrize("line", ["--- @include 'a'", '-- @include "a"', '--- @include "a.lua"',
                                  '  --- @include "a"', '---@include "a"'])
def test_a_malformed_include_line_is_refused_rather_than_left_as_a_comment(tmp_path, line):
    tree = lua_tree(tmp_path, {"s.lua": f"#!lua\nlocal x = 1\n{line}\n", "includes/a.lua": ""})
    with pytest.raises(ScriptSourceError, match="s.lua:3: malformed include"):
        load_script(tree, "s")


@pytest.mark.parametrize("shebang", ["#!lua", "#!lua flags=allow-oom",
                                     "#!lua flags=allow-oom,allow-cross-slot-keys"])
def test_the_script_s_shebang_stays_its_first_line_with_the_flags_it_declares(tmp_path, shebang):
    tree = lua_tree(tmp_path, {"s.lua": f'{shebang}\n--[[ header ]]\n--- @include "a"\n',
                               "includes/a.lua": "local a = 1\n"})
    assert load_script(tree, "s").source == f"{shebang}\n--[[ header ]]\nlocal a = 1\n"


@pytest.mark.parametrize("first_line", ["--[[ no shebang ]]", "", "#!/usr/bin/lua",
                                        "#!lua flags=", "#!lua flags=allow-oom allow-stale",
                                        "-- #!lua"])
def test_a_script_that_does_not_open_with_its_flags_is_refused(tmp_path, first_line):
    tree = lua_tree(tmp_path, {"s.lua": f"{first_line}\n#!lua\nreturn 1\n"})
    with pytest.raises(ScriptSourceError, match="s.lua:1: a script opens with its flags"):
        load_script(tree, "s")


def test_an_include_that_declares_flags_is_refused(tmp_path):
    tree = lua_tree(tmp_path, {"s.lua": '#!lua\n--- @include "a"\n',
                               "includes/a.lua": "#!lua flags=allow-oom\nlocal a = 1\n"})
    with pytest.raises(ScriptSourceError, match="includes/a.lua:1: an include has no '#!' line"):
        load_script(tree, "s")


def test_each_include_is_pasted_once_and_after_the_includes_it_names(tmp_path):
    # A diamond: the script and two includes all need `base`; `top` needs `middle` too.
    tree = lua_tree(tmp_path, {
        "s.lua": ('#!lua flags=allow-oom\nlocal rcall = redis.call\n--- @include "top"\n'
                  '--- @include "base"\n'
                  '--- @include "middle"\nreturn top()\n'),
        "includes/top.lua": ('-- top\n--- @include "base"\n--- @include "middle"\n'
                             'local function top() return middle() end\n'),
        "includes/middle.lua": '-- middle\n--- @include "base"\nlocal function middle() end\n',
        "includes/base.lua": "-- base\nlocal function base() end\n",
    })
    source = load_script(tree, "s").source
    assert "@include" not in source
    for part in ["-- base", "-- middle", "-- top", "local rcall = redis.call"]:
        assert source.count(part) == 1, part
    # the script's own line first, then each include where first named, its own includes
    # pasted at their lines inside it
    assert source.splitlines() == [
        "#!lua flags=allow-oom",
        "local rcall = redis.call",
        "-- top",
        "-- base",
        "local function base() end",
        "-- middle",
        "local function middle() end",
        "local function top() return middle() end",
        "return top()",
    ]


def test_the_same_tree_always_assembles_the_same_source_and_sha(tmp_path):
    tree = lua_tree(tmp_path, {"s.lua": '#!lua\n--- @include "a"\nreturn a\n',
                               "includes/a.lua": "local a = 1\n"})
    first, again = load_script(tree, "s"), load_script(tree, "s")
    assert first == again
    assert len(first.sha) == 40 and first.sha != load_script(
        lua_tree(tmp_path, {"includes/a.lua": "local a = 2\n"}), "s").sha


# The shipped Lua tree keeps the header discipline the loader relies on.


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_shipped_script_sets_rcall_itself_before_its_includes(name):
    lines = SHIPPED.joinpath(f"{name}.lua").read_text("utf-8").splitlines()
    first_include = next((i for i, line in enumerate(lines) if line.startswith("--- @include")),
                         len(lines))  # a script with no includes sets it all the same
    assert "local rcall = redis.call" in lines[:first_include]


@pytest.mark.parametrize("name", INCLUDE_NAMES)
def test_shipped_includes_call_redis_through_the_script_s_rcall_and_name_what_they_share(name):
    text = SHIPPED.joinpath("includes", f"{name}.lua").read_text("utf-8")
    header = text[:text.index("]]")]
    assert text.startswith("--[[")
    assert "Provides:" in header and "Needs:" in header
    assert not re.search(r"^\s*local\s+rcall\b", text, re.MULTILINE)
    assert "redis.call" not in text


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_shipped_script_header_lists_its_keys_and_arguments(name):
    text = SHIPPED.joinpath(f"{name}.lua").read_text("utf-8")
    header = text[text.index("--[["):text.index("]]")]
    code = text[text.index("]]"):]
    for table in ("KEYS", "ARGV"):
        assert table in header
        used = {int(n) for n in re.findall(rf"{table}\[(\d+)\]", code)}
        documented = {int(n) for n in re.findall(rf"{table}\[(\d+)", header)}
        assert used <= documented, f"{name}.lua: {table}{sorted(used - documented)} undocumented"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_shipped_script_is_sent_with_the_flags_its_file_declares(name):
    declared = SHIPPED.joinpath(f"{name}.lua").read_text("utf-8").splitlines()[0]
    assert declared.startswith("#!lua")
    assert script(name).source.splitlines()[0] == declared


def test_every_shipped_script_loads_into_redis_under_the_sha_rmq_calls_it_by(redis_url):
    with redis.Redis.from_url(redis_url) as r:
        for name in SCRIPT_NAMES:
            assert r.script_load(script(name).source) == script(name).sha, name


def test_out_of_memory_redis_refuses_exactly_the_shipped_scripts_that_do_not_allow_it(
        fresh_server):
    # Called with no keys and no arguments, a script Redis lets run fails at once on its
    # missing arguments (or does nothing): only the refusal tells the flags apart.
    server = fresh_server()
    with server.client() as r:
        for name in SCRIPT_NAMES:
            r.script_load(script(name).source)
        r.config_set("maxmemory", 1)
        refused = set()
        for name in SCRIPT_NAMES:
            try:
                r.evalsha(script(name).sha, 0)
            except redis.exceptions.OutOfMemoryError:
                refused.add(name)
            except redis.exceptions.ResponseError:
                pass  # it ran
        r.config_set("maxmemory", 0)
    declared = {name: SHIPPED.joinpath(f"{name}.lua").read_text("utf-8").splitlines()[0]
                for name in SCRIPT_NAMES}
    assert refused == {name for name, flags in declared.items() if "allow-oom" not in flags}
    # sends and requeues grow memory (docs/reliability.md, "Out of memory"); a history
    # sample or a heartbeat is not worth memory Redis does not have
    assert refused == {"enqueue", "requeue_dead", "history", "heartbeat"}
