"""Build memsafe/data/notes_corpus.json.gz: the "notes among commits" corpus of `memsafe bench`.

    .venv/bin/python scripts/notes_corpus_src.py

A store as a user has it: the full commit history of two real public repositories, backfilled as
`memsafe hook backfill` does, with the notes an agent and its user write about them (decisions,
preferences, facts, tasks, corrections), and questions answered half by a note, half by a commit.

The histories are the `git log` ChangeLogs that Debian ships in its binary packages (copied, as
they are, to tests/fixtures/corpora/, with each package's copyright file):

- libxcb 1.15 (package libxcb1 1.15-1, /usr/share/doc/libxcb1/changelog.gz; MIT/X11 licence):
  698 commits, 2006-2022, 21 merges;
- GNU FriBidi 1.0.8 (package libfribidi0 1.0.8-2.1, /usr/share/doc/libfribidi0/changelog.gz,
  `git log --stat`: files touched; LGPL-2.1+): 339 commits, 2004-2019, 25 merges.

Each history is rebuilt as a git repository in a temporary folder with `git fast-import` (each
commit's author, date and full message as the ChangeLog gives them; the files its stat names, each
touched with a one-line content; a merge's second parent when the ChangeLog names it), given its
real origin remote, and backfilled into a temporary store by `api.hooks.backfill_commits`: the
memories (content, kind, source, tags, project) are what that backfill stored, except that the
commit hash each note names is the real one, not the rebuilt repository's.

The notes and the questions below were written by hand, before any recall, bench or ranking ran
on them: questions about commits from reading the ChangeLogs, questions about notes from the notes.
A question names its answer (`relevant`); a corrected note names the note it corrects (`stale`).
The rules they follow are in docs/corpora.md.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "corpora"
OUT = ROOT / "memsafe" / "data" / "notes_corpus.json.gz"
BACKFILLED_AT = "2022-06-01T09:12:00+00:00"  # when the user ran `memsafe hook backfill` in both clones
NOW = "2022-07-22T17:00:00+00:00"  # when the questions are asked

REPOS = {
    "xcb": {
        "changelog": "libxcb-1.15.changelog.gz",
        "copyright": "libxcb.copyright",
        "origin": "https://gitlab.freedesktop.org/xorg/lib/libxcb.git",
        "package": "libxcb1 1.15-1 (Debian 12), /usr/share/doc/libxcb1/changelog.gz",
        "licence": "MIT/X11",
    },
    "fribidi": {
        "changelog": "fribidi-1.0.8.changelog.gz",
        "copyright": "fribidi.copyright",
        "origin": "https://github.com/fribidi/fribidi.git",
        "package": "libfribidi0 1.0.8-2.1 (Debian 12), /usr/share/doc/libfribidi0/changelog.gz",
        "licence": "LGPL-2.1+",
    },
}

_COMMIT = re.compile(r"^commit ([0-9a-f]{40})\b.*$", re.M)
_STAT = re.compile(r"^ (\S.*?)\s+\|\s+(?:\d+|Bin\b)")
_BRACES = re.compile(r"^(.*)\{(.*) => (.*)\}(.*)$")


def parse_log(text: str) -> list[dict]:
    """The commits of a `git log` (or `git log --stat`) ChangeLog, oldest first: {sha, merge: [short
    parents], author, email, date (datetime with its offset), message, files}."""
    starts = [(m.start(), m.group(1)) for m in _COMMIT.finditer(text)]
    commits = []
    for n, (start, sha) in enumerate(starts):
        block = text[start: starts[n + 1][0] if n + 1 < len(starts) else len(text)].split("\n")[1:]
        merge, author, email, date = [], "", "", None
        i = 0
        while i < len(block) and block[i].strip():
            key, _, value = block[i].partition(":")
            if key == "Merge":
                merge = value.split()
            elif key == "Author":
                author, _, rest = value.strip().rpartition(" <")
                email = rest.rstrip(">")
            elif key == "Date":
                date = datetime.strptime(value.strip(), "%a %b %d %H:%M:%S %Y %z")
            i += 1
        message, files = [], []
        for line in block[i:]:
            if line.startswith("    ") or not line.strip():
                if not files:
                    message.append(line[4:])
            elif _STAT.match(line):
                files.extend(_paths(_STAT.match(line).group(1)))
        commits.append({"sha": sha, "merge": merge, "author": author or "unknown", "email": email, "date": date,
                        "message": "\n".join(message).strip("\n") + "\n", "files": files})
    commits.reverse()
    known = {f for c in commits for f in c["files"] if not f.startswith(".../")}
    for c in commits:  # `--stat` shortens a long path to ".../tail": the full one it names elsewhere
        c["files"] = [_full(f, known) for f in c["files"]]
    return commits


def _paths(name: str) -> list[str]:
    """The paths one stat line names: a rename `a/{b => c}/d` names both (backfill reads the
    history with --no-renames, as a deletion and an addition)."""
    braces = _BRACES.match(name)
    if braces:
        head, old, new, tail = braces.groups()
        return [re.sub("/+", "/", f"{head}{part}{tail}").strip("/") for part in (old, new)]
    if " => " in name:
        return [part.strip() for part in name.split(" => ")]
    return [name.strip()]


def _full(path: str, known: set[str]) -> str:
    if not path.startswith(".../"):
        return path
    tail = path[3:]
    matches = sorted(k for k in known if k.endswith(tail))
    return matches[0] if matches else tail.lstrip("/")


def _fast_import_stream(commits: list[dict]) -> bytes:
    """A `git fast-import` stream of `commits` (oldest first) on refs/heads/master, mark n+1 for
    commit n; each commit's parent the one before it (so every commit stays reachable), and a
    merge's second parent one of the parents its ChangeLog names."""
    out = bytearray()
    marks: dict[str, int] = {}

    def data(text: str) -> None:
        raw = text.encode("utf-8")
        out.extend(b"data %d\n" % len(raw) + raw + b"\n")

    for n, c in enumerate(commits, start=1):
        stamp = f"{int(c['date'].timestamp())} {c['date'].strftime('%z')}"
        who = f"{c['author']} <{c['email']}>"
        out.extend(f"commit refs/heads/master\nmark :{n}\nauthor {who} {stamp}\ncommitter {who} {stamp}\n".encode())
        data(c["message"])
        named = [next((mark for sha, mark in marks.items() if sha.startswith(short)), None) for short in c["merge"]]
        parents = list(dict.fromkeys([n - 1, *(mark for mark in reversed(named) if mark)]))[:2] if n > 1 else []
        for word, mark in zip(("from", "merge"), parents):
            out.extend(f"{word} :{mark}\n".encode())
        for path in dict.fromkeys(c["files"]):
            out.extend(f'M 100644 inline "{path}"\n'.encode())
            data(f"{c['sha'][:7]}\n")
        out.extend(b"\n")
        marks[c["sha"]] = n
    return bytes(out)


