"""Responsibility: the hot commands, `recall` and `remember`, as a shell, a git hook or an agent
calls them many times a session, `import`, and the reading commands a person types between them
(`get`, `list`, `status`, `history`, `graph show`, and `forget`), without building the Typer app
(Typer, rich and the handlers nobody runs were most of a whole-process recall, and half of an
import of 1,000 memories).

`run(argv)` reads a command line of the plain shape those callers use:
`[--db PATH] COMMAND` (one of those above), known options each as `--name VALUE`, `--name=VALUE`,
`-x VALUE` or a flag, and the command's one argument (none for `list` and `status`). For anything
else (`--help`, an unknown or malformed option, a value out of range, a second argument, `--`, a
completion request) it returns None and `memsafe.__main__` hands the command line to the Typer
app, so help texts, usage errors and exit codes come from one place (`MEMSAFE_CLI_FAST=0` sends
every command line there). The options are those the Typer commands declare, read from
`fast_spec` (generated from them by `make docs`), so each is written once. The commands' bodies
(`recall`, `remember`, `import_`, `get`, …) are shared: the Typer commands in
`memsafe.cli.memory`, `.lifecycle`, `.graph` and `.transfer` call them too, so both paths print
and exit alike.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from memsafe import render, settings
from memsafe.cli import fast_spec
from memsafe.cli._plain import (
    BOTH_SCOPES,
    Failed,
    emit_json,
    err_console,
    err_line,
    error,
    errors,
    fail,
    interrupts,
    is_tty,
    out,
    print_line,
    print_lines,
    print_table,
    progress,
    project_key,
    read_stdin,
    safe_streams,
    say,
    session,
)


def _value(spec, raw: str):
    """`raw` converted as its Typer option would (`spec` from `fast_spec`), or None when Typer
    might judge it otherwise (it then answers, with its own message and exit code)."""
    if spec == "text":
        return raw if raw.strip() else None  # empty: Typer refuses it (`_common._refuse_blank`)
    kind, *limits = spec
    if kind == "choice":
        return raw if raw in limits[0] else None
    low, high = limits
    value: float
    if kind == "int":
        if not (raw.isascii() and raw.isdigit()):
            return None
        value = int(raw)
    else:
        digits = raw.replace(".", "", 1)
        if not (raw.isascii() and digits.isdigit() and not raw.endswith(".")):
            return None
        value = float(raw)
    return value if (low is None or value >= low) and (high is None or value <= high) else None


def _command(argv: list[str], i: int) -> tuple[str, int] | None:
    """(the fast command at argv[i], the index after it): one word, or a group's command (`graph show`)."""
    if i < len(argv) and argv[i] in fast_spec.OPTIONS:
        return argv[i], i + 1
    pair = " ".join(argv[i:i + 2])
    return (pair, i + 2) if pair in fast_spec.OPTIONS else None


def parse(argv: list[str]) -> tuple[str, str | None, dict] | None:
    """(command, --db value or None, keyword arguments of its body) for a plain command line of one
    of the commands in `fast_spec.OPTIONS` (`recall`, `remember`, `import`, `get`, `forget`,
    `history`, `list`, `status`, `graph show`), else None (the Typer app takes it)."""
    db = None
    i = 0
    while i < len(argv) and argv[i].startswith("--db"):
        if argv[i] == "--db" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            db, i = argv[i + 1], i + 2
        elif argv[i].startswith("--db="):
            db, i = argv[i][5:], i + 1
        else:
            return None
    found = _command(argv, i)
    if found is None:
        return None
    command, i = found
    options = fast_spec.OPTIONS[command]
    kwargs = {k: (list(v) if isinstance(v, list) else v) for k, v in fast_spec.DEFAULTS[command].items()}
    positional: list[str] = []
    while i < len(argv):
        arg = argv[i]
        if arg == "-" or not arg.startswith("-"):
            positional.append(arg)
            i += 1
            continue
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in options:
            return None  # --help, --, -n5, an unknown option: Typer answers
        param, spec, repeatable = options[name]
        if spec in ("flag", "off"):
            if eq:
                return None
            kwargs[param] = spec == "flag"
            i += 1
            continue
        if eq:
            raw, i = inline, i + 1
        elif i + 1 < len(argv) and not (argv[i + 1].startswith("-") and argv[i + 1] != "-"):
            raw, i = argv[i + 1], i + 2
        else:
            return None
        value = _value(spec, raw)
        if value is None:
            return None
        if repeatable:
            kwargs[param].append(value)
        else:
            kwargs[param] = value
    argument = fast_spec.POSITIONAL[command]
    if argument is None:
        return (command, db, kwargs) if not positional else None
    if len(positional) != 1:
        return None
    value = _value(argument[1], positional[0])
    if value is None:
        return None
    kwargs[argument[0]] = value
    return command, db, kwargs


