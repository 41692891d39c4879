"""The Lua script loader (``rmq.storage.scripts``): every script assembled into one Functions
library and, the same code, as plain scripts; a script's flags taken from its first line,
includes resolved recursively, each once and before the code that needs it, and every fault
in the Lua tree (no flags, a cycle, a missing include, an include named twice) refused with
the files named. The loader is pure logic, tested on small Lua trees written for each test;
the shipped scripts are then checked for their header discipline (and the arguments the
claim and transaction scripts open with for names that agree with the client's), loaded
into a real Redis both ways, and their flags checked as Redis applies them. Last, the
client's use of them: a library lost on the server is loaded again, and a user refused
functions is served by the scripts."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import redis
from core_fixtures import make_client_fixture  # noqa: F401

from rmq.client.fallback import functions_refused, scripts_refused
from rmq.settings import TopicSettings
from rmq.storage import claim_calls
from rmq.storage.claim_calls import PROMOTE_LIMIT, ClaimArgs, claim_args
from rmq.storage.limits import ClaimLimit
from rmq.storage.scripts import ScriptSourceError, load_scripts, script
from rmq.storage.transactions import TxArgs

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
        load_scripts(tree)


def test_an_include_that_names_itself_is_a_cycle(tmp_path):
    tree = lua_tree(tmp_path, {"s.lua": '#!lua\n--- @include "a"\n',
                               "includes/a.lua": '--- @include "a"\n'})
    with pytest.raises(ScriptSourceError,
                       match=re.escape("include cycle: includes/a.lua -> includes/a.lua")):
        load_scripts(tree)


def test_a_missing_include_is_refused_naming_the_files_that_lead_to_it(tmp_path):
    tree = lua_tree(tmp_path, {"s.lua": '#!lua\n--- @include "a"\n',
                               "includes/a.lua": 'local x = 1\n--- @include "nope"\n'})
    with pytest.raises(ScriptSourceError, match=re.escape(
            "s.lua -> includes/a.lua includes includes/nope.lua, which does not exist")):
        load_scripts(tree)


def test_asking_for_a_script_that_is_not_shipped_is_refused():
    with pytest.raises(ScriptSourceError, match="there is no script nope.lua"):
        script("nope")


@pytest.mark.parametrize(("where", "error"), [
    ("s.lua", 's.lua:5: includes "b" a second time (already on line 3)'),
    ("includes/a.lua", 'includes/a.lua:4: includes "b" a second time (already on line 2)'),
])
def test_a_file_naming_the_same_include_twice_is_refused(tmp_path, where, error):
    files = {"s.lua": '#!lua\n--- @include "a"\n', "includes/a.lua": "local a = 1\n",
             "includes/b.lua": "local b = 2\n"}
    files[where] += '--- @include "b"\n\n--- @include "b"\n'
    with pytest.raises(ScriptSourceError, match=re.escape(error)):
        load_scripts(lua_tree(tmp_path, files))


@pytest.mark.parametrize("line", ["--- @include 'a'", '-- @include "a"', '--- @include "a.lua"',
                                  '  --- @include "a"', '---@include "a"'])
def test_a_malformed_include_line_is_refused_rather_than_left_as_a_comment(tmp_path, line):
    tree = lua_tree(tmp_path, {"s.lua": f"#!lua\nlocal x = 1\n{line}\n", "includes/a.lua": ""})
    with pytest.raises(ScriptSourceError, match="s.lua:3: malformed include"):
        load_scripts(tree)


@pytest.mark.parametrize(("shebang", "flags"), [
    ("#!lua", ()), ("#!lua flags=allow-oom", ("allow-oom",)),
    ("#!lua flags=allow-oom,allow-cross-slot-keys", ("allow-oom", "allow-cross-slot-keys"))])
def test_a_script_keeps_its_shebang_first_and_the_library_registers_its_flags(
        tmp_path, shebang, flags):
    tree = lua_tree(tmp_path, {"s.lua": f'{shebang}\n--[[ header ]]\n--- @include "a"\n',
                               "includes/a.lua": "local a = 1\n"})
    s = load_scripts(tree)["s"]
    assert s.flags == flags
    assert s.source.splitlines() == [shebang, "local rcall = redis.call", "local CALL = {}",
                                     "local a = 1", "--[[ header ]]"]
    lua_flags = ", ".join(repr(f) for f in flags)
    assert (f"redis.register_function{{function_name = '{s.function}', callback = serve(run_s),"
            f" flags = {{{lua_flags}}}}}") in s.library.source


@pytest.mark.parametrize("first_line", ["--[[ no shebang ]]", "", "#!/usr/bin/lua",
                                        "#!lua flags=", "#!lua flags=allow-oom allow-stale",
                                        "-- #!lua"])
def test_a_script_that_does_not_open_with_its_flags_is_refused(tmp_path, first_line):
    tree = lua_tree(tmp_path, {"s.lua": f"{first_line}\n#!lua\nreturn 1\n"})
    with pytest.raises(ScriptSourceError, match="s.lua:1: a script opens with its flags"):
        load_scripts(tree)


def test_an_include_that_declares_flags_is_refused(tmp_path):
    tree = lua_tree(tmp_path, {"s.lua": '#!lua\n--- @include "a"\n',
                               "includes/a.lua": "#!lua flags=allow-oom\nlocal a = 1\n"})
    with pytest.raises(ScriptSourceError, match="includes/a.lua:1: an include has no '#!' line"):
        load_scripts(tree)


def test_each_include_is_pasted_once_and_after_the_includes_it_names(tmp_path):
    # A diamond: the script and two includes all need `base`; `top` needs `middle` too.
    tree = lua_tree(tmp_path, {
        "s.lua": ('#!lua flags=allow-oom\n--- @include "top"\n--- @include "base"\n'
                  '--- @include "middle"\nreturn top()\n'),
        "t.lua": '#!lua\n--- @include "middle"\nreturn middle()\n',
        "includes/top.lua": ('-- top\n--- @include "base"\n--- @include "middle"\n'
                             'local function top() return middle() end\n'),
        "includes/middle.lua": '-- middle\n--- @include "base"\nlocal function middle() end\n',
        "includes/base.lua": "-- base\nlocal function base() end\n",
    })
    scripts = load_scripts(tree)
    # as a script: the prelude, then each include once, its own includes before it, then
    # the script's code
    assert scripts["s"].source.splitlines() == [
        "#!lua flags=allow-oom", "local rcall = redis.call", "local CALL = {}",
        "-- base", "local function base() end",
        "-- middle", "local function middle() end",
        "-- top", "local function top() return middle() end",
        "return top()",
    ]
    assert scripts["t"].source.splitlines()[3:] == [
        "-- base", "local function base() end", "-- middle", "local function middle() end",
        "return middle()"]
    # the library: every include once for all scripts, before the scripts' bodies
    library = scripts["s"].library
    assert scripts["t"].library == library and "@include" not in library.source
    for part in ["-- base", "-- middle", "-- top", "local function run_s()",
                 "local function run_t()"]:
        assert library.source.count(part) == 1, part
    assert (library.source.index("-- base") < library.source.index("-- middle")
            < library.source.index("-- top") < library.source.index("local function run_s()"))
    assert library.source.startswith(f"#!lua name={library.name}\n")


def test_the_same_tree_always_assembles_the_same_code_and_names(tmp_path):
    tree = lua_tree(tmp_path, {"s.lua": '#!lua\n--- @include "a"\nreturn a\n',
                               "includes/a.lua": "local a = 1\n"})
    first, again = load_scripts(tree)["s"], load_scripts(tree)["s"]
    assert first == again and first.library == again.library
    changed = load_scripts(lua_tree(tmp_path, {"includes/a.lua": "local a = 2\n"}))["s"]
    assert len(first.sha) == 40 and first.sha != changed.sha
    # another version's library has another name, so both can be loaded on one server
    assert re.fullmatch(r"rmq_[0-9a-f]{12}", first.library.name)
    assert changed.library.name != first.library.name
    assert first.function == f"{first.library.name}_s"


# The shipped Lua tree keeps the header discipline the loader relies on.


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_shipped_scripts_call_redis_through_the_prelude_s_rcall(name):
    # rcall is set by the prelude of each form (a library cannot read redis.call at load)
    text = SHIPPED.joinpath(f"{name}.lua").read_text("utf-8")
    assert "redis.call" not in text and not re.search(r"\blocal\s+rcall\b", text)
    assert "rcall(" in script(name).source


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


# The arguments the claim scripts and the transaction scripts open with are named on both
# sides: the NamedTuple the client builds them with, and the include that reads them.
ARGUMENT_INCLUDES = {"claim_args": (ClaimArgs, {"claim", "claim_heads"}),
                     "tx_args": (TxArgs, {n for n in SCRIPT_NAMES if n.startswith("tx_")})}


def including(include: str) -> set[str]:
    return {name for name in SCRIPT_NAMES
            if f'--- @include "{include}"' in SHIPPED.joinpath(f"{name}.lua").read_text("utf-8")}


@pytest.mark.parametrize("include", sorted(ARGUMENT_INCLUDES))
def test_an_argument_include_reads_the_arguments_in_the_order_and_names_the_client_builds_them(
        include):
    arguments, scripts = ARGUMENT_INCLUDES[include]
    names = list(arguments._fields)
    text = SHIPPED.joinpath("includes", f"{include}.lua").read_text("utf-8")
    header, code = text.split("]]", 1)
    documented = re.findall(r"^\s*ARGV\[(\d+)\]\s+(\w+)\s", header, re.MULTILINE)
    assert documented == [(str(n), name) for n, name in enumerate(names, start=1)]
    ((locals_, count),) = re.findall(r"local\s+([\w\s,]+?)\s*=\s*unpack\(ARGV, 1, (\d+)\)",
                                     code)
    assert re.split(r"\s*,\s*", locals_.strip()) == names and int(count) == len(names)
    assert including(include) == scripts


def test_a_claim_s_arguments_each_land_in_the_field_of_their_name(monkeypatch):
    # every value distinct, so that two arguments built in each other's place cannot pass
    monkeypatch.setattr(claim_calls, "SERIAL_SCAN", PROMOTE_LIMIT - 1)
    args = claim_args(TopicSettings(serial_keys=True, merge="key"), generation="G", now=11,
                      count=7, lease_ms=33, holder="H", group="grp", limit=ClaimLimit("W", 44),
                      trace="T", supersede=True)
    assert args._asdict() == {
        "now": 11, "max_count": 7, "lease_ms": 33, "serial": 1, "promote_limit": PROMOTE_LIMIT,
        "scan": PROMOTE_LIMIT - 1, "generation": "G", "holder": "H", "limit_group": "grp",
        "limit_waiter": "W", "limit_wait_ms": 44, "trace": "T", "by_key": 1,
        "supersede": 1}
    share = args.bounded(PROMOTE_LIMIT + 5)  # a cluster's share: a serial scan as deep
    assert (share.max_count, share.scan) == (PROMOTE_LIMIT + 5, PROMOTE_LIMIT + 5)
    unlimited = claim_args(TopicSettings(), generation="G", now=11, count=7, lease_ms=33,
                           holder="H", group="grp", limit=None)
    assert (unlimited.serial, unlimited.scan, unlimited.limit_group, unlimited.limit_waiter,
            unlimited.limit_wait_ms, unlimited.trace, unlimited.by_key) == (0, 7, "", "", 0, "", 0)


@pytest.mark.parametrize(("include", "name"), sorted(
    (include, name) for include, (_, scripts) in ARGUMENT_INCLUDES.items() for name in scripts))
def test_a_script_reads_its_leading_arguments_only_through_their_include_and_names_each(
        include, name):
    names = ARGUMENT_INCLUDES[include][0]._fields
    text = SHIPPED.joinpath(f"{name}.lua").read_text("utf-8")
    header, code = text[text.index("--[["):text.index("]]")], text[text.index("]]"):]
    # the header's line for them names the include, then each argument, in order
    line = re.search(rf"ARGV\[1\.\.{len(names)}\]\s+(.*?)(?=\n  (?:ARGV|KEYS)\[|\n\n)", header,
                     re.DOTALL)
    assert line and f"includes/{include}.lua" in line.group(1), name
    words = re.findall(r"\w+", line.group(1))
    assert list(dict.fromkeys(w for w in words if w in names)) == list(names), name
    assert not {int(n) for n in re.findall(r"ARGV\[(\d+)\]", code)} & set(
        range(1, len(names) + 1)), f"{name}.lua reads ARGV[1..{len(names)}] directly"
    # its locals: the include's names, or the first of them (after claim_args' "gone")
    reads = re.findall(rf"local\s+([\w\s,]+?)\s*=\s*{include}\(", code)
    assert reads, f"{name}.lua does not read them through {include}()"
    for read in reads:
        read_names = re.split(r"\s*,\s*", read.strip())
        if include == "claim_args":
            assert read_names.pop(0) == "gone", name
        assert read_names == list(names[:len(read_names)]), name


def fields(reply: Any) -> dict[bytes, Any]:
    """A map reply as a dict: newer redis-py parses FUNCTION LIST's, older ones (the floor
    versions) return the flat list."""
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))


def declared_flags(name: str) -> tuple[str, ...]:
    first = SHIPPED.joinpath(f"{name}.lua").read_text("utf-8").splitlines()[0]
    assert first.startswith("#!lua")
    return tuple(first.removeprefix("#!lua").removeprefix(" flags=").split(",")) if (
        "flags=" in first) else ()


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_shipped_script_is_sent_with_the_flags_its_file_declares(name):
    declared = SHIPPED.joinpath(f"{name}.lua").read_text("utf-8").splitlines()[0]
    assert script(name).source.splitlines()[0] == declared
    assert script(name).flags == declared_flags(name)


def test_the_shipped_library_loads_into_redis_with_every_script_and_its_flags(fresh_server):
    server = fresh_server()
    library = script(SCRIPT_NAMES[0]).library
    with server.client() as r:
        assert r.execute_command("FUNCTION", "LOAD", library.source) == library.name.encode()
        (listed,) = r.execute_command("FUNCTION", "LIST", "LIBRARYNAME", library.name)
        functions = {}
        for function in fields(listed)[b"functions"]:
            f = fields(function)
            functions[f[b"name"].decode()] = tuple(flag.decode() for flag in f[b"flags"])
        for name in SCRIPT_NAMES:  # plain scripts: under the SHA1 the client names them by
            assert r.script_load(script(name).source) == script(name).sha, name
    assert functions == {script(name).function: declared_flags(name) for name in SCRIPT_NAMES}


def test_out_of_memory_redis_refuses_exactly_the_shipped_scripts_that_do_not_allow_it(
        fresh_server):
    # Called with no keys and no arguments, a script Redis lets run fails at once on its
    # missing arguments (or does nothing): only the refusal tells the flags apart.
    server = fresh_server()
    with server.client() as r:
        r.execute_command("FUNCTION", "LOAD", script(SCRIPT_NAMES[0]).library.source)
        for name in SCRIPT_NAMES:
            r.script_load(script(name).source)
        r.config_set("maxmemory", 1)
        refused: dict[str, set[str]] = {"FCALL": set(), "EVALSHA": set()}
        for name in SCRIPT_NAMES:
            for command, code in (("FCALL", script(name).function),
                                  ("EVALSHA", script(name).sha)):
                try:
                    r.execute_command(command, code, 0)
                except redis.exceptions.OutOfMemoryError:
                    refused[command].add(name)
                except redis.exceptions.ResponseError:
                    pass  # it ran
        r.config_set("maxmemory", 0)
    growing = {name for name in SCRIPT_NAMES if "allow-oom" not in declared_flags(name)}
    assert refused == {"FCALL": growing, "EVALSHA": growing}
    # sends, requeues, a transaction's half sends, commits and check records and a group's
    # binding grow memory (docs/reliability.md, "Out of memory"); a history sample is not
    # worth memory Redis does not have
    assert growing == {"enqueue", "requeue_dead", "history", "tx_send", "tx_commit",
                       "tx_check", "bind"}


# The client's use of the library.


def nodes(redis_url: str) -> list[redis.Redis]:
    """A client per master of the deployment behind ``redis_url``."""
    with redis.Redis.from_url(redis_url) as probe:
        if probe.info("cluster").get("cluster_enabled") != 1:
            return [redis.Redis.from_url(redis_url)]
    with redis.RedisCluster.from_url(redis_url) as cluster:
        return [redis.Redis(host=n.host, port=n.port) for n in cluster.get_primaries()]


def test_a_library_the_server_lost_is_loaded_again_and_nothing_is_lost(make_client, redis_url):
    # A restart without persistence, or an operator's FUNCTION FLUSH, leaves the client
    # calling functions the server no longer has.
    client = make_client()
    client.create_topic("t", slots=4)
    client.send("t", b"before")
    for node in nodes(redis_url):
        with node:
            node.execute_command("FUNCTION", "FLUSH")
    client.send("t", b"after")
    assert client.send_many("t", [b"one", b"two", b"after"]).merged == 1
    assert sorted(m.body for m in client.claim("t", count=10)) == [
        b"after", b"before", b"one", b"two"]
    for node in nodes(redis_url):
        with node:
            assert [fields(lib)[b"library_name"] for lib in node.execute_command(
                "FUNCTION", "LIST")] == [script("enqueue").library.name.encode()]


@pytest.mark.single_node  # on a cluster, publishes from two nodes may arrive in any order
def test_per_call_state_does_not_outlive_its_call_in_the_library(make_client, redis_url):
    # The library's includes live as long as the server: what one call keeps (here whether
    # to wake consumers) must start fresh on the next, or every send would publish.
    client = make_client()
    client.create_topic("t", slots=1)
    with redis.Redis.from_url(redis_url) as r:
        pubsub = r.pubsub()
        pubsub.subscribe("rmq:wake:t")
        assert pubsub.get_message(timeout=5)["type"] == "subscribe"
        client.send("t", b"first")  # ready was empty: wakes sleeping consumers ("1")
        client.send("t", b"second")  # ready was not: nothing to wake
        client.send("t", b"third")
        client.wake("t")  # a marker ("wake"): every publish before it arrives before it
        published = []
        while not published or published[-1] != b"wake":
            published.append(pubsub.get_message(timeout=5)["data"])
        pubsub.close()
    assert published == [b"1", b"wake"]


@pytest.mark.parametrize(("reply", "refused"), [
    (redis.exceptions.NoPermissionError(
        "User t has no permissions to run the 'fcall' command"), True),
    (redis.exceptions.NoPermissionError(
        "User t has no permissions to run the 'function|load' command"), True),
    (redis.exceptions.ResponseError("unknown command 'FCALL', with args beginning with: "),
     True),
    (redis.exceptions.ResponseError("unknown command `FCALL`, with args beginning with: "),
     True),  # Redis 6 quotes so
    # a refusal inside RMQ's function (a key this user may not touch) is the user's answer
    (redis.exceptions.NoPermissionError(
        "No permissions to access a key script: f, on @user_function:3."), False),
    (redis.exceptions.ResponseError("Function not found"), False),  # loaded, then called
])
def test_the_client_tells_a_refusal_of_functions_from_other_errors(reply, refused):
    assert functions_refused(reply) is refused


@pytest.mark.parametrize(("reply", "refused"), [
    (redis.exceptions.NoPermissionError(
        "User t has no permissions to run the 'evalsha' command"), True),
    (redis.exceptions.NoPermissionError(
        "User t has no permissions to run the 'eval' command"), True),
    (redis.exceptions.NoPermissionError(
        "User t has no permissions to run the 'fcall' command"), False),
    # a refusal inside RMQ's script (a key this user may not touch) is the user's answer
    (redis.exceptions.NoPermissionError(
        "No permissions to access a key script: f, on @user_script:3."), False),
    (redis.exceptions.NoScriptError("No matching script"), False),
])
def test_the_client_tells_a_refusal_of_scripts_from_other_errors(reply, refused):
    assert scripts_refused(reply) is refused
