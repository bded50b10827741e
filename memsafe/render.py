"""Responsibility: how results look. JSON-ready dicts (CLI `--json`), rich tables for people,
and compact text for MCP clients. Nothing here reads the database.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import asdict, is_dataclass

from memsafe import clock, framing
from memsafe.models import Hit, Memory, RecallResult, StatusReport
from memsafe.plural import count_of

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """Text safe to show on a terminal: control characters (ESC sequences, C1 codes), the line
    and paragraph separators U+2028/U+2029 (a line break to many readers, not to a terminal) and
    bidi overrides become visible escapes such as `\\x1b`; newlines and tabs stay."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                       text)


def purge_copies(report) -> str | None:
    """The warning a `PurgeReport` needs: the copies memsafe made that still hold the purged text,
    and the command that removes them; None when there are none. One sentence for every front end
    (CLI, MCP, ui)."""
    parts = []
    if report.backups:
        parts.append(f"{count_of(len(report.backups), 'backup')} memsafe made before migrating or converting the "
                     f"database ({', '.join(report.backups)})")
    if report.exports:
        parts.append(f"{count_of(len(report.exports), 'file')} memsafe exported ({', '.join(report.exports)}; "
                     "export again to replace one)")
    if not parts:
        return None
    return f"the text is still in {' and '.join(parts)}; remove them: {report.remove_command}"


def console(*, stderr: bool = False):
    """A rich Console that never interprets markup in data and escapes terminal control characters
    in every string it renders (table cells included)."""
    from rich.console import Console

    class _SafeConsole(Console):
        def render_str(self, text, **kwargs):
            return super().render_str(printable(text), **kwargs)

    stream = sys.stderr if stderr else sys.stdout
    piped = not (getattr(stream, "isatty", None) and stream.isatty())
    # Piped output has no terminal width to fit: use 120 columns (or $COLUMNS) so tables keep their figures.
    width = int(os.environ.get("COLUMNS") or 120) if piped else None
    return _SafeConsole(stderr=stderr, markup=False, highlight=False, soft_wrap=stderr, width=width)


def keep_figures(table):
    """Lay out a rich Table of figures so that no cell is cut to "0.0…" (the bench
    table cut its own numbers at 80 columns): a light box without side padding, and each column
    at least as wide as its widest cell. Returns the table."""
    from rich import box
    from rich.cells import cell_len

    table.box, table.pad_edge, table.collapse_padding = box.SIMPLE_HEAD, False, True
    for column in table.columns:
        column.min_width = max([cell_len(str(column.header))] + [cell_len(str(c)) for c in column.cells])
    return table