def run(argv: list[str]) -> int | None:
    """Run `argv` when it is a plain command line of a fast command (see `parse`): returns the exit
    code. None when the Typer app must take it (nothing was done)."""
    if "_MEMSAFE_COMPLETE" in os.environ or not settings.env().cli_fast:
        return None
    parsed = parse(argv)
    if parsed is None:
        return None
    command, db, kwargs = parsed
    safe_streams()
    try:
        commands: dict[str, Callable[..., object]] = {
            "recall": recall, "remember": remember, "import": import_, "get": get, "forget": forget,
            "history": history, "list": list_, "status": status, "graph show": graph_show,
        }
        commands[command](db, **kwargs)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        err_console().print("interrupted")
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


# -- the commands' bodies (the Typer commands in cli/memory.py call these too) -------------------


def remember(db: str | None, content: str, *, kind: str, tag: list[str], project: str | None,
             project_path: str | None, global_: bool, source: str, importance: float | None, no_embed: bool,
             pin: bool, entity: list[str], redact: bool, json_: bool, at: str | None = None,
             supersedes: int | None = None, keep_both: bool = False) -> None:
    """`memsafe remember`: store CONTENT, print its id, start its embedding in the background;
    say which memory it looks like it replaces.

    Raises:
        Failed: the error was reported (one line, or a JSON document under --json).
    """
    from memsafe import api

    text = read_stdin(json_) if content == "-" else content
    with session(db, json_) as opened:
        key = None if global_ else project_key(opened, project, project_path)[0]
        memory = api.remember(
            opened.store, text, kind=kind, project=key, tags=[*tag, *(["pinned"] if pin else [])],
            source=source, importance=importance, embed_now=False if no_embed else "if-loaded",
            entities=entity, redact=redact, at=at, supersedes=supersedes, keep_both=keep_both,
            scope=api.make_scope(project=key),
        )
    if not (no_embed or memory.embedded):
        api.embed_in_background(opened.path)  # vector-searchable in seconds; keyword-searchable now
    if memory.near_duplicate:
        near = memory.near_duplicate
        say("Warning", f"nearly the same as memory {near['id']} (cosine {near['similarity']:.3f}); "
            "`memsafe consolidate` merges near-duplicates")
    if memory.replaces:
        say("Note", render.replaces_line(memory.replaces))
    if json_:
        emit_json(memory)
    else:
        print_line(f"Remembered memory {memory.id}" + (f" in {memory.project}" if memory.project else " (global)"))


