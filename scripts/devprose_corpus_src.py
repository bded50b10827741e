"""Build memsafe/data/devprose_corpus.json: the developer-prose corpus of `memsafe bench`.

    .venv/bin/python scripts/devprose_corpus_src.py > memsafe/data/devprose_corpus.json

Memories are real developer text, nothing templated:
- commit messages (subject lines) of memsafe's own history (this repository: ours to ship);
- the first paragraph of docstrings of the `rich` package (MIT licence; its copyright and
  permission notice travel in the corpus file's "licences" field, as the licence asks).

Queries were written by hand the way a person asks: paraphrases that share few words with the
answer ("semantic") and questions that name an identifier, flag or message ("keyword"). They are
listed below with the memories they should find. Queries d47 on were written blind: committed before
any recall, bench or ranking code had run on them, so no query was tuned to the ranking.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from importlib import metadata

COMMITS = """40fa92c 8d20a1e 121dbcc 67d6174 98c076f 6e581a9 658b0ee fc19641 e3b6b7f 278956b aa6e480 9a3b44b
53cf287 87b500b b09499a b0e748e b48a270 6416818 dc890b8 829a1cb 3394d5e 0c407d0 dc5faa6 2d2af87 6d6ab77
7770122 94381d6 fe30a8a 1804c3f 13b826a 3ce2c2a 4c4338a a4a81c0 ea36c71 1a9acab 405b8da b0beb64 dd0743f
762be81 3397cad 1a02584 f70c4c8 da621b5 519a1c8 7c7fac9 d1ad91a 2b4d1d0 1fe12d7 6245153 fdf06f1 e5ea68d 6bf3b91
bcdb5a7 2d0cd77 5775f5e f6bdb20 2506f4c b70b3fa 71f9f0d c1e2229 2fa7153 b883363 b9bd6ea 717fdd8 6aeeb0a
6d42a66""".split()

RICH = """Console.begin_capture Console.bell Console.capture Console.export_html Console.export_svg
Console.export_text Console.input Console.measure Console.out Console.pager Console.print_exception
Console.push_theme Console.render_str Console.save_html Console.save_svg Console.save_text Console.screen
Console.use_theme Progress.reset Table.add_section Text.assemble Text.divide Text.fit Text.from_ansi
Text.highlight_regex Text.pad Text.right_crop Text.stylize Confirm.render_default Panel.fit Live.process_renderables
Syntax.stylize_range Console.set_window_title Console.status Console.show_cursor Console.print_json Console.rule
Console.on_broken_pipe Text.truncate Text.expand_tabs Text.detect_indentation Progress.track Progress.open Table.grid
Syntax.guess_lexer Layout.split_row Color.downgrade""".split()

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
    # d47 on: written blind, before any recall or bench ran on them.
    ("semantic", "hitting Ctrl-C while the Postgres server was in the middle of a write dumped a stack trace",
     ["c762be81"]),
    ("semantic", "I asked for one project and for all of them at the same time and it quietly searched everything",
     ["c3397cad"]),
    ("semantic", "a query that mentions the same month thousands of times took over ten seconds to answer",
     ["c1a02584"]),
    ("semantic", "an identifier spelled in Greek letters was found in the local file but not on the shared "
                 "database server", ["cf70c4c8"]),
    ("semantic", "opening the web interface on a headless box over ssh did nothing and gave no hint how to reach it",
     ["c519a1c8"]),
    ("semantic", "stopping the command that computes missing vectors halfway left no idea how much of it was done",
     ["c2b4d1d0"]),
    ("semantic", "with many clients saving at once against Postgres, about one write in ten failed",
     ["c6245153"]),
    ("semantic", "loading old commits with a garbage start time quietly loaded nothing instead of complaining",
     ["cfdf06f1"]),
    ("semantic", "saving a note that contains a huge stretch of blank space took almost a minute",
     ["ce5ea68d"]),
    ("semantic", "searching for a single Chinese character misses a sentence that ends with it", ["c6bf3b91"]),
    ("semantic", "why was my project rejected when the repository's clone address has a password in it?",
     ["cbcdb5a7", "c3ce2c2a"]),
    ("semantic", "merging near-identical notes found more pairs once I had computed the missing embeddings",
     ["c5775f5e"]),
    ("semantic", "the change log of a note showed two identical rows after I only retagged it", ["c2506f4c"]),
    ("semantic", "my script reads the machine-readable output, but failures came back as plain text it could not parse",
     ["cb70b3fa"]),
    ("semantic", "what if a backup file gives the same identifier to two different things in the graph?",
     ["c71f9f0d"]),
    ("semantic", "quitting the browser UI just after it started crashed the process with an abort", ["cc1e2229"]),
    ("semantic", "commits I made while splitting one up during an interactive rebase never showed up in memory",
     ["c2fa7153"]),
    ("semantic", "the knowledge graph still lists people and things that only came from notes I threw away",
     ["cb883363"]),
    ("semantic", "a store written only through the agent server stays fragmented until the next cleanup run",
     ["cb9bd6ea"]),
    ("semantic", "looking something up froze for many seconds while the nightly aging job held the database",
     ["c6d42a66"]),
    ("semantic", "if I edit a note while the embedding model is unavailable, does it keep its outdated vector?",
     ["ca4a81c0"]),
    ("semantic", "if setting up our git hook fails halfway, is the hook the user already had lost?", ["cb0beb64"]),
    ("semantic", "piping the dump of all memories into head printed an ugly error", ["cdd0743f"]),
    ("semantic", "asking what the store looked like last month was slow because every older version got vectorised",
     ["c405b8da"]),
    ("semantic", "rename the terminal tab while my script runs", ["rConsole.set_window_title"]),
    ("semantic", "show a spinning indicator with a message while a slow job runs", ["rConsole.status"]),
    ("semantic", "hide the blinking caret while redrawing an animation", ["rConsole.show_cursor"]),
    ("semantic", "dump an API response nicely indented and coloured", ["rConsole.print_json"]),
    ("semantic", "shorten a label so it is at most twenty columns wide", ["rText.truncate"]),
    ("semantic", "find out whether a code snippet uses two or four spaces per level", ["rText.detect_indentation"]),
    ("semantic", "wrap a for loop so the user sees how far along it is", ["rProgress.track"]),
    ("semantic", "lay out label and value pairs in aligned columns without any borders", ["rTable.grid"]),
    ("semantic", "place a sidebar to the left of the main area in a full-screen app", ["rLayout.split_row"]),
    ("semantic", "my true-colour styles look wrong on an old 16-colour terminal; how are they mapped down?",
     ["rColor.downgrade"]),
    ("semantic", "get what was printed as an HTML string I can embed in a web page", ["rConsole.export_html"]),
    ("semantic", "start grabbing printed output in one function and collect it in another, without a with statement",
     ["rConsole.begin_capture"]),
    ("semantic", "make only the first five characters of a label bold", ["rText.stylize"]),
    ("semantic", "underline a few columns on line 3 of a highlighted code listing", ["rSyntax.stylize_range"]),
    ("keyword", "BrokenPipeError", ["rConsole.on_broken_pipe"]),
    ("keyword", "TCP_NODELAY", ["c1fe12d7"]),
    ("keyword", "update --content - from stdin", ["cf6bdb20"]),
    ("keyword", "MEMSAFE_KEY_FILE", ["c2d0cd77"]),
    ("keyword", "ModuleNotFoundError: psycopg", ["c7c7fac9"]),
    ("keyword", "import --allow-purged", ["cd1ad91a"]),
    ("keyword", "/healthz kept connection", ["c717fdd8"]),
    ("keyword", "recall ERR_SSL_PROTOCOL", ["cda621b5"]),
    ("keyword", "guess_lexer index.html", ["rSyntax.guess_lexer"]),
]


def _commit(sha: str) -> str:
    return subprocess.run(["git", "show", "-s", "--format=%s", sha], capture_output=True, text=True,
                          check=True).stdout.strip()


def _rich(name: str) -> str:
    import rich.color
    import rich.console
    import rich.layout
    import rich.live
    import rich.panel
    import rich.progress
    import rich.prompt
    import rich.syntax
    import rich.table
    import rich.text

    owners = {"Console": rich.console.Console, "Progress": rich.progress.Progress, "Table": rich.table.Table,
              "Text": rich.text.Text, "Confirm": rich.prompt.Confirm, "Panel": rich.panel.Panel,
              "Live": rich.live.Live, "Syntax": rich.syntax.Syntax, "Layout": rich.layout.Layout,
              "Color": rich.color.Color}
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