def to_jsonable(obj):
    """Dataclasses (recursively) to plain dicts/lists; everything else unchanged."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if isinstance(obj, list):
        return [to_jsonable(o) for o in obj]
    return obj


def dumps(obj) -> str:
    """One JSON document. ASCII-escaped when stdout cannot encode UTF-8, so no character is lost."""
    encoding = (getattr(sys.stdout, "encoding", None) or "utf-8").lower().replace("-", "")
    return json.dumps(to_jsonable(obj), ensure_ascii=encoding != "utf8", indent=2, default=str)


def hit_dict(hit: Hit) -> dict:
    m = hit.memory
    return {
        "id": m.id,
        "content": hit.text,
        "truncated": hit.truncated,
        "tokens": hit.tokens,
        "score": hit.score,
        "kind": m.kind,
        "source": m.source,
        "status": m.status,
        "project": m.project,
        "tags": m.tags,
        "created_at": m.created_at,
        "happened_at": m.event_at,
        "updated_at": m.updated_at,
        "supersedes": m.supersedes,
        "superseded_by": m.superseded_by,
        "lexical_rank": hit.lexical_rank,
        "vector_rank": hit.vector_rank,
        "context_of": hit.context_of,
    }


def replaces_line(replaces: dict, mark: str = "--supersedes {}") -> str:
    """What `remember` says of the memory a new one looks like it replaces (`Memory.replaces`):
    'this looks like it replaces #12: <preview> (why); marked it replaced' or how to mark it
    (`mark`: the option or argument, `{}` for the id)."""
    i = replaces["id"]
    why = "" if replaces["why"] == "--supersedes" else f" ({replaces['why']})"
    tail = ("marked it replaced" if replaces["marked"]
            else f"not marked (another source, or kept both); {mark.format(i)} marks it")
    head = "replaces" if replaces["why"] == "--supersedes" else "this looks like it replaces"
    return f"{head} #{i}: {printable(replaces['preview'])}{why}; {tail}"


def recall_dict(result: RecallResult) -> dict:
    return {
        "query": result.query,
        "budget": result.budget,
        "effective_budget": result.effective_budget,
        "tokens_used": result.tokens_used,
        "mode": result.mode,
        "scope": result.scope,
        "notes": result.notes,
        "results": [hit_dict(h) for h in result.hits],
        "graph_context": result.graph_context,
        "graph_tokens": result.graph_tokens,
    }


def recall_table(result: RecallResult):
    from rich.table import Table

    table = Table(
        title=f"{count_of(len(result.hits), 'memory')} · "
        f"{result.tokens_used}/{count_of(result.effective_budget, 'token')} · {result.mode}",
        title_justify="left",
        show_lines=False,
        caption=(f"graph ({count_of(result.graph_tokens, 'token')}):\n{result.graph_context}"
                 if result.graph_context else None),
        caption_justify="left",
    )
    for name, kw in (
        ("id", {"justify": "right", "style": "cyan"}),
        ("kind", {}),
        ("age", {"justify": "right"}),
        ("source", {}),
        ("score", {"justify": "right"}),
        ("content", {"overflow": "fold", "ratio": 1}),
    ):
        table.add_column(name, **kw)
    now = clock.now()
    for h in result.hits:
        m = h.memory
        table.add_row(
            str(m.id), m.kind, clock.age(m.event_at, now), m.source, f"{h.score:.3f}",
            ("[forgotten] " if m.status == "forgotten" else "") + h.text + (" …" if h.truncated else ""),
        )
    return table


def recall_lines(result: RecallResult) -> list[str]:
    """The recall table as plain lines for a pipe (a script, an agent's shell, a git hook): the
    table's title, a header, one tab-separated line per memory (id, kind, age, source, score,
    content on one line), then the graph caption. rich is not needed to print it."""
    lines = [f"{count_of(len(result.hits), 'memory')} · "
             f"{result.tokens_used}/{count_of(result.effective_budget, 'token')} · {result.mode}",
             "id\tkind\tage\tsource\tscore\tcontent"]
    now = clock.now()
    for h in result.hits:
        m = h.memory
        text = ("[forgotten] " if m.status == "forgotten" else "") + h.text + (" …" if h.truncated else "")
        lines.append("\t".join([str(m.id), m.kind, clock.age(m.event_at, now), m.source, f"{h.score:.3f}",
                                printable(" ".join(text.split()))]))
    if result.graph_context:
        lines += [f"graph ({count_of(result.graph_tokens, 'token')}):", printable(framing.body(result.graph_context))]
    return lines


def memory_table(memory: Memory):
    from rich.table import Table

    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in memory.to_dict().items():
        if key == "tags":
            value = ", ".join(value) or "-"
        table.add_row(key, "-" if value is None else str(value))
    return table


def status_lines(report: StatusReport) -> list[str]:
    c = report.counts
    vec = report.vector_search
    model = report.model
    postgres = report.backend == "postgresql"
    lines = [
        f"database      {framing.inline(str(report.db_path))}  ({report.config['db_origin']})",
        f"size          {report.db_bytes:,} bytes" + ("" if postgres else f" (+{report.wal_bytes:,} WAL)"),
        f"schema        v{report.schema_version}   " + (report.sqlite_version if postgres
                                                         else f"SQLite {report.sqlite_version}"),
        f"memories      {c['active']} active, {c['archived']} archived, {c['forgotten']} forgotten"
        f"   ({count_of(c['versions'], 'version')}, {count_of(c['entities'], 'entity')}, "
        f"{count_of(c['relations'], 'relation')})",
        f"project       {framing.inline(report.project or '(none: global memories only)')}   "
        f"[rule: {framing.inline(report.project_rule)}]",
        f"tokens        {report.config['token_encoding']}",
    ]
    enc = report.encryption
    if postgres:
        from memsafe.api.core import POSTGRES_ENCRYPTION  # loaded: a status report comes from it

        lines.append(f"encryption    {POSTGRES_ENCRYPTION}")
    elif enc.get("encrypted"):
        lines.append(f"encryption    encrypted, cipher {enc['cipher']}; key from {enc['key_source']}")
    elif enc:
        lines.append("encryption    none (plain file; `memsafe encrypt` encrypts it)")
    if vec["available"]:
        extension = "pgvector" if postgres else "sqlite-vec"
        lines.append(f"vectors       {extension} {vec['sqlite_vec']}, {vec['vectors']} stored, "
                     f"{report.pending_embeddings} pending")
    else:
        lines.append(f"vectors       vector search unavailable: {vec['error']}")
    if model.get("loaded"):
        lines.append(f"model         {model['id']} ({model['dim']} dims)")
    else:
        lines.append(f"model         not loaded: {model.get('error') or 'not needed'}; recall is lexical (BM25)")
    return lines


def _recalled_at(result: RecallResult):
    return clock.parse_iso(result.at) if result.at else None


def compact_recall(result: RecallResult) -> str:
    """Token-frugal text for an MCP client (`framing.for_model`): the banner (counts, "data, not
    instructions", the notes), then each memory's header line and its text indented two spaces,
    then the graph context as a `[graph]` record. A recall made with `framed=True` counted every
    token of those blocks in its budget."""
    return framing.for_model(result.hits, banner_line=framing.banner(len(result.hits), result.tokens_used,
                                                                     result.notes),
                             graph=result.graph_context, now=_recalled_at(result))


# -- compact text for MCP clients -------------------------------------------------------


def compact_memory(memory: Memory, *, full: bool = True) -> str:
    """One memory for a model (`framing`): a header line (id, kind, age, source, author when known,
    project, tags, status when not active), then the content indented two spaces (omitted with
    full=False)."""
    head = framing.header(memory, project=True)
    return framing.block(head, memory.content) if full else head


def compact_value(obj) -> str:
    """Fallback for result types without their own compact form: one compact JSON document."""
    return json.dumps(to_jsonable(obj), ensure_ascii=False, separators=(",", ":"), default=str)


def version_changes(versions) -> list[str]:
    """What each version (`api.history`) changed from the one before, one string each ("" for the
    first): "content", "kind decision", "tags ops, ci", "importance 0.8", "status forgotten",
    "level 2", "project", joined by "; "; "no change" when none of them differs. A tag-only update
    showed two identical rows."""
    out: list[str] = []
    previous = None
    for v in versions:
        if previous is None:
            out.append("")
        else:
            changed = []
            if v.content != previous.content:
                changed.append("content")
            if v.kind != previous.kind:
                changed.append(f"kind {v.kind}")
            if list(v.tags) != list(previous.tags):
                changed.append("tags " + (", ".join(v.tags) or "none"))
            for name, label in (("importance", "importance"), ("confidence", "confidence")):
                if getattr(v, name) != getattr(previous, name):
                    changed.append(f"{label} {getattr(v, name):g}")
            if v.project != previous.project:
                changed.append("project")
            if v.status != previous.status:
                changed.append(f"status {v.status}")
            if v.decay_level != previous.decay_level:
                changed.append(f"level {v.decay_level}")
            out.append("; ".join(changed) or "no change")
        previous = v
    return out


def history_table(report, preview: int = 70):
    """Rich table of a memory's versions: number, validity, what ended it, what it changed, who
    wrote it (when any version's author is known), text."""
    from rich.table import Table

    authors = any(v.author for v in report.versions)
    table = Table(title=f"memory {report.memory_id}: {count_of(len(report.versions), 'version')}", title_justify="left")
    for name in ("#", "from", "until", "ended by", "changed", *(("author",) if authors else ()), "content"):
        table.add_column(name, overflow="fold" if name in ("changed", "content") else "ellipsis")
    for v, changed in zip(report.versions, version_changes(report.versions)):
        cause = v.cause + (f" (from #{v.origin_id})" if v.origin_id else "")
        flat = " ".join(v.content.split())
        text = flat if len(flat) <= preview else flat[: preview - 1] + "…"
        who = (v.author or "-",) if authors else ()
        table.add_row(str(v.number), v.valid_from[:19], (v.valid_to or "now")[:19], cause, changed, *who, text)
    return table


def compact_history(report) -> str:
    """A memory's versions (`api.history`) for a model (`framing`): a title line, then per version
    a header line `[vN FROM→UNTIL CAUSE changed=WHAT by=AUTHOR level=L STATUS]` (what it changed
    from the version before, its author when known) and its text indented two spaces."""
    lines = [f"memory #{report.memory_id}: {count_of(len(report.versions), 'version')}, oldest first"]
    for v, changed in zip(report.versions, version_changes(report.versions)):
        words = [f"v{v.number}", f"{v.valid_from[:19]}→{(v.valid_to or 'now')[:19]}", framing.field(v.cause)]
        if v.origin_id:
            words.append(f"from=#{v.origin_id}")
        if changed:
            words.append(f"changed={framing.field(changed)}")
        if v.author:
            words.append(f"by={framing.field(v.author)}")
        words += [f"level={v.decay_level}", framing.field(v.status)]
        lines.append(framing.block("[" + " ".join(words) + "]", v.content))
    return "\n".join(lines)


def decay_lines(report) -> list[str]:
    """A decay run (`api.decay`), as `memsafe decay` prints it and the MCP `decay` tool returns it:
    a totals line, then per changed memory its level change, strength, idle days and half-life,
    and (unless archived) the start of its new text, indented, on one line; a last line on the
    levels and how to undo."""
    verb = "would change" if report.dry_run else "changed"
    head = (f"decay at {report.now}{' (dry run: nothing written)' if report.dry_run else ''}: "
            f"{report.examined} active examined, {report.protected} protected, {len(report.changes)} {verb}")
    if report.skipped:
        head += f", {report.skipped} skipped (changed by another process; next run)"
    lines = [head]
    if not report.changes:
        return lines
    for c in report.changes:
        lines.append(f"  #{c.id:<5} {c.kind:<12} level {c.from_level}→{c.to_level} {c.action:<8}  "
                     f"strength {c.strength:.3f}  idle {c.idle_days:.0f} d  half-life {c.half_life_days:.0f} d")
        if c.action != "archived":
            flat = printable(" ".join(c.preview.split()))
            lines.append(f"         now: {flat if len(flat) <= 100 else flat[:99] + '…'}")
    lines.append("levels: strength < 0.35 → summary, < 0.20 → brief, < 0.10 → archived; "
                 "`memsafe restore ID` brings the original back")
    return lines


def compact_import(report, max_listed: int = 10) -> str:
    """An import (`api.import_file`): counts, then at most `max_listed` skipped records and notes."""
    verb = "would import" if report.dry_run else "imported"
    lines = [f"{verb} {report.format} file {framing.inline(str(report.path))}: {report.memories_added} added, "
             f"{report.memories_updated} updated, {report.memories_unchanged} unchanged, "
             f"{count_of(report.entities_added, 'entity')}, {count_of(report.relations_added, 'relation')}; "
             f"{len(report.skipped)} skipped"]
    for label, items in (("skipped", report.skipped), ("note", report.notes)):
        lines += [f"{label}: {framing.inline(item)}" for item in items[:max_listed]]
        if len(items) > max_listed:
            lines.append(f"… {len(items) - max_listed} more {label} lines")
    return "\n".join(lines)


# -- knowledge graph -------------------------------------------------------------------


def entities_table(entities: list, title: str | None = None):
    """Rich table of EntityInfo rows: id, name, type, memories, aliases."""
    from rich.table import Table

    table = Table(title=title or count_of(len(entities), 'entity'), title_justify="left")
    table.add_column("id", justify="right", style="cyan")
    table.add_column("name", overflow="fold")
    table.add_column("type")
    table.add_column("memories", justify="right")
    table.add_column("aliases", overflow="fold")
    for e in entities:
        table.add_row(str(e.id), e.name, e.type, str(e.memories), ", ".join(e.aliases) or "-")
    return table


def _cell(text) -> str:
    """One table cell on one line of a pipe: whitespace runs (newlines, tabs) become one space,
    control characters are escaped; nothing is cut."""
    return printable(" ".join(str(text).split()))


def tsv_lines(title: str, header: tuple[str, ...], rows) -> list[str]:
    """A table for a pipe: its title, a tab-separated header, one tab-separated line per row with
    every cell whole (`_cell`), so `cut -f` and `grep` see full content where a terminal table
    would fold or cut it."""
    return [title, "\t".join(header), *("\t".join(_cell(c) for c in row) for row in rows)]


def memories_lines(memories: list, title: str) -> list[str]:
    """`memsafe list` for a pipe: id, kind, status, level, age, the whole content."""
    now = clock.now()
    return tsv_lines(title, ("id", "kind", "status", "level", "age", "content"),
                     ((m.id, m.kind, m.status, m.decay_level, clock.age(m.created_at, now), m.content)
                      for m in memories))


def history_lines(report) -> list[str]:
    """`memsafe history` for a pipe: the columns of `history_table`, each version's whole text."""
    authors = any(v.author for v in report.versions)
    header = ("#", "from", "until", "ended by", "changed", *(("author",) if authors else ()), "content")
    rows = ((v.number, v.valid_from[:19], (v.valid_to or "now")[:19],
             v.cause + (f" (from #{v.origin_id})" if v.origin_id else ""), changed,
             *((v.author or "-",) if authors else ()), v.content)
            for v, changed in zip(report.versions, version_changes(report.versions)))
    return tsv_lines(f"memory {report.memory_id}: {count_of(len(report.versions), 'version')}", header, rows)


def entities_lines(entities: list, title: str | None = None) -> list[str]:
    """`memsafe graph entities` for a pipe: the columns of `entities_table`."""
    return tsv_lines(title or count_of(len(entities), "entity"), ("id", "name", "type", "memories", "aliases"),
                     ((e.id, e.name, e.type, e.memories, ", ".join(e.aliases) or "-") for e in entities))


def memory_lines(memory: Memory) -> list[str]:
    """`memsafe get` for a pipe: one `key<TAB>value` line per field, then `content:` and the
    content as stored, each of its lines indented two spaces (so no line of it can pass for a
    field line)."""
    lines = []
    for key, value in memory.to_dict().items():
        if key == "content":
            continue
        if key == "tags":
            value = ", ".join(value) or "-"
        lines.append(f"{key}\t{_cell('-' if value is None else value)}")
    lines.append("content:")
    lines += ["  " + printable(line) if line.strip() else "" for line in memory.content.splitlines()]
    return lines


def relations_lines(relations: list) -> list[str]:
    """One `source -relation-> target (weight)` line per RelationInfo."""
    return [
        f"{r.source} -{r.relation}-> {r.target}" + (f" (weight {r.weight:g})" if r.weight != 1.0 else "")
        for r in relations
    ]


def graph_view_lines(view) -> list[str]:
    """A GraphView as indented text for people: entities by distance with their memories, then
    relations. Every line starts with memsafe's own words or an indent, never with a stored name."""
    lines = [f"around {view.root}: depth {view.depth}, {count_of(len(view.nodes), 'entity')}"
             + (", truncated by --limit" if view.truncated else "")]
    for node in view.nodes:
        e = node.entity
        lines.append(f"{'  ' * node.distance}[{node.distance}] {e.name} ({e.type}, {count_of(e.memories, 'memory')})")
        for ref in node.memories:
            lines.append(f"{'  ' * node.distance}    #{ref.id} {ref.preview}")
    if view.relations:
        lines.append("relations:")
        lines.extend("  " + line for line in relations_lines(view.relations))
    return lines


def compact_graph(view) -> str:
    """A GraphView for a model (`framing`): a title line, then per entity a header line `[entity
    NAME TYPE N memories hops=D]` (the name as a header word, `framing.field`) with the memories
    that name it indented (`#ID preview`), then a `[relations]` record of `source -relation->
    target` lines."""
    lines = [f"around {framing.field(view.root)}: depth {view.depth}, {count_of(len(view.nodes), 'entity')}"
             + (", cut at the limit" if view.truncated else "")]
    for node in view.nodes:
        e = node.entity
        head = (f"[entity {framing.field(e.name)} {framing.field(e.type)} {count_of(e.memories, 'memory')} "
                f"hops={node.distance}]")
        refs = "\n".join(f"#{ref.id} {ref.preview}" for ref in node.memories)
        lines.append(framing.block(head, refs) if refs else head)
    if view.relations:
        lines.append(framing.block("[relations]", "\n".join(relations_lines(view.relations))))
    return "\n".join(lines)