def recall(db: str | None, query: str, *, limit: int | None, budget: int | None, project: str | None,
           project_path: str | None, all_projects: bool, kind: list[str], tag: list[str], mode: str,
           include_forgotten: bool, as_of: str | None, since: str | None, json_: bool,
           source: list[str] | None = None, exclude_source: list[str] | None = None,
           include_archived: bool = False, until: str | None = None) -> None:
    """`memsafe recall`: the memories relevant to QUERY as a table, or one JSON document.

    Raises:
        Failed: the error was reported (one line, or a JSON document under --json).
    """
    if mode != "lexical" and not settings.env().no_vec:
        from memsafe import embed

        embed.load_soon(one_query=True)  # the model loads while the store opens and BM25 runs
    from memsafe import api

    if all_projects and (project is not None or project_path is not None):  # as `_common._scope`
        raise fail(BOTH_SCOPES, 2, json_=json_)
    with session(db, json_) as opened:
        key = None if all_projects else project_key(opened, project, project_path)[0]
        since_at = api.parse_when(since, what="--since time") if since else None
        until_at = api.parse_when(until, what="--until time") if until else None
        options = dict(project=key, all_projects=all_projects, kinds=kind, tags=tag, budget=budget, limit=limit,
                       mode=mode, since=since_at, until=until_at, sources=source or [],
                       exclude_sources=exclude_source or [])
        if as_of:
            if include_forgotten or include_archived:
                flag = "--include-forgotten" if include_forgotten else "--include-archived"
                raise fail(f"{flag} cannot be combined with --as-of (as-of shows what was known then)",
                           2, json_=json_)
            result = api.recall_as_of(opened.store, query, as_of=as_of, **options)
        else:
            result = api.recall(opened.store, query, include_forgotten=include_forgotten,
                                include_archived=include_archived, **options)
    if json_:
        emit_json(render.recall_dict(result))
        return
    for note in result.notes:
        say("Note", note)
    if not result.hits:
        sys.stderr.write("No memories found.\n")
        return
    if is_tty(sys.stdout):
        out().print(render.recall_table(result))
    else:  # piped: plain tab-separated lines, no rich to import and lay out
        sys.stdout.write("\n".join(render.recall_lines(result)) + "\n")


PARTIAL_EXIT = 3  # `import` finished but skipped something


@contextmanager
def _dry_run_session(db: str | None, json_: bool) -> Iterator:
    """The store to check an import against without writing: the real one, or, when there is none
    yet, a throwaway empty store (a dry run must not create the database file). Yields `api.Opened`."""
    from memsafe import api, settings

    with errors(db, json_):
        path, _ = settings.resolve_db_path(db)
    if isinstance(path, str) or path.exists():  # a PostgreSQL URL: its database exists
        with session(db, json_) as opened:
            yield opened
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="memsafe-dry-run-") as folder, errors(path, json_):
        opened = api.open_store(str(Path(folder) / "memory.db"))
        try:
            yield opened
        finally:
            opened.store.close()


def _sizes(store) -> tuple[int, int]:
    """(memories, versions) in `store`: an import that committed changed one of them (a new memory,
    or a new version of one it updated)."""
    counts = store.counts()
    return counts["total"], counts["versions"]


