"""The MCP surface beyond the basic tools, each through a real stdio client (`memsafe serve` as a
child process): settings and decay, listing with cursors, prompts and resources, replies that stay
under a client's output cap whatever is stored, the client's workspace (roots, CLAUDE_PROJECT_DIR,
MEMSAFE_WORKSPACE), progress notifications, and an HTTP server that restarts under its clients."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from typer.testing import CliRunner

from memsafe import api, tokens
from memsafe.bench.http import HttpServer
from memsafe.bench.mcp import RawClient, tools_list_tokens
from memsafe.cli import app
from memsafe.mcp import prompts as mcp_prompts
from memsafe.mcp import tools as server

CAP = 20_000  # tokens (cl100k) no reply may exceed


def text_of(result) -> str:
    content = result["content"] if isinstance(result, dict) else result.content
    return "\n".join(c["text"] if isinstance(c, dict) else c.text for c in content)


def is_error(result) -> bool:
    return bool(result["isError"] if isinstance(result, dict) else result.is_error)


def cli(db: Path, *args: str, env: dict | None = None):
    result = CliRunner().invoke(app, ["--db", str(db), *args], env=env)
    return result


async def with_session(db: Path, cwd: Path, home: Path, body, *, env: dict | None = None, args: tuple = (),
                       roots=None, errlog: Path | None = None):
    """Spawn `memsafe --db DB serve ARGS` in `cwd` through the SDK's stdio client and run body(session).
    `roots`: a list of root URIs the client answers roots/list with (a list the test may change), or
    None for a client without the roots capability."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "memsafe", "--db", str(db), "serve", *args],
                                   env={"MEMSAFE_HOME": str(home / ".memsafe"), "HOME": str(home), **(env or {})},
                                   cwd=str(cwd))

    async def list_roots(context):
        return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in roots])

    errlog = errlog or cwd / "server.err"
    with open(errlog, "a", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write, list_roots_callback=list_roots if roots is not None else None) as s:
                await s.initialize()
                return await body(s)


