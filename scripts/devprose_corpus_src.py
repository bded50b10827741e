"""Build memsafe/data/devprose_corpus.json: the developer-prose corpus of `memsafe bench` (issue 11).

    .venv/bin/python scripts/devprose_corpus_src.py > memsafe/data/devprose_corpus.json

Memories are real developer text, nothing templated:
- commit messages (subject lines) of memsafe's own history (this repository: ours to ship);
- the first paragraph of docstrings of the `rich` package (MIT licence; its copyright and
  permission notice travel in the corpus file's "licences" field, as the licence asks).

Queries were written by hand the way a person asks: paraphrases that share few words with the
answer ("semantic") and questions that name an identifier, flag or message ("keyword"). They are
listed below with the memories they should find.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from importlib import metadata

COMMITS = """40fa92c 8d20a1e 121dbcc 67d6174 98c076f 6e581a9 658b0ee fc19641 e3b6b7f 278956b aa6e480 9a3b44b
53cf287 87b500b b09499a b0e748e b48a270 6416818 dc890b8 829a1cb 3394d5e 0c407d0 dc5faa6 2d2af87 6d6ab77
7770122 94381d6 fe30a8a 1804c3f 13b826a 3ce2c2a 4c4338a a4a81c0 ea36c71 1a9acab 405b8da b0beb64 dd0743f""".split()

RICH = """Console.begin_capture Console.bell Console.capture Console.export_html Console.export_svg
Console.export_text Console.input Console.measure Console.out Console.pager Console.print_exception
Console.push_theme Console.render_str Console.save_html Console.save_svg Console.save_text Console.screen
Console.use_theme Progress.reset Table.add_section Text.assemble Text.divide Text.fit Text.from_ansi
Text.highlight_regex Text.pad Text.right_crop Text.stylize Confirm.render_default Panel.fit Live.process_renderables
Syntax.stylize_range""".split()

QUERIES = [
    ("semantic", "why did the MCP server stop answering after it was fed lots of garbage lines?", ["c40fa92c"]),
    ("semantic", "how do we avoid storing half a password when a long commit body gets shortened?", ["c8d20a1e"]),
    ("semantic", "a recall hangs forever in a child process after fork", ["c121dbcc"]),
    ("semantic", "what happens with a JSON line nested thousands of levels deep?", ["c67d6174"]),
    ("semantic", "how much quicker did nearest-neighbour lookup get at ten thousand memories?", ["c98c076f"]),
    ("semantic", "which change cut the RAM the long-running server needs for vectors at 100k?", ["c6e581a9"]),
    ("keyword", "why is sqlite-vec loaded by path rather than imported?", ["c658b0ee"]),
    ("semantic", "why did embedding a query get so much faster on the busy two-core machine?", ["cfc19641"]),
    ("semantic", "embedding long documents used about a gigabyte of memory; what fixed it?", ["ce3b6b7f"]),
    ("semantic", "checking an import without writing should not leave a new database behind", ["c278956b"]),
    ("keyword", "memsafe --version said Missing command", ["caa6e480"]),
    ("semantic", "tables lost their numbers when the output went to a pipe", ["c9a3b44b"]),
    ("semantic", "two processes creating the same new store at once made the upgrade flaky", ["c53cf287"]),
    ("semantic", "giving the same labels in another order was recorded as an edit", ["c87b500b"]),
    ("semantic", "can a backup file carry the embeddings so a restore skips re-embedding?", ["cb09499a"]),
    ("semantic", "how was checking memories for leaked keys made cheaper per memory?",
     ["cb0e748e", "cb48a270", "c6416818"]),
    ("semantic", "how do we prove the tool never talks to the internet?", ["cdc890b8"]),
    ("semantic", "how are stores written by the first release tested when the schema changes?", ["c829a1cb"]),
    ("semantic", "what happens if the embedding model blows up while answering a query?", ["c3394d5e"]),
    ("semantic", "how does our commit hook coexist with hooks the user already has?", ["c0c407d0"]),
    ("keyword", "MEMSAFE_NO_VEC status message", ["cdc5faa6"]),
    ("keyword", "config get --json output", ["c2d2af87"]),
    ("semantic", "agents got a huge validation dump when they passed a wrong tool argument", ["c6d6ab77"]),
    ("semantic", "imported vectors turned into zeros or infinities because of single-precision norms",
     ["c7770122"]),
    ("semantic", "memories that already name the entity were getting the related-entity boost", ["c94381d6"]),
    ("keyword", "recall --include-forgotten", ["cfe30a8a"]),
    ("semantic", "if the process is killed hard mid-write, can a memory end up half saved?", ["c1804c3f"]),
    ("semantic", "the final request in a piped script never got a response", ["c13b826a"]),
    ("semantic", "are secrets also blocked when they appear in labels or project names?", ["c3ce2c2a"]),
    ("semantic", "why do commands that don't need vectors start up faster now?", ["c4c4338a"]),
    ("semantic", "how do I grab what gets printed into a string instead of the terminal?", ["rConsole.capture"]),
    ("semantic", "save everything the console printed as a vector image", ["rConsole.save_svg"]),
    ("keyword", "turn a string with ANSI escape codes into a Text", ["rText.from_ansi"]),
    ("semantic", "show a long listing one screen at a time so I can scroll", ["rConsole.pager"]),
    ("semantic", "switch the terminal to the alternate full-screen buffer", ["rConsole.screen"]),
    ("semantic", "make the terminal beep", ["rConsole.bell"]),
    ("semantic", "draw a separator line between groups of table rows", ["rTable.add_section"]),
    ("semantic", "use other colours only inside a with block", ["rConsole.use_theme"]),
    ("semantic", "wrap styled text to a fixed width by breaking it into lines", ["rText.fit"]),
    ("keyword", "highlight_regex group names", ["rText.highlight_regex"]),
    ("semantic", "show the default of a yes/no question as (y) rather than True", ["rConfirm.render_default"]),
    ("semantic", "put a progress task back to zero and restart its timer", ["rProgress.reset"]),
    ("semantic", "read an answer from the user after a coloured prompt", ["rConsole.input"]),
    ("keyword", "Panel.fit", ["rPanel.fit"]),
    ("semantic", "pretty print the traceback of the exception I just caught", ["rConsole.print_exception"]),
    ("semantic", "write the recorded console output to a plain text file", ["rConsole.save_text"]),
]


def _commit(sha: str) -> str:
    return subprocess.run(["git", "show", "-s", "--format=%s", sha], capture_output=True, text=True,
                          check=True).stdout.strip()


def _rich(name: str) -> str:
    import rich.console
    import rich.live
    import rich.panel
    import rich.progress
    import rich.prompt
    import rich.syntax
    import rich.table
    import rich.text

    owners = {"Console": rich.console.Console, "Progress": rich.progress.Progress, "Table": rich.table.Table,
              "Text": rich.text.Text, "Confirm": rich.prompt.Confirm, "Panel": rich.panel.Panel,
              "Live": rich.live.Live, "Syntax": rich.syntax.Syntax}
    cls, attr = name.split(".")
    doc = inspect.getdoc(getattr(owners[cls], attr)) or ""
    return f"rich {name}: " + " ".join(doc.split("\n\n")[0].split())


def main() -> None:
    memories = [{"id": f"c{sha}", "kind": "general", "content": _commit(sha)} for sha in COMMITS]
    memories += [{"id": f"r{name}", "kind": "general", "content": _rich(name)} for name in RICH]
    known = {m["id"] for m in memories}
    queries = []
    for n, (qtype, text, relevant) in enumerate(QUERIES, start=1):
        missing = set(relevant) - known
        if missing:
            raise SystemExit(f"query {n} names unknown memories {missing}")
        queries.append({"id": f"d{n:02d}", "type": qtype, "query": text, "relevant": relevant})
    rich_licence = next((f for f in metadata.files("rich") or [] if f.name.upper().startswith("LICENSE")), None)
    corpus = {
        "name": "memsafe developer prose",
        "version": 1,
        "description": "Real commit messages of memsafe and docstrings of rich (MIT), with hand-written queries "
                       "(scripts/devprose_corpus_src.py).",
        "project": "devprose",
        "licences": {"rich": rich_licence.read_text() if rich_licence else "MIT (Will McGugan)"},
        "memories": memories,
        "relations": [],
        "queries": queries,
    }
    json.dump(corpus, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
