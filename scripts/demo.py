"""`make demo`: remember the commit messages of a real git repository, then ask memsafe about them.

Usage: python scripts/demo.py [REPO]   (default: this repository)
The store is $MEMSAFE_DB (the Makefile points it at .demo/memory.db, so the demo never touches
your own store); it ends by saying how to point the README's commands at it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

QUESTIONS = [
    "where do the embeddings come from?",
    "how are vectors kept next to the rows?",
    "what does the command line do with errors?",
]


def commits(repo: Path) -> list[tuple[str, str]]:
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--no-merges", "--format=%h%x1f%B%x1e"],
        capture_output=True, text=True, encoding="utf-8", errors="replace", check=True,
    ).stdout
    out = []
    for record in log.split("\x1e"):
        if "\x1f" in record:
            short, message = record.split("\x1f", 1)
            if message.strip():
                out.append((short.strip(), message.strip()))
    return out


def memsafe(*args: str) -> None:
    print(f"\n$ memsafe {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "memsafe", *args], check=False)


def main() -> None:
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    history = commits(repo)
    print(f"Remembering {len(history)} commit messages from {repo} ...", flush=True)
    from memsafe import api
    from memsafe.errors import Duplicate

    opened = api.open_store()
    added = 0
    with opened.store as store:
        for short, message in reversed(history):
            try:
                # like the git hook: a commit note that holds a credential is stored redacted
                api.remember(store, f"{message} ({short})", source="git", tags=["commit"], embed_now=False,
                             redact=True)
                added += 1
            except Duplicate:
                pass
        api.backfill(store, limit=None)
    print(f"{added} new memories (already known: {len(history) - added})")
    memsafe("status")
    for question in QUESTIONS:
        memsafe("recall", question, "--limit", "3")
    print(f"\nThe demo's memories are in {opened.path}, not in your own store. To try the README's")
    print("commands on them, point memsafe at that file in this shell:\n")
    print(f"  export MEMSAFE_DB={shlex.quote(str(opened.path))}")
    print('  .venv/bin/memsafe recall "how are errors shown?"\n')
    print("(`unset MEMSAFE_DB` goes back to your own store; `make clean` deletes the demo's.)")


if __name__ == "__main__":
    main()