def rebuild(commits: list[dict], folder: Path, origin: str) -> dict[str, str]:
    """A git repository in `folder` holding `commits`, with `origin` as its remote. Returns
    {rebuilt commit hash: real hash}."""
    def git(*args: str, stdin: bytes | None = None) -> str:
        return subprocess.run(["git", "-C", str(folder), *args], input=stdin, capture_output=True,
                              check=True).stdout.decode()

    folder.mkdir(parents=True)
    git("init", "-q", "-b", "master")
    git("remote", "add", "origin", origin)
    marks = folder / "marks"
    git("fast-import", "--quiet", f"--export-marks={marks}", stdin=_fast_import_stream(commits))
    git("checkout", "-q", "-f", "master")
    rebuilt = {}
    for line in marks.read_text().split("\n"):
        if line:
            mark, sha = line.split()
            rebuilt[sha] = commits[int(mark[1:]) - 1]["sha"]
    return rebuilt


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Within the block, the environment holds `values` (no model: vectors are not part of the
    corpus; the clock at the backfill; a home of its own); put back as it was afterwards."""
    former = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in former.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def backfilled(repos: dict) -> tuple[list[dict], dict[str, str]]:
    """Every repository rebuilt and backfilled into one temporary store, as the hook stores it.
    Returns (memories in backfill order, {repository name: project key})."""
    from memsafe import api
    from memsafe.api.hooks import backfill_commits, commit_uid

    memories, projects = [], {}
    with tempfile.TemporaryDirectory(prefix="notes-corpus-") as tmp, _environment(
            MEMSAFE_NO_MODEL="1", MEMSAFE_NOW=BACKFILLED_AT, MEMSAFE_HOME=str(Path(tmp) / "home")):
        store = api.open_store(str(Path(tmp) / "memory.db")).store
        for name, repo in repos.items():
            commits = parse_log(gzip.decompress((FIXTURES / repo["changelog"]).read_bytes()).decode("utf-8"))
            folder = Path(tmp) / name
            rebuilt = rebuild(commits, folder, repo["origin"])
            report = backfill_commits(store, folder)
            projects[name] = report.project
            shas = subprocess.run(["git", "-C", str(folder), "log", "--reverse", "--format=%H", "HEAD"],
                                  capture_output=True, check=True, text=True).stdout.split()
            for sha in shas:
                row = store.memory_by_uid(commit_uid(report.project, sha))
                if row is None:
                    continue  # not stored (the same note as another commit's)
                memory = store.get_memory(row["id"])
                real = rebuilt[sha]
                content = memory.content.replace(f"git commit {sha[:7]} ", f"git commit {real[:7]} ", 1)
                memories.append({"id": f"{name}-{real[:7]}", "kind": memory.kind, "source": memory.source,
                                 "tags": list(memory.tags), "project": report.project, "at": BACKFILLED_AT,
                                 "content": content})
        store.close()
    return memories, projects


# The notes: (id, repository, kind, source, when (UTC), text, tags). The user works on a kiosk
# product that builds both libraries from these clones; an agent helps. "Correction" notes correct
# an earlier note (the questions name that one as stale).
NOTES = [
    ("n-xcb-01", "xcb", "decision", "user", "2022-06-01T10:05", "We pin libxcb at 1.15 for the 2022.2 kiosk image; "
     "moving past it waits until xcb-proto 1.15.2 is in the base image.", ()),
    ("n-xcb-02", "xcb", "preference", "user", "2022-06-01T10:40", "Dana wants every libxcb patch we carry to go "
     "upstream as a merge request on gitlab.freedesktop.org first; we carry a patch locally only while its MR is "
     "open.", ()),
    ("n-xcb-03", "xcb", "fact", "agent", "2022-06-02T08:15", "The kiosk UI talks to the X server over TCP from "
     "inside its container (DISPLAY=10.0.3.1:0), so the TCP paths in xcb_util.c matter to us, not only the unix "
     "socket.", ()),
    ("n-xcb-04", "xcb", "fact", "agent", "2022-06-02T09:30", "Our watchdog restarts the kiosk UI when its main "
     "loop stalls for more than 8 seconds; most of the stalls logged in May were inside xcb_wait_for_reply.", ()),
    ("n-xcb-05", "xcb", "task", "user", "2022-06-03T14:20", "TODO: write a regression test for the request-check "
     "hang the watchdog hit in May: a checked request that is never flushed, then xcb_request_check on it.",
     ("todo",)),
    ("n-xcb-06", "xcb", "preference", "user", "2022-06-03T15:00", "For libxcb bugs, Dana prefers an xtrace log of "
     "the session over a wireshark capture, and a build with CFLAGS='-O0 -g' so the backtrace has line numbers.",
     ()),
    ("n-xcb-07", "xcb", "fact", "agent", "2022-06-06T11:10", "The C code for every request and reply is generated "
     "from xcb-proto's XML by src/c_client.py at build time; never edit the generated xproto.c or randr.c, change "
     "the generator or the XML.", ()),
    ("n-xcb-08", "xcb", "decision", "user", "2022-06-06T16:45", "We keep xcb-xkb enabled in our build: the "
     "on-screen keyboard needs it to follow layout switches.", ()),
    ("n-xcb-09", "xcb", "fact", "agent", "2022-06-08T09:00", "Device images run Xorg 1.20.11; the developer VMs use "
     "Xephyr nested in the desktop session.", ()),
    ("n-xcb-10", "xcb", "task", "user", "2022-06-08T13:30", "Backport the EINTR-from-recvmsg fix to the 1.14 "
     "branch that the old kiosk image (2021.4) still ships; that image crashes with 'interrupted system call' "
     "about once a week.", ("todo",)),
    ("n-xcb-11", "xcb", "fact", "agent", "2022-06-09T10:20", "Our CI runs libxcb's make check against Check 0.15; "
     "the builder image needs the check package, or configure silently skips the unit tests.", ()),
    ("n-xcb-12", "xcb", "decision", "user", "2022-06-10T17:05", "We keep upstream's 64 KB minimum for the unix "
     "socket send buffer: our try with 256 KB did not change frame times on the device.", ()),
    ("n-xcb-13", "xcb", "preference", "user", "2022-06-13T09:40", "Commits in our libxcb fork follow upstream "
     "style: a short imperative subject, a Signed-off-by line, no ticket number in the subject (it goes in the "
     "body).", ()),
    ("n-xcb-14", "xcb", "fact", "agent", "2022-06-14T12:00", "Our fetch script looked for libxcb-1.15.tar.bz2 and "
     "failed: upstream tarballs have been .tar.xz since 1.14. The script now takes the extension from the "
     "release list.", ()),
    ("n-xcb-15", "xcb", "task", "user", "2022-06-15T10:30", "Ask Uli on the xcb mailing list whether the "
     "take_socket/return_socket deadlock is still open before we write our own patch for it.", ("todo",)),
    ("n-xcb-16", "xcb", "fact", "user", "2022-06-20T08:50", "Correction: the watchdog's stall limit is 5 seconds, "
     "not 8; it was lowered in the 2022.1 image.", ("correction",)),
    ("n-xcb-17", "xcb", "fact", "agent", "2022-06-21T15:15", "Correction: device images run Xorg 21.1.3 since "
     "2022.1; Xorg 1.20.11 was the 2021.4 image.", ("correction",)),
    ("n-xcb-18", "xcb", "decision", "user", "2022-06-22T11:00", "We build without Xevie and Xprint "
     "(--disable-xevie --disable-xprint) and without the SELinux extension; nothing on the kiosk uses them.", ()),
    ("n-xcb-19", "xcb", "fact", "agent", "2022-06-27T14:40", "A full libxcb build with make check takes about 6 "
     "minutes on the 2-core CI runner, 4 of them generating and compiling the extension code.", ()),
    ("n-xcb-20", "xcb", "preference", "user", "2022-06-28T09:10", "Dana reviews generator changes (c_client.py) "
     "herself; the agent may change the hand-written C files but must ask before touching the generator.", ()),
    ("n-xcb-21", "xcb", "decision", "agent", "2022-07-04T16:20", "The kiosk now sets DISPLAY=unix:0 instead of TCP "
     "when the X server runs on the same device; TCP stays only for the remote-display demo units.", ()),
    ("n-xcb-22", "xcb", "task", "agent", "2022-07-11T10:00", "Measure how many requests the kiosk sends per day, to "
     "know whether the 2**32 request counter limit in the replies map can bite a device that runs for months.",
     ("todo",)),
    ("n-xcb-23", "xcb", "fact", "user", "2022-07-18T13:25", "The hang from May is gone on devices with libxcb 1.15: "
     "no watchdog restart in xcb_request_check for three weeks on 40 units.", ()),
    ("n-fri-01", "fribidi", "decision", "user", "2022-06-01T11:20", "We build fribidi with meson (-Ddocs=false) in "
     "the SDK, not with autotools: c2man is not in the builder image.", ()),
    ("n-fri-02", "fribidi", "fact", "agent", "2022-06-02T10:05", "The Hebrew and Arabic labels of the kiosk UI go "
     "through fribidi_log2vis(); nothing of ours calls fribidi_get_par_embedding_levels_ex directly.", ()),
    ("n-fri-03", "fribidi", "preference", "user", "2022-06-02T16:30", "Dana wants each right-to-left bug reproduced "
     "with the CapRTL charset (fribidi --charset CapRTL) in the report, so that people who do not read Arabic or "
     "Hebrew can follow it.", ()),
    ("n-fri-04", "fribidi", "fact", "agent", "2022-06-07T09:45", "The translators' glossary has 14 Persian strings "
     "spelled with Farsi Yeh (U+06CC); they render correctly with fribidi 1.0.8.", ()),
    ("n-fri-05", "fribidi", "decision", "user", "2022-06-07T14:10", "The 2022.2 image stays on fribidi 1.0.8; newer "
     "releases have not been tested with our label shaping.", ()),
    ("n-fri-06", "fribidi", "task", "user", "2022-06-09T11:55", "TODO: check whether the multiple-isolates fix "
     "changes how the mixed Hebrew/English price labels render; before/after screenshots go in "
     "qa/kiosk-rtl/.", ("todo",)),
    ("n-fri-07", "fribidi", "fact", "agent", "2022-06-10T10:30", "Unicode data comes from gen.tab/unidata/*.txt and "
     "the tables are generated at build time; updating Unicode means replacing those files and rebuilding.", ()),
    ("n-fri-08", "fribidi", "preference", "user", "2022-06-13T15:20", "No GLib in anything we add to fribidi: "
     "upstream removed it and we do not want it back, not even in the tests.", ()),
    ("n-fri-09", "fribidi", "fact", "agent", "2022-06-14T09:05", "The conformance tests against BidiTest.txt and "
     "BidiCharacterTest.txt take about 40 seconds on the CI runner; run them with `meson test -C build`.", ()),
    ("n-fri-10", "fribidi", "decision", "user", "2022-06-16T12:40", "fribidi's own Arabic shaping is used for "
     "short labels only; long texts in the help viewer are shaped by HarfBuzz.", ()),
    ("n-fri-11", "fribidi", "task", "agent", "2022-06-17T17:00", "Open an upstream issue: FRIBIDI_BIDI_MAX_EXPLICIT_"
     "LEVEL is 125 but our layout engine still assumes at most 61 embedding levels.", ("todo",)),
    ("n-fri-12", "fribidi", "decision", "user", "2022-06-20T10:15", "Conformance tests run nightly on the fribidi "
     "fork, not on every merge request, to keep merge-request pipelines under 10 minutes.", ()),
    ("n-fri-13", "fribidi", "fact", "user", "2022-06-23T09:30", "Correction: the 2022.2 image ships fribidi 1.0.10, "
     "not 1.0.8; the base image update in June pulled it in and QA signed it off on 21 June.", ("correction",)),
    ("n-fri-14", "fribidi", "preference", "user", "2022-06-24T14:50", "Keep our fribidi patches C89-clean: the "
     "vendor toolchain of the old payment terminal still builds it with -std=c89.", ()),
    ("n-fri-15", "fribidi", "fact", "agent", "2022-06-29T11:25", "The kiosk links fribidi statically; the shared "
     "libfribidi.so.0 on the device belongs to the system's Pango and is not ours to upgrade.", ()),
    ("n-fri-16", "fribidi", "decision", "agent", "2022-07-05T15:35", "Correction to the test plan: conformance tests "
     "now run on every merge request that touches lib/; nightly was too late to catch the bracket regression.",
     ("correction",)),
    ("n-fri-17", "fribidi", "task", "user", "2022-07-06T09:00", "Add the three Urdu strings from the June release "
     "to the CapRTL test inputs; the translators flagged them as reversed.", ("todo",)),
    ("n-fri-18", "fribidi", "fact", "agent", "2022-07-08T13:45", "The price-label screenshots show no change with "
     "the isolates fix: qa/kiosk-rtl/ before and after are pixel-identical for all 220 labels.", ()),
    ("n-fri-19", "fribidi", "preference", "user", "2022-07-12T10:10", "In RTL bug reports, quote the logical string "
     "as code points (U+05D0 ...), never pasted right-to-left text: editors reorder it.", ()),
    ("n-fri-20", "fribidi", "fact", "agent", "2022-07-14T16:05", "Our meson wrap for fribidi points at the 1.0.10 "
     "tarball with its sha256 checked; the wrap file is subprojects/fribidi.wrap in the SDK.", ()),
    ("n-fri-21", "fribidi", "decision", "user", "2022-07-19T11:40", "We will not carry the reorder-runs API "
     "locally: upstream reverted it once, and we only need log2vis.", ()),
    ("n-fri-22", "fribidi", "fact", "user", "2022-07-20T09:20", "Farah from the translation team is our contact for "
     "Persian and Urdu strings; she answers within a day on the l10n channel.", ()),
]

# The questions: (id, type, repository, text, relevant, stale).
QUESTIONS = [
    # answered by a note
    ("nq01", "note", "xcb", "which libxcb version do we pin for the 2022.2 image, and what are we waiting for?",
     ["n-xcb-01"], []),
    ("nq02", "note", "xcb", "what's our rule for carrying local patches to libxcb?", ["n-xcb-02"], []),
    ("nq03", "note", "xcb", "does the kiosk connect to X over a unix socket or over the network?",
     ["n-xcb-03", "n-xcb-21"], []),
    ("nq04", "note", "xcb", "how long may the kiosk main loop stall before the watchdog restarts the UI?",
     ["n-xcb-16"], ["n-xcb-04"]),
    ("nq05", "note", "xcb", "what regression test did I say we need for the request check hang?", ["n-xcb-05"], []),
    ("nq06", "note", "xcb", "what does Dana want attached to a libxcb bug report?", ["n-xcb-06"], []),
    ("nq07", "note", "xcb", "can I just patch the generated xproto.c?", ["n-xcb-07"], []),
    ("nq08", "note", "xcb", "why do we keep the xkb library enabled?", ["n-xcb-08"], []),
    ("nq09", "note", "xcb", "which Xorg version runs on the devices?", ["n-xcb-17"], ["n-xcb-09"]),
    ("nq10", "note", "xcb", "what still has to be backported for the 2021.4 image?", ["n-xcb-10"], []),
    ("nq11", "note", "xcb", "the unit tests did not run in CI, configure just skipped them. what is missing?",
     ["n-xcb-11"], []),
    ("nq12", "note", "xcb", "did we change the socket send buffer size?", ["n-xcb-12"], []),
    ("nq13", "note", "xcb", "how should commit messages in our libxcb fork look?", ["n-xcb-13"], []),
    ("nq14", "note", "xcb", "why did the fetch script break for the 1.15 release?", ["n-xcb-14"], []),
    ("nq15", "note", "xcb", "who were we going to ask about the take_socket deadlock?", ["n-xcb-15"], []),
    ("nq16", "note", "xcb", "which optional X extensions do we leave out of our libxcb build?", ["n-xcb-18"], []),
    ("nq17", "note", "xcb", "how long does CI take for a full build and check?", ["n-xcb-19"], []),
    ("nq18", "note", "xcb", "may the agent change c_client.py without asking?", ["n-xcb-20"], []),
    ("nq19", "note", "xcb", "what are we measuring about the request counter?", ["n-xcb-22"], []),
    ("nq20", "note", "xcb", "is the May hang fixed on the devices?", ["n-xcb-23"], []),
    ("nq21", "note", "xcb", "what did we decide about DISPLAY on devices where the X server is local?",
     ["n-xcb-21"], []),
    ("nq22", "note", "xcb", "which component was the UI stuck in when the watchdog fired in May?",
     ["n-xcb-04"], []),
    ("nq23", "note", "fribidi", "how do we build fribidi in the SDK?", ["n-fri-01"], []),
    ("nq24", "note", "fribidi", "which fribidi function does the kiosk call for its labels?", ["n-fri-02"], []),
    ("nq25", "note", "fribidi", "how should an RTL bug be reproduced in a report so everyone can read it?",
     ["n-fri-03"], []),
    ("nq26", "note", "fribidi", "do the Persian strings with Farsi Yeh display correctly?", ["n-fri-04"], []),
    ("nq27", "note", "fribidi", "which fribidi release is in the 2022.2 image?", ["n-fri-13"], ["n-fri-05"]),
    ("nq28", "note", "fribidi", "what did I want checked about the price labels and the isolates fix?",
     ["n-fri-06"], []),
    ("nq29", "note", "fribidi", "how do we update the Unicode tables?", ["n-fri-07"], []),
    ("nq30", "note", "fribidi", "can I use GLib helpers in a test I add to fribidi?", ["n-fri-08"], []),
    ("nq31", "note", "fribidi", "how long do the conformance tests take and how do I run them?", ["n-fri-09"], []),
    ("nq32", "note", "fribidi", "who shapes the long texts in the help viewer?", ["n-fri-10"], []),
    ("nq33", "note", "fribidi", "what issue were we going to open about embedding levels?", ["n-fri-11"], []),
    ("nq34", "note", "fribidi", "when do the conformance tests run on our fork?", ["n-fri-16"], ["n-fri-12"]),
    ("nq35", "note", "fribidi", "which C standard must our fribidi patches stick to, and why?", ["n-fri-14"], []),
    ("nq36", "note", "fribidi", "may we upgrade libfribidi.so.0 on the device?", ["n-fri-15"], []),
    ("nq37", "note", "fribidi", "which strings should be added to the CapRTL test inputs?", ["n-fri-17"], []),
    ("nq38", "note", "fribidi", "did the isolates fix change any price label?", ["n-fri-18"], []),
    ("nq39", "note", "fribidi", "how do I quote right-to-left text in a bug report?", ["n-fri-19"], []),
    ("nq40", "note", "fribidi", "where is the meson wrap for fribidi and which tarball does it use?",
     ["n-fri-20"], []),
    ("nq41", "note", "fribidi", "are we going to carry fribidi_reorder_runs ourselves?", ["n-fri-21"], []),
    ("nq42", "note", "fribidi", "who do I ask about an Urdu translation?", ["n-fri-22"], []),
    ("nq43", "note", "fribidi", "what did we decide about the test plan for merge requests?", ["n-fri-16"],
     ["n-fri-12"]),
    ("nq44", "note", "xcb", "what did we decide about the watchdog stall threshold", ["n-xcb-16"], ["n-xcb-04"]),
    # answered by a commit
    ("cq01", "commit", "xcb", "which CVE was fixed in read_packet?", ["xcb-1b33867"], []),
    ("cq02", "commit", "xcb", "why could xcb_request_check wait forever for a reply that never comes?",
     ["xcb-233d7b7"], []),
    ("cq03", "commit", "xcb", "what goes wrong with the replies map once a client has sent more than four billion "
     "requests?", ["xcb-dc28118"], []),
    ("cq04", "commit", "xcb", "when was Nagle's algorithm turned off for TCP connections?", ["xcb-ee89850"], []),
    ("cq05", "commit", "xcb", "why don't apps hang forever any more when the display over TCP goes away?",
     ["xcb-1cf2a87"], []),
    ("cq06", "commit", "xcb", "big requests needed several writev calls on OpenBSD, what fixed it?",
     ["xcb-095353f"], []),
    ("cq07", "commit", "xcb", "how does libxcb keep the X connection from leaking into child processes?",
     ["xcb-53a9834"], []),
    ("cq08", "commit", "xcb", "connecting to DISPLAY=127.0.0.1:0 failed on a machine that was offline",
     ["xcb-4f25ee1"], []),
    ("cq09", "commit", "xcb", "a GTK app crashed with an interrupted system call from recvmsg",
     ["xcb-2132498"], []),
    ("cq10", "commit", "xcb", "when did release tarballs switch from bzip2 to xz?", ["xcb-78c492d"], []),
    ("cq11", "commit", "xcb", "why was xcb_ge_event_t put back into xcb.h?", ["xcb-ce5395e"], []),
    ("cq12", "commit", "xcb", "why was the deadlock fix for xcb_take_socket reverted?", ["xcb-5d1dbb4"], []),
    ("cq13", "commit", "xcb", "what happened to xcb_wait_for_event_until?", ["xcb-e300ee4"], []),
    ("cq14", "commit", "xcb", "error constants would have been named like XCB_EXT_BAD_BAD_FOO", ["xcb-af50de2"],
     []),
    ("cq15", "commit", "xcb", "Xephyr got IO errors because timers interrupted select", ["xcb-8275ac3"], []),
    ("cq16", "commit", "xcb", "one thread polls for events while another waits for a GetInputFocus reply and the "
     "process deadlocks", ["xcb-5ceeaaa"], []),
    ("cq17", "commit", "xcb", "which fix came from a deadlock seen with wine?", ["xcb-23911a7"], []),
    ("cq18", "commit", "xcb", "why did reading spin in a busy loop on FreeBSD and macOS?", ["xcb-236f914"], []),
    ("cq19", "commit", "xcb", "which commit released libxcb 1.15?", ["xcb-c2c4a2c"], []),
    ("cq20", "commit", "xcb", "xcb_total_read", ["xcb-f9f4b00"], []),
    ("cq21", "commit", "xcb", "when was the abstract socket namespace on Linux supported?", ["xcb-25e59cc"], []),
    ("cq22", "commit", "xcb", "which change made xcb_generate_id check that XC-MISC is really there?",
     ["xcb-704e0a9"], []),
    ("cq23", "commit", "fribidi", "why was Meson support added to fribidi?", ["fribidi-a991b00"], []),
    ("cq24", "commit", "fribidi", "why does fribidi avoid the C library's binary search?",
     ["fribidi-cae9d6e", "fribidi-0f849e3"], []),
    ("cq25", "commit", "fribidi", "when did the library stop depending on GLib?",
     ["fribidi-39d1c30", "fribidi-6e23ed0"], []),
    ("cq26", "commit", "fribidi", "Unicode 11 update", ["fribidi-c8f3e3c", "fribidi-d19206b"], []),
    ("cq27", "commit", "fribidi", "why was the memory pool turned off by default?", ["fribidi-54b4496"], []),
    ("cq28", "commit", "fribidi", "four-byte UTF-8 sequences were not handled", ["fribidi-d6bcbea"], []),
    ("cq29", "commit", "fribidi", "why was the custom memory allocator removed?",
     ["fribidi-3519ef0", "fribidi-881b8d8"], []),
    ("cq30", "commit", "fribidi", "which commit undeprecated fribidi_log2vis?", ["fribidi-88aff0e"], []),
    ("cq31", "commit", "fribidi", "C++ builds failed because of where the extern \"C\" block was",
     ["fribidi-deb5884"], []),
    ("cq32", "commit", "fribidi", "FRIBIDI_BIDI_MAX_EXPLICIT_LEVEL isolate_level", ["fribidi-034c6e9"], []),
    ("cq33", "commit", "fribidi", "the fix for issue #58, reading memory that was never initialised",
     ["fribidi-47ed4eb"], []),
    ("cq34", "commit", "fribidi", "PFRIBIDI_TYPE_PDF_LRI is undefined", ["fribidi-46f52d5"], []),
    ("cq35", "commit", "fribidi", "why was the README symlink replaced?", ["fribidi-b4da58d", "fribidi-88bf9fe"],
     []),
    ("cq36", "commit", "fribidi", "when was continuous integration on Windows set up?", ["fribidi-c8fb314"], []),
    ("cq37", "commit", "fribidi", "the commit that admits the Yeh change in the Persian test went the wrong way",
     ["fribidi-8a20d52"], []),
    ("cq38", "commit", "fribidi", "which commit brought isolate characters (LRI, RLI, FSI) and Unicode 6.3?",
     ["fribidi-f20b648"], []),
    ("cq39", "commit", "fribidi", "critical bug in fribidi_get_bracket_types", ["fribidi-d90624b"], []),
    ("cq40", "commit", "fribidi", "why was the option to disable building documentation reverted?",
     ["fribidi-095d885"], []),
    ("cq41", "commit", "fribidi", "why was fribidi_reorder_runs taken out again?", ["fribidi-d36fab0"], []),
    ("cq42", "commit", "fribidi", "which commit prepared the 1.0.0 release?", ["fribidi-6523694"], []),
]


def notes(projects: dict[str, str]) -> list[dict]:
    """The NOTES as corpus memories, in the project of the repository each is about."""
    return [{"id": nid, "kind": kind, "source": source, "tags": list(tags), "project": projects[repo],
             "at": f"{when}:00+00:00", "content": text}
            for nid, repo, kind, source, when, text, tags in NOTES]


def main() -> None:
    memories, projects = backfilled(REPOS)
    memories += notes(projects)
    known = {m["id"] for m in memories}
    queries = []
    for qid, qtype, repo, text, relevant, stale in QUESTIONS:
        missing = set(relevant + stale) - known
        if missing:
            raise SystemExit(f"question {qid} names unknown memories {sorted(missing)}")
        query = {"id": qid, "type": qtype, "query": text, "relevant": relevant, "project": projects[repo]}
        if stale:
            query["stale"] = stale
        queries.append(query)
    corpus = {
        "name": "notes among commits",
        "version": 1,
        "description": "The full commit histories of libxcb 1.15 and GNU FriBidi 1.0.8, backfilled as `memsafe "
                       "hook backfill` stores them, with a user's and an agent's notes about both repositories; "
                       "questions answered half by a note, half by a commit (scripts/notes_corpus_src.py, "
                       "docs/corpora.md).",
        "sources": {name: {"package": repo["package"], "origin": repo["origin"], "licence": repo["licence"]}
                    for name, repo in REPOS.items()},
        "licences": {name: (FIXTURES / repo["copyright"]).read_text(encoding="utf-8")
                     for name, repo in REPOS.items()},
        "project": None,
        "now": NOW,
        "memories": memories,
        "queries": queries,
    }
    text = json.dumps(corpus, ensure_ascii=False, indent=1) + "\n"
    OUT.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    print(f"{OUT.relative_to(ROOT)}: {len(memories)} memories ({len(NOTES)} notes), {len(queries)} questions "
          f"({sum(q['type'] == 'note' for q in queries)} by a note)", file=sys.stderr)


if __name__ == "__main__":
    main()