def import_(db: str | None, file: str | Path, *, format_: str, dry_run: bool, skip_invalid: bool, project: str | None,
            no_embed: bool, redact: bool, allow_purged: bool, json_: bool) -> None:
    """`memsafe import`: FILE in one transaction, then its vectors (unless --no-embed or --dry-run);
    the report on stderr, or one JSON document on stdout with --json.

    Raises:
        Failed: the error was reported (exit 1), the import skipped records (exit 3, `PARTIAL_EXIT`)
            or was interrupted (exit 130 for Ctrl-C, 143 for SIGTERM; it says what was kept).
    """
    from memsafe import api, settings

    with (_dry_run_session(db, json_) if dry_run else session(db, json_)) as opened, interrupts() as interrupted:
        file = settings.expand_path(file, what="import file")
        report = None
        before = _sizes(opened.store)
        try:
            with progress("importing") as bar:
                report = api.import_file(
                    opened.store, file, fmt=format_, dry_run=dry_run, skip_invalid=skip_invalid,
                    project=project, progress=bar, redact=redact, allow_purged=allow_purged,
                )
            if not (dry_run or no_embed) and report.memories_added + report.memories_updated:
                with progress("embedding") as bar:
                    result = api.embed_pending(opened.store, progress=bar)
                report.embedded, report.pending = result.embedded, result.pending
            if interrupted:  # a Ctrl-C that a native library swallowed (loading the model)
                raise KeyboardInterrupt
        except KeyboardInterrupt as exc:  # the import is one transaction: before it commits, nothing is kept
            report = report or getattr(exc, "report", None)  # `ImportInterrupted`: its records were all written
            after = before if dry_run else _sizes(opened.store)
            committed = after != before  # the store tells, not the stage
            pending = render.count_of(opened.store.pending_count(), "vector") if committed else ""
            if not committed:
                message = "interrupted: nothing imported (rolled back)"
            elif report is None:
                added = after[0] - before[0]
                message = (f"interrupted after the import was committed: {render.count_of(added, 'memory')} added; "
                           f"{pending} pending: run `memsafe embed`")
            else:
                message = (f"interrupted: {render.count_of(report.memories_added, 'memory')} added, "
                           f"{report.memories_updated} updated; {pending} pending: run `memsafe embed`")
            error(message, "Interrupted", json_)
            raise Failed(130) from None  # 143 for SIGTERM (`memsafe.__main__`)
    if json_:
        from dataclasses import asdict

        emit_json({**asdict(report), "partial": report.partial})
    else:
        for line in report.notes:
            err_line(f"note: {line}")
        for line in report.skipped:
            err_line(f"skipped: {line}")
        verb = "Would import" if dry_run else "Imported"
        err_line(
            f"{verb} {report.format} file {file}: {render.count_of(report.memories_added, 'memory')} added, "
            f"{report.memories_updated} updated, {report.memories_unchanged} unchanged, "
            f"{render.count_of(report.entities_added, 'entity')}, "
            f"{render.count_of(report.relations_added, 'relation')} added; "
            f"{len(report.skipped)} skipped"
            + (f" ({report.purged} purged here before: --allow-purged brings them back)" if report.purged else "")
            + (f"; {render.count_of(report.vectors_imported, 'vector')} taken from the file"
               if report.vectors_imported else "")
            + (f"; {render.count_of(report.pending, 'vector')} pending (run `memsafe embed`)"
               if report.pending else ""),
        )
    if report.partial:
        raise Failed(PARTIAL_EXIT)


# -- the reading commands (and forget): the Typer commands in cli/memory.py, cli/lifecycle.py and
# cli/graph.py call these ----------------------------------------------------------------------


def _scope(opened, project: str | None, project_path: str | None, all_projects: bool, json_: bool):
    """The read scope of a command, as recall's: the current (or given) project plus global
    memories, or every project with --all-projects. Raises `Failed` (exit 2) for both."""
    from memsafe import api

    if all_projects and (project is not None or project_path is not None):
        raise fail(BOTH_SCOPES, 2, json_=json_)
    key = None if all_projects else project_key(opened, project, project_path)[0]
    return api.make_scope(project=key, all_projects=all_projects)


def graph_options(scope) -> dict:
    """A scope as the graph handlers' keyword arguments."""
    if scope.projects is None:
        return {"all_projects": True}
    return {"project": scope.projects[0] if scope.projects else None}