@pytest.fixture
def where(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return {"db": tmp_path / "db" / "memory.db", "home": home}


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


# ---------------------------------------------------------------------------------------------
# tools/list: within budget, and every tool the CLI's settings and decay need


def test_tools_list_stays_within_1000_tokens_with_configure_and_listing(db_path):
    srv = server.build_server(str(db_path))

    async def go():
        return [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in await srv.list_tools()]

    listing = {"tools": anyio.run(go)}
    names = {t["name"] for t in listing["tools"]}
    assert {"configure", "recall", "forget", "get_memory"} <= names and "purge_memory" not in names
    assert tools_list_tokens(listing)["whole"] <= 1000
    recall = next(t for t in listing["tools"] if t["name"] == "recall")["inputSchema"]["properties"]
    assert {"since", "source", "status", "cursor", "kind", "tags"} <= set(recall)
    configure = next(t for t in listing["tools"] if t["name"] == "configure")["inputSchema"]["properties"]
    assert configure["decay"]["enum"] == ["", "dry_run", "run"]


# ---------------------------------------------------------------------------------------------
# configure: settings and decay


def test_configure_reads_sets_and_refuses_like_config_and_decays_like_memsafe_decay(where, tmp_path):
    db, home = where["db"], where["home"]
    then = {"MEMSAFE_NOW": "2026-01-01T00:00:00Z", "MEMSAFE_HOME": str(home / ".memsafe")}
    for n in range(4):
        assert cli(db, "remember", f"Scratch note {n}: the build cache lives in /tmp/cache-{n}", "--kind",
                   "ephemeral", env=then).exit_code == 0
    assert cli(db, "remember", "Deploys use blue-green switches", "--kind", "decision", "--tag", "pinned",
               env=then).exit_code == 0
    later = {"MEMSAFE_NOW": "2027-01-01T00:00:00Z"}

    async def body(s: ClientSession):
        call = s.call_tool
        out = {"all": await call("configure", {})}
        out["one"] = await call("configure", {"key": "near_duplicate_threshold"})
        out["set"] = await call("configure", {"key": "near_duplicate_threshold", "value": "0.95"})
        out["bad_value"] = await call("configure", {"key": "near_duplicate_threshold", "value": "7"})
        out["bad_type"] = await call("configure", {"key": "recall_limit", "value": "many"})
        out["bad_choice"] = await call("configure", {"key": "project_mode", "value": "nearest"})
        out["unknown"] = await call("configure", {"key": "colour", "value": "blue"})
        out["no_key"] = await call("configure", {"value": "3"})
        out["db"] = await call("configure", {"key": "db", "value": "/tmp/elsewhere.db"})
        out["both_zero"] = await call("configure", {"key": "weight_lexical", "value": "0"})
        out["both_zero2"] = await call("configure", {"key": "weight_vector", "value": "0"})
        out["mixed"] = await call("configure", {"key": "recall_limit", "decay": "run"})
        out["dry"] = await call("configure", {"decay": "dry_run"})
        out["run"] = await call("configure", {"decay": "run"})
        out["again"] = await call("configure", {"decay": "dry_run"})
        out["reset"] = await call("configure", {"key": "near_duplicate_threshold", "reset": True})
        return out

    # the CLI's report of the same dry run, at the same instant, before the server runs it
    expected = cli(db, "decay", "--dry-run", env={**later, "MEMSAFE_HOME": str(home / ".memsafe")}).stdout
    r = anyio.run(lambda: with_session(db, tmp_path, home, body, env=later))
    listed = text_of(r["all"])
    assert all(f"{key} = " in listed for key in api.CONFIG_KEYS)
    assert text_of(r["one"]).startswith("near_duplicate_threshold = 0.92: ")
    assert text_of(r["set"]).startswith("set near_duplicate_threshold = 0.95 (default 0.92)")
    for bad, words in (("bad_value", "between 0.5 and 1"), ("bad_type", "recall_limit"), ("bad_choice", "git-root"),
                       ("unknown", "known keys: token_budget"), ("no_key", "name the key"),
                       ("db", "config set db"), ("both_zero2", "cannot both be 0"), ("mixed", "decay runs alone")):
        assert is_error(r[bad]) and words in text_of(r[bad]) and "\n" not in text_of(r[bad]), (bad, text_of(r[bad]))
    assert not is_error(r["both_zero"])  # one weight at 0 is allowed, both are not
    dry, run = text_of(r["dry"]), text_of(r["run"])
    assert dry.splitlines() == [line.rstrip() for line in expected.splitlines()]  # the same report as the CLI
    assert "(dry run: nothing written)" in dry and "4 would change" in dry and "1 protected" in dry
    assert run.splitlines()[1:] == dry.splitlines()[1:] and "4 changed" in run.splitlines()[0]
    assert "0 would change" in text_of(r["again"])  # the run wrote, the dry run had not
    assert text_of(r["reset"]).startswith("near_duplicate_threshold reset; near_duplicate_threshold = 0.92")
    opened = api.open_store(str(db))
    try:
        assert api.config_get(opened.store, "weight_vector") == 1.0 or api.config_get(opened.store, "weight_vector")
        assert api.config_get(opened.store, "weight_lexical") == 0  # what was set stays; refusals changed nothing
        assert api.config_get(opened.store, "recall_limit") == api.CONFIG_KEYS["recall_limit"].default
    finally:
        opened.store.close()


# ---------------------------------------------------------------------------------------------
# Listing: recall with an empty query


def test_listing_pages_through_every_memory_with_filters_and_refuses_foreign_cursors(where, tmp_path):
    db, home = where["db"], where["home"]
    old = {"MEMSAFE_NOW": "2026-01-01T00:00:00Z", "MEMSAFE_HOME": str(home / ".memsafe")}
    for n in range(5):
        cli(db, "remember", f"Old note {n} about the billing service", "--project", "web", env=old)
    for n in range(23):
        kind = "decision" if n % 4 == 0 else "fact"
        args = ["--tag", "ops"] if n % 5 == 0 else []
        assert cli(db, "remember", f"Note {n}: service {n} listens on port {8000 + n}", "--kind", kind,
                   "--project", "web", *args, env={"MEMSAFE_HOME": str(home / ".memsafe")}).exit_code == 0
    cli(db, "remember", "A note of another project", "--project", "api", env={"MEMSAFE_HOME": str(home / ".memsafe")})

    async def body(s: ClientSession):
        call = s.call_tool
        await call("remember", {"content": "The agent found the flaky test in test_io.py"})
        await call("forget", {"id": 7})
        pages, cursor = [], ""
        while True:
            page = text_of(await call("recall", {"query": "", "limit": 7, "cursor": cursor}))
            pages.append(page)
            found = re.search(r"^Note: more: .*cursor=(\S+)$", page, re.M)
            if not found:
                break
            cursor = found.group(1)
        out = {"pages": pages}
        first = text_of(await call("recall", {"query": "", "limit": 5}))
        cursor = re.search(r"^Note: more: .*cursor=(\S+)$", first, re.M).group(1)
        for name, args in {
            "decisions": {"kind": "decision"},
            "ops": {"tags": ["ops"]},
            "agent": {"source": "agent"},
            "user": {"source": "user", "limit": 100},
            "forgotten": {"status": "forgotten"},
            "recent": {"since": "30 days ago", "limit": 100},
            "everything": {"status": "all", "all_projects": True, "limit": 100},
            "forged": {"cursor": "bm90IGEgY3Vyc29y"},
            "garbage": {"cursor": "%%%"},
            "tampered": {"limit": 5, "cursor": cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB")},
            "other_query": {"kind": "fact", "cursor": cursor},
            "other_project": {"project": "api", "cursor": cursor},
            "bad_status": {"status": "deleted"},
            "bad_source": {"source": "rumour"},
            "bad_kind": {"kind": "rumour"},
            "bad_since": {"since": "the day after never"},
            "as_of": {"as_of": "yesterday"},
        }.items():
            out[name] = await call("recall", {"query": "", **args})
        out["search_with_cursor"] = await call("recall", {"query": "port", "cursor": cursor})
        out["search_since"] = await call("recall", {"query": "billing service", "since": "30 days ago"})
        return out

    r = anyio.run(lambda: with_session(db, tmp_path, home, body, args=("--project", "web")))
    ids = [int(i) for page in r["pages"] for i in re.findall(r"^\[#(\d+) ", page, re.M)]
    assert len(ids) == len(set(ids)) == 28  # 5 old + 23 + the agent's - the forgotten one, no repeats
    assert ids == sorted(ids, reverse=True) and 7 not in ids and 29 not in ids  # project api's stays out
    assert r["pages"][-1].endswith("Note: end of the list")
    ids_of = {name: [int(i) for i in re.findall(r"^\[#(\d+) ", text_of(res), re.M)] for name, res in r.items()
              if name != "pages" and not is_error(res)}
    assert ids_of["decisions"] and all("decision" in line for line in text_of(r["decisions"]).splitlines()
                                       if line.startswith("[#"))
    assert len(ids_of["ops"]) == 5 and "tags=ops" in text_of(r["ops"])
    assert ids_of["agent"] == [30] and 30 not in ids_of["user"] and len(ids_of["user"]) == 27
    assert ids_of["forgotten"] == [7] and "status=forgotten" in text_of(r["forgotten"])
    assert len(ids_of["recent"]) == 23 and not set(ids_of["recent"]) & {1, 2, 3, 4, 5}
    assert 29 in ids_of["everything"] and 7 in ids_of["everything"]
    for bad, words in (("forged", "not one a listing gave"), ("garbage", "not one a listing gave"),
                       ("tampered", "cursor"), ("other_query", "another listing"), ("other_project", "another listing"),
                       ("bad_status", "active, archived"), ("bad_source", "agent"), ("bad_kind", "decision"),
                       ("bad_since", "since"), ("as_of", "needs a query"), ("search_with_cursor", "listing")):
        assert is_error(r[bad]) and words in text_of(r[bad]) and "\n" not in text_of(r[bad]), (bad, text_of(r[bad]))
    assert "billing" not in text_of(r["search_since"])  # since applies to a search too


# ---------------------------------------------------------------------------------------------
# Prompts and resources


def test_prompts_and_resources_carry_the_projects_memory_and_refuse_what_is_outside_it(where, tmp_path):
    db, home = where["db"], where["home"]
    env = {"MEMSAFE_HOME": str(home / ".memsafe")}
    cli(db, "remember", "We deploy with blue-green switches behind the load balancer", "--kind", "decision",
        "--project", "web", env=env)
    cli(db, "remember", "The user prefers tabs over spaces", "--kind", "preference", "--project", "web", env=env)
    cli(db, "remember", "Release notes are written by the on-call engineer", "--project", "web", "--tag", "pinned",
        env=env)
    other = json.loads(cli(db, "remember", "AlphaVault rotates keys monthly", "--project", "api", "--json",
                           env=env).stdout)["id"]
    doomed = json.loads(cli(db, "remember", "A memory to purge", "--project", "web", "--json", env=env).stdout)["id"]
    cli(db, "purge", str(doomed), "--yes", "--project", "web", env=env)

    async def body(s: ClientSession):
        out = {"prompts": (await s.list_prompts()).prompts, "resources": (await s.list_resources()).resources,
               "templates": (await s.list_resource_templates()).resource_templates}
        out["topic"] = await s.get_prompt("recall-topic", {"topic": "how do we deploy"})
        out["review"] = await s.get_prompt("review-week", {})
        out["save"] = await s.get_prompt("save-session", {})
        for name, args in (("missing", ("recall-topic", {})), ("blank", ("recall-topic", {"topic": "  "})),
                           ("bad_days", ("review-week", {"days": "soon"})), ("no_prompt", ("no-such", {}))):
            try:
                await s.get_prompt(*args)
                out[name] = None
            except MCPError as exc:
                out[name] = exc.error
        out["confirmed"] = await s.call_tool("update_memory", {"id": 2, "confirm": True})
        out["confirm_foreign"] = await s.call_tool("update_memory", {"id": other, "confirm": True})
        out["brief"] = await s.read_resource("memsafe://brief")
        out["recent"] = await s.read_resource("memsafe://recent")
        out["memory"] = await s.read_resource("memsafe://memory/1")
        for name, uri in (("foreign", f"memsafe://memory/{other}"), ("purged", f"memsafe://memory/{doomed}"),
                          ("missing_memory", "memsafe://memory/4242"), ("not_a_number", "memsafe://memory/abc"),
                          ("unknown_uri", "memsafe://nothing")):
            try:
                await s.read_resource(uri)
                out[name] = None
            except MCPError as exc:
                out[name] = exc.error
        return out

    r = anyio.run(lambda: with_session(db, tmp_path, home, body, args=("--project", "web")))
    assert [p.name for p in r["prompts"]] == list(mcp_prompts.PROMPTS)
    assert next(p for p in r["prompts"] if p.name == "recall-topic").arguments[0].required
    assert {str(x.uri) for x in r["resources"]} == set(mcp_prompts.RESOURCES)
    assert [t.uri_template for t in r["templates"]] == [mcp_prompts.MEMORY_TEMPLATE]
    topic = r["topic"].messages[0].content.text
    assert "blue-green" in topic and "#1" in topic and "citing" in topic and "AlphaVault" not in topic
    review = r["review"].messages[0].content.text
    assert "tabs over spaces" in review and "update_memory" in review and "AlphaVault" not in review
    assert "remember" in r["save"].messages[0].content.text and "confirm=true" in review
    # the review's "right" answer: confirmed, without a new version of the text
    assert re.match(r"Confirmed \[#2 preference .*\]; it now decays with a half-life of \d+ days$",
                    text_of(r["confirmed"])), text_of(r["confirmed"])
    assert is_error(r["confirm_foreign"]) and "AlphaVault" not in text_of(r["confirm_foreign"])
    assert r["missing"].message == "prompt recall-topic needs the argument topic"
    assert "empty" in r["blank"].message and "whole number" in r["bad_days"].message
    assert "no prompt 'no-such'; the prompts are recall-topic" in r["no_prompt"].message
    for name in ("missing", "blank", "bad_days", "no_prompt"):
        assert r[name].code == types.INVALID_PARAMS, (name, r[name])
    brief = r["brief"].contents[0].text
    assert "project web" in brief and "blue-green" in brief and "on-call" in brief and "AlphaVault" not in brief
    assert "tabs over spaces" in r["recent"].contents[0].text and "AlphaVault" not in r["recent"].contents[0].text
    assert r["memory"].contents[0].text.startswith("[#1 decision")
    for name, words in (("foreign", "no memory with id"), ("purged", "purged"), ("missing_memory", "4242"),
                        ("not_a_number", "number")):
        assert r[name] is not None and r[name].code == types.INVALID_PARAMS, (name, r[name])
        assert words in r[name].message, (name, r[name])
        assert "AlphaVault" not in r[name].message
    assert r["unknown_uri"] is not None


# ---------------------------------------------------------------------------------------------
# Every reply bounded


def test_no_reply_exceeds_20000_tokens_and_long_text_comes_in_parts(where, tmp_path):
    db, home = where["db"], where["home"]
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()
    big = "\n".join(f"line {n}: " + " ".join(words[(n + k) % len(words)] for k in range(12)) for n in range(8200))
    assert 550_000 < len(big.encode()) < api.MAX_CONTENT_CHARS
    env = {"MEMSAFE_NO_MODEL": "1"}
    sizes: dict[str, int] = {}

    async def body(s: ClientSession):
        call = s.call_tool

        async def measured(label, name, args):
            result = await call(name, args)
            text = text_of(result)
            sizes[label] = max(sizes.get(label, 0), tokens.count(text))
            return result, text

        first = text_of(await call("remember", {"content": big, "tags": ["huge"]}))
        memory_id = int(re.search(r"#(\d+)", first).group(1))
        acks = []
        for n in range(3):
            acks.append((await measured("update", "update_memory", {"id": memory_id, "content": f"v{n} {big}"}))[1])
        for n in range(60):
            await call("remember", {"content": f"gamma note {n}: " + " ".join(words * 40)})
        parts, offset = [], 0
        while True:
            _, text = await measured("get_memory", "get_memory", {"id": memory_id, "offset": offset})
            parts.append(text)
            found = re.search(r"offset=(\d+)$", text)
            if not found:
                break
            offset = int(found.group(1))
        history, offset = [], 0
        while True:
            _, text = await measured("history", "get_memory", {"id": memory_id, "history": True, "offset": offset})
            history.append(text)
            found = re.search(r"history=true offset=(\d+)$", text, re.M)
            if not found:
                break
            offset = int(found.group(1))
        _, recalled = await measured("recall", "recall", {"query": "gamma delta", "budget": 1_000_000, "limit": 1000})
        _, listed = await measured("listing", "recall", {"query": "", "limit": 100})
        triples = [[f"Service{n}-" + "x" * 100, "depends_on", "CoreHub"] for n in range(800)]
        assert not is_error(await call("relate_entities", {"relations": triples, "create": True}))
        _, graph = await measured("graph", "query_graph", {"entity": "CoreHub", "depth": 3})
        resource = (await s.read_resource(f"memsafe://memory/{memory_id}")).contents[0].text
        sizes["resource"] = tokens.count(resource)
        bad_offset = await call("get_memory", {"id": memory_id, "offset": 10**9})
        return acks, parts, history, recalled, listed, graph, resource, bad_offset

    acks, parts, history, recalled, listed, graph, resource, bad_offset = anyio.run(
        lambda: with_session(db, tmp_path, home, body, env=env))
    print("largest replies (tokens):", sizes)
    assert max(sizes.values()) <= CAP, sizes
    # a write's acknowledgement names the memory and never echoes the body
    assert all(a.startswith("Updated [#1 ") and "alpha" not in a and tokens.count(a) < 100 for a in acks)
    # the parts, unframed, are the memory's text exactly
    texts = []
    for part in parts:
        framed = [line for line in part.splitlines()[1:] if not line.startswith("Note: ")]
        texts.append("\n".join(line[2:] for line in framed))
    assert len(parts) > 3 and "".join(texts) == f"v2 {big}"
    assert "Note: characters 0 to " in parts[0]
    assert "cut" in parts[0].splitlines()[0]
    assert len(history) >= 1 and "4 versions" in history[0] and "memsafe history" in history[0]
    assert "budget lowered to 16,000 tokens" in recalled
    assert "cut" in resource.splitlines()[0] and "offset=" in resource
    assert is_error(bad_offset) and "outside the text" in text_of(bad_offset)
    assert "CoreHub" in graph and (graph.endswith("lower depth, or query a narrower entity") or sizes["graph"] < CAP)


def test_bounded_cuts_at_a_line_end_and_says_how_to_ask_for_less():
    text = "\n".join(f"[#{n} fact]\n  " + "word " * 50 for n in range(2000))
    cut = server.bounded(text, 1000, hint="lower the limit")
    assert tokens.count(cut) <= 1000 and cut.endswith("lower the limit") and "reply cut at 1,000 tokens" in cut
    assert text.startswith(cut.rsplit("\nNote: ", 1)[0])
    assert server.bounded("short", 1000) == "short"


# ---------------------------------------------------------------------------------------------
# The client's workspace decides the project


def test_client_roots_claude_project_dir_and_memsafe_workspace_decide_the_project(where, tmp_path):
    db, home = where["db"], where["home"]
    repo_a, repo_b = git_repo(tmp_path / "code" / "a"), git_repo(tmp_path / "code" / "b")
    env = {"MEMSAFE_HOME": str(home / ".memsafe")}
    for repo, text in ((repo_a, "Repository A builds with make ship"), (repo_b, "Repository B builds with cargo")):
        done = CliRunner().invoke(app, ["--db", str(db), "remember", text, "--project", str(repo)], env=env)
        assert done.exit_code == 0, done.output

    async def recall_builds(s: ClientSession) -> str:
        return text_of(await s.call_tool("recall", {"query": "how does this repository build"}))

    async def switch(s: ClientSession, roots: list, uri: str) -> tuple[str, str]:
        before = await recall_builds(s)
        roots[:] = [uri]
        await s.send_roots_list_changed()
        return before, await recall_builds(s)

    roots = [repo_a.as_uri()]
    # started in the home folder (no repository): the client's root decides, and follows its changes
    before, after = anyio.run(lambda: with_session(db, home, home, lambda s: switch(s, roots, repo_b.as_uri()),
                                                   roots=roots))
    assert "make ship" in before and "cargo" not in before
    assert "cargo" in after and "make ship" not in after
    # CLAUDE_PROJECT_DIR, without roots; MEMSAFE_WORKSPACE likewise
    for name in ("CLAUDE_PROJECT_DIR", "MEMSAFE_WORKSPACE"):
        seen = anyio.run(lambda name=name: with_session(db, home, home, recall_builds, env={name: str(repo_b)}))
        assert "cargo" in seen and "make ship" not in seen, name
    # a home folder that is a repository (dotfiles): two windows stay apart
    git_repo(home)
    nested_a, nested_b = git_repo(home / "src" / "a"), git_repo(home / "src" / "b")
    for repo, uri in ((nested_a, nested_a.as_uri()), (nested_b, nested_b.as_uri())):
        async def remember_then_recall(s: ClientSession, repo=repo):
            await s.call_tool("remember", {"content": f"Window {repo.name} keeps its notes in {repo.name}/NOTES"})
            return await s.call_tool("recall", {"query": "where are notes kept"}), await s.call_tool("status", {})
        recalled, status = anyio.run(lambda uri=uri, f=remember_then_recall: with_session(db, home, home, f,
                                                                                           roots=[uri]))
        text = text_of(recalled)
        assert f"Window {repo.name}" in text and f"Window {'b' if repo.name == 'a' else 'a'}" not in text
        assert "client root" in text_of(status)


def test_roots_that_are_no_folders_here_are_ignored_with_a_log_line(where, tmp_path):
    """A raw client answers roots/list with a URL, a missing folder and a file URI of a file: each is
    ignored with one log line, the project stays the working directory's, and calls still answer
    (an answer that breaks the protocol, a root without a uri, is one log line for the whole answer)."""
    db, home = where["db"], where["home"]
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    answers = [{"uri": "https://example.com/repo"}, {"uri": (tmp_path / "gone").as_uri()}, {"uri": a_file.as_uri()}]
    with RawClient(db, env={"MEMSAFE_HOME": str(home / ".memsafe"), "HOME": str(home), "MEMSAFE_NO_MODEL": "1"},
                   cwd=home) as c:
        c.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": True}},
                                 "clientInfo": {"name": "raw", "version": "1"}})
        c.send("notifications/initialized", notify=True)
        c.send("tools/call", {"name": "status", "arguments": {}})
        asked = reply = None
        deadline = time.monotonic() + 60
        while reply is None and time.monotonic() < deadline:
            message = json.loads(c._inbox.get(timeout=60))
            if message.get("method") == "roots/list":
                asked = message
                c.write_raw(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": answers}}))
            elif "result" in message and asked is not None:
                reply = message["result"]
        assert c.close() == 0
    assert asked is not None and reply is not None and not reply.get("isError")
    assert f"of {home}" in text_of(reply) and "client root" not in text_of(reply)
    log = bytes(c.stderr).decode()
    assert "ignored the client's root 'https://example.com/repo': not a file:// URI" in log
    assert log.count("ignored the client's root") == 3 and "none of the client's 3 roots" in log


def test_an_unexpanded_workspace_placeholder_is_ignored_and_creates_nothing(where, tmp_path):
    db, home = where["db"], where["home"]

    async def status(s: ClientSession):
        return text_of(await s.call_tool("status", {}))

    errlog = tmp_path / "err.log"
    shown = anyio.run(lambda: with_session(db, home, home, status, env={"MEMSAFE_WORKSPACE": "${workspaceFolder}"},
                                           errlog=errlog))
    assert "MEMSAFE_WORKSPACE" not in shown and f"of {home}" in shown
    assert "ignored MEMSAFE_WORKSPACE=${workspaceFolder}: a placeholder the client did not expand" in errlog.read_text()
    assert not list(home.glob("$*")) and not list(tmp_path.rglob("*workspaceFolder*"))


def test_init_gives_cursor_the_workspace_folder(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".cursor").mkdir(parents=True)
    (home / ".cursor" / "mcp.json").write_text(json.dumps({"mcpServers": {"memsafe": api.server_entry(
        api.memsafe_command(), None)}}))  # registered by an earlier init, without the workspace
    monkeypatch.setenv("HOME", str(home))
    plan = api.init_plan(steps=("agents",), env={"HOME": str(home), "PATH": ""})
    cursor = next(c for c in plan.changes if c.target == "Cursor")
    assert cursor.state == "change" and "workspace folder" in cursor.summary
    written = json.loads(cursor.new)["mcpServers"]["memsafe"]
    assert written["env"] == {"MEMSAFE_WORKSPACE": "${workspaceFolder}"} and written["args"][-1] == "serve"
    desktop = next(c for c in plan.changes if c.target == "Claude Desktop")
    assert "workspaceFolder" not in (desktop.new or "")  # only Cursor expands it


# ---------------------------------------------------------------------------------------------
# Progress


def test_import_export_and_decay_send_progress_to_a_client_that_asks(where, tmp_path):
    db, home = where["db"], where["home"]
    source = tmp_path / "memory.jsonl"
    with open(source, "w", encoding="utf-8") as f:
        for n in range(400):
            f.write(json.dumps({"type": "entity", "name": f"Entity{n}", "entityType": "thing",
                                "observations": [f"Entity{n} observation {k} about service {n * 7 + k}"
                                                 for k in range(8)]}) + "\n")
    seen: dict[str, list] = {"import": [], "export": [], "decay": [], "none": []}

    async def body(s: ClientSession):
        async def call(label, name, args):
            async def on_progress(progress, total, message):
                seen[label].append((progress, total, message))
            return await s.call_tool(name, args, progress_callback=on_progress)

        imported = await call("import", "transfer", {"path": str(source), "direction": "import"})
        exported = await call("export", "transfer", {"path": str(tmp_path / "out.jsonl"), "direction": "export",
                                                     "all_projects": True})
        decayed = await call("decay", "configure", {"decay": "dry_run"})
        plain = await s.call_tool("status", {})
        failed = await call("none", "transfer", {"path": str(tmp_path / "missing.jsonl"), "direction": "import"})
        return imported, exported, decayed, plain, failed

    *results, failed = anyio.run(lambda: with_session(db, tmp_path, home, body, env={"MEMSAFE_NO_MODEL": "1"}))
    assert not any(is_error(r) for r in results), [text_of(r) for r in results]
    # a call that fails while the client follows its progress is the same one-line tool error
    assert is_error(failed) and "missing.jsonl" in text_of(failed) and "\n" not in text_of(failed)
    assert "3200 added" in text_of(results[0])
    for label in ("import", "export", "decay"):
        values = [p for p, _, _ in seen[label]]
        assert values and values == sorted(values) and len(set(values)) == len(values), (label, seen[label])
        assert seen[label][-1][1] is not None and seen[label][-1][0] >= seen[label][-1][1] * 0.99, seen[label]
    assert "import" in seen["import"][-1][2] and "export" in seen["export"][-1][2]


# ---------------------------------------------------------------------------------------------
# HTTP: a restart under connected clients


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_after_an_http_restart_an_initialize_with_the_old_session_id_gets_a_new_session(tmp_path):
    db = tmp_path / "team.db"
    port = _free_port()
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "remember", "arguments": {"content": "Restarts keep the team's memory"}}}
    env = {"MEMSAFE_HOME": str(tmp_path / "home"), "MEMSAFE_NO_MODEL": "1"}
    with HttpServer(db, env=env, cwd=tmp_path, args=("--port", str(port))) as first:
        opened = httpx2.post(first.url, headers=headers, json=hello)
        old = opened.headers["mcp-session-id"]
        url = first.url
    with HttpServer(db, env=env, cwd=tmp_path, args=("--port", str(port))) as second:
        assert second.url == url
        stale = {**headers, "mcp-session-id": old, "mcp-protocol-version": "2025-11-25"}
        gone = httpx2.post(url, headers=stale, json=call)
        renewed = httpx2.post(url, headers=stale, json=hello)
        fresh = renewed.headers.get("mcp-session-id")
        session = {**headers, "mcp-session-id": fresh or "", "mcp-protocol-version": "2025-11-25"}
        httpx2.post(url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        written = httpx2.post(url, headers=session, json=call)
        anonymous = httpx2.post(url, headers=headers, json=call)
    assert gone.status_code == 404  # a call with a dead id: the protocol's sign to initialize again
    assert renewed.status_code == 200 and fresh and fresh != old
    assert written.status_code == 200 and "Remembered #1" in written.text
    assert anonymous.status_code == 400  # no session at all: refused as before
    opened_store = api.open_store(str(db))
    try:
        assert opened_store.store.counts()["total"] == 1
    finally:
        opened_store.store.close()


def test_prompt_and_resource_arguments_are_read_strictly_and_refused_in_one_bounded_line(where, tmp_path):
    db, home = where["db"], where["home"]
    env = {"MEMSAFE_HOME": str(home / ".memsafe")}
    for i in range(1, 11):
        cli(db, "remember", f"Memory number {i} about the deploy pipeline", "--project", "web", env=env)
    errlog = tmp_path / "server.err"

    async def body(s: ClientSession):
        out = {}
        for name, args in (("huge_topic", ("recall-topic", {"topic": "deploy " * 200_000})),
                           ("nul_topic", ("recall-topic", {"topic": "\x00\x00"})),
                           ("huge_days", ("review-week", {"days": "9" * 4000})),
                           ("arabic_days", ("review-week", {"days": "\u0667"})),
                           ("underscore_days", ("review-week", {"days": "1_0"}))):
            try:
                await s.get_prompt(*args)
                out[name] = None
            except MCPError as exc:
                out[name] = exc.error
        for name, uri in (("underscore", "memsafe://memory/1_0"), ("plus", "memsafe://memory/+1"),
                          ("space", "memsafe://memory/%201"), ("arabic", "memsafe://memory/\u0661"),
                          ("leading_zero", "memsafe://memory/01"), ("huge", "memsafe://memory/" + "9" * 5000),
                          ("dotdot", "memsafe://memory/1/../2")):
            try:
                await s.read_resource(uri)
                out[name] = None
            except MCPError as exc:
                out[name] = exc.error
        return out

    r = anyio.run(lambda: with_session(db, tmp_path, home, body, args=("--project", "web"), errlog=errlog))
    for name, error in r.items():
        assert error is not None, name
        assert error.code == types.INVALID_PARAMS, (name, error)
        assert "\n" not in error.message and len(error.message) < 300, (name, error.message[:300])
    assert "100,000" in r["huge_topic"].message and "empty" in r["nul_topic"].message
    assert "Traceback" not in errlog.read_text()


def test_a_refused_megabyte_argument_is_echoed_in_a_short_line(where, tmp_path):
    db, home = where["db"], where["home"]
    huge = "k" * 100_000

    async def body(s: ClientSession):
        out = {"key": await s.call_tool("configure", {"key": huge}),
               "choice": await s.call_tool("configure", {"key": "project_mode", "value": huge}),
               "status": await s.call_tool("recall", {"query": "", "status": huge})}
        try:
            await s.get_prompt(huge, {})
        except MCPError as exc:
            out["prompt"] = exc.error.message
        return out

    r = anyio.run(lambda: with_session(db, tmp_path, home, body))
    for name, result in r.items():
        message = result if isinstance(result, str) else text_of(result)
        assert isinstance(result, str) or is_error(result), name
        assert "kkkk" in message and len(message) < 1000, (name, len(message))  # the key list is long