def preview(text: str, n: int = 70) -> str:
    """`text` on one line, cut to at most `n` characters (an ellipsis ends a cut one)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 1] + "…"


def get(db: str | None, memory_id: int, *, project: str | None, project_path: str | None, all_projects: bool,
        json_: bool) -> None:
    """`memsafe get`: one memory (whatever its status) as a table, plain lines when piped, or JSON.

    Raises:
        Failed: the error was reported (not found: exit 1; both scopes: exit 2).
    """
    from memsafe import api

    with session(db, json_) as opened:
        scope = _scope(opened, project, project_path, all_projects, json_)
        memory = api.get(opened.store, memory_id, scope=scope, use=True)
    if json_:
        emit_json(memory)
    else:
        print_table(lambda: render.memory_table(memory), lambda: render.memory_lines(memory))


def forget(db: str | None, memory_id: int, *, reason: str | None, project: str | None, project_path: str | None,
           all_projects: bool, json_: bool) -> None:
    """`memsafe forget`: hide a memory from every recall (kept for audit; `restore` undoes it).

    Raises:
        Failed: the error was reported.
    """
    from memsafe import api

    with session(db, json_) as opened:
        scope = _scope(opened, project, project_path, all_projects, json_)
        memory = api.forget(opened.store, memory_id, reason=reason, scope=scope)
    if json_:
        emit_json(memory)
    else:
        print_line(f"Forgot memory {memory.id} (restore with: memsafe restore {memory.id})")


def history(db: str | None, memory_id: int, *, project: str | None, project_path: str | None, all_projects: bool,
            json_: bool) -> None:
    """`memsafe history`: every version of a memory, oldest first (a table, plain lines, or JSON).

    Raises:
        Failed: the error was reported.
    """
    from memsafe import api

    with session(db, json_) as opened:
        scope = _scope(opened, project, project_path, all_projects, json_)
        report = api.history(opened.store, memory_id, scope=scope)
    if json_:
        emit_json(report)
    else:
        print_table(lambda: render.history_table(report), lambda: render.history_lines(report))


def list_(db: str | None, *, archived: bool, forgotten: bool, all_: bool, project: str | None,
          project_path: str | None, all_projects: bool, limit: int | None, source: str | None, json_: bool) -> None:
    """`memsafe list`: memories newest first, active ones by default (current project plus global).

    Raises:
        Failed: the error was reported (two status options: exit 2).
    """
    from memsafe import api, clock

    if sum([archived, forgotten, all_]) > 1:
        raise fail("use only one of --archived, --forgotten, --all", 2, json_=json_)
    status = "archived" if archived else "forgotten" if forgotten else "all" if all_ else "active"
    with session(db, json_) as opened:
        scope = _scope(opened, project, project_path, all_projects, json_)  # refuses --project with --all-projects
        key = None if all_projects else (scope.projects or [None])[0]
        memories = api.list_memories(opened.store, status=status, project=key, all_projects=all_projects,
                                     limit=limit, source=source)
    if json_:
        emit_json(memories)
        return
    if not memories:
        err_line(f"No {status if status != 'all' else ''} memories.".replace("  ", " "))
        return
    title = f"{render.count_of(len(memories), 'memory')} ({status})"

    def table():
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for name in ("id", "kind", "status", "level", "age", "content"):
            table.add_column(name, overflow="fold" if name == "content" else "ellipsis")
        now = clock.now()
        for m in memories:
            table.add_row(str(m.id), m.kind, m.status, str(m.decay_level), clock.age(m.created_at, now),
                          preview(m.content, 90))
        return table

    print_table(table, lambda: render.memories_lines(memories, title))


def status(db: str | None, *, project: str | None, project_path: str | None, json_: bool) -> None:
    """`memsafe status`: where the store is, what it holds, whether vector search works.

    Raises:
        Failed: exit 1 when vector search is unavailable (after the report), or the error reported.
    """
    from memsafe import api

    with session(db, json_) as opened:
        key, rule = project_key(opened, project, project_path)
        report = api.status(opened, project=key, project_rule=rule)
    if json_:
        emit_json(report)
    else:
        print_lines(render.status_lines(report))
    if not (report.vector_search["available"] and report.model.get("loaded")):
        raise Failed(1)


def graph_show(db: str | None, entity: str, *, depth: int, limit: int, project: str | None,
               project_path: str | None, all_projects: bool, json_: bool) -> None:
    """`memsafe graph show`: an entity's neighbourhood with its memories (lines, or JSON).

    Raises:
        Failed: the error was reported (an unknown entity: exit 1).
    """
    from memsafe import api

    with session(db, json_) as opened:
        scope = _scope(opened, project, project_path, all_projects, json_)
        view = api.graph_show(opened.store, entity, depth=depth, limit=limit, **graph_options(scope))
    if json_:
        emit_json(view)
    else:
        print_lines(render.graph_view_lines(view))
