"""Responsibility: answer `--help` and shell-completion (TAB) requests without importing the CLI.

Both answers are pure functions of the installed CLI and of the request: the command words, the
completion variables the shell sets, and how the output is shown (a terminal or not, its width,
the colour settings). Building them needs Typer, Click, pydantic and rich (~0.2 s of imports),
which made one TAB cost 0.4–0.5 s. So the first answer to a request is computed by the CLI as
usual and stored; the same request later is answered from the store in a few milliseconds.

- The store is one JSON file in `settings.cache_dir()`, named by a stamp of the installed CLI
  (memsafe's version, and the size and mtime of every `memsafe/cli/*.py`, `memsafe/models.py` and
  Typer itself): any change to a command or option, or an upgrade, starts a new file.
- Only exit code 0 answers are stored; a corrupt or unreadable store counts as empty.
- After a completion miss, a detached process fills the store with the answers to the likely
  next requests of that shell (every command-name prefix, `-` and `--` after each command), so
  the first TAB of a session is usually already answered.
- `MEMSAFE_CLI_CACHE=0` turns it all off.

Nothing here imports more than the standard library (and `memsafe.settings` for the path).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from memsafe.caches import load_json, merge_json, stamp_of

__all__ = ["request_key", "replay", "recording", "prefill"]

COMPLETE_VAR = "_MEMSAFE_COMPLETE"
# Everything the completion protocols of Typer's bash, zsh, fish and PowerShell scripts read.
_COMPLETION_ENV = ("COMP_WORDS", "COMP_CWORD", "_TYPER_COMPLETE_ARGS", "_TYPER_COMPLETE_FISH_ACTION",
                   "_TYPER_COMPLETE_WORD_TO_COMPLETE")
# What changes how rich and Click render help: terminal size, colour and encoding settings.
_DISPLAY_ENV = re.compile(r"^(COLUMNS|LINES|TERM|COLORTERM|NO_COLOR|FORCE_COLOR|PY_COLORS|CLICOLOR.*|"
                          r"TERMINAL_WIDTH|TTY_.*|_TYPER_.*|GITHUB_ACTIONS|JUPYTER_.*|LANG|LC_.*|"
                          r"PYTHONIOENCODING|PYTHONUTF8)$")
_WORD = re.compile(r"^[a-z][a-z0-9-]*$")


def _stamp() -> str:
    """Identity of the installed CLI: a change to any command module or an upgrade changes it."""
    here = Path(__file__).resolve().parent
    files = sorted(here.glob("*.py")) + [here.parent / "models.py"]
    try:
        import importlib.util

        spec = importlib.util.find_spec("typer")
        if spec is not None and spec.origin:
            files.append(Path(spec.origin))
    except (ImportError, ValueError):
        pass
    return stamp_of(files)


def _path() -> Path:
    from memsafe import settings

    return settings.cache_dir() / f"cli-answers-{_stamp()}.json"


def _display(stdout) -> list:
    try:
        tty = bool(stdout.isatty())
    except (AttributeError, ValueError):
        tty = False
    size = None
    if tty:
        with contextlib.suppress(OSError, AttributeError, ValueError):
            size = tuple(os.get_terminal_size(stdout.fileno()))
    return [tty, size, getattr(stdout, "encoding", None)]


def request_key(argv: list[str], environ: Mapping[str, str], stdout) -> str | None:
    """The cache key of a help or completion request, or None for any other command line.

    Help: command words (lower-case names only, no options) then exactly `--help` or `-h`.
    Completion: `_MEMSAFE_COMPLETE=complete_<shell>` with the shell's variables.
    """
    if environ.get("MEMSAFE_CLI_CACHE", "1") == "0":
        return None
    instruction = environ.get(COMPLETE_VAR)
    if instruction:
        if not instruction.startswith("complete_") or argv:
            return None
        request = _completion_request(instruction, environ)
        return None if request is None else json.dumps(["complete", instruction, *request])
    if not argv or argv[-1] not in ("--help", "-h") or not all(_WORD.match(a) for a in argv[:-1]):
        return None
    display = sorted((k, v) for k, v in environ.items() if _DISPLAY_ENV.match(k))
    return json.dumps(["help", argv, _display(stdout), display])


def _split(line: str) -> list[str] | None:
    import shlex

    try:
        return shlex.split(line)
    except ValueError:  # an open quote: left to the CLI
        return None


def _completion_request(instruction: str, environ: Mapping[str, str]) -> list | None:
    """(words before the cursor, the word being completed, fish action) as Typer's completion
    classes read them from the shell's variables, so that equal requests get equal keys."""
    shell = instruction.removeprefix("complete_")
    if shell == "bash":
        words = _split(environ.get("COMP_WORDS", ""))
        try:
            cword = int(environ.get("COMP_CWORD", ""))
        except ValueError:
            return None
        if words is None or cword < 1:
            return None
        return [words[1:cword], words[cword] if cword < len(words) else "", None]
    line = environ.get("_TYPER_COMPLETE_ARGS", "")
    words = _split(line)
    if words is None:
        return None
    args = words[1:]
    if shell in ("zsh", "fish"):
        incomplete = args.pop() if args and not line.endswith(" ") else ""
        return [args, incomplete, environ.get("_TYPER_COMPLETE_FISH_ACTION") if shell == "fish" else None]
    return [args, environ.get("_TYPER_COMPLETE_WORD_TO_COMPLETE", ""), None]


def replay(key: str) -> bool:
    """Write the stored answer for `key` to stdout; False when there is none."""
    answer = load_json(_path()).get(key)
    if not isinstance(answer, str):
        return False
    sys.stdout.write(answer)
    sys.stdout.flush()
    return True


class _Tee(io.TextIOBase):
    """sys.stdout as the CLI sees it (same terminal, size and encoding), keeping a copy of the text."""

    def __init__(self, stream):
        self.stream, self.parts = stream, []

    def write(self, text) -> int:
        if isinstance(text, (bytes, bytearray)):  # Click writes bytes where it finds no binary buffer
            text = bytes(text).decode(self.stream.encoding or "utf-8", "replace")
        self.parts.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self):  # type: ignore[override]
        return self.stream.encoding

    @property
    def errors(self):  # type: ignore[override]
        return self.stream.errors


@contextlib.contextmanager
def recording(key: str) -> Iterator[None]:
    """Run the CLI inside: what it writes to stdout is stored under `key` if it exits with code 0.
    A completion miss also starts the detached prefill of that shell's likely requests."""
    real, tee = sys.stdout, _Tee(sys.stdout)
    sys.stdout = tee
    code: object = 0
    try:
        yield
    except SystemExit as exc:
        code = exc.code
        raise
    finally:
        sys.stdout = real
        if code in (0, None):
            with contextlib.suppress(Exception):  # a cache: never fail the command for it
                merge_json(_path(), {key: "".join(tee.parts)})
                kind, instruction = json.loads(key)[:2]
                if kind == "complete":
                    _spawn_prefill(instruction)


def _spawn_prefill(instruction: str) -> None:
    import subprocess

    detach: dict = {"start_new_session": True} if os.name == "posix" else {
        "creationflags": getattr(subprocess, "DETACHED_PROCESS", 0)}
    code = "import sys; from memsafe.cli.cache import prefill; prefill(sys.argv[1])"
    env = {k: v for k, v in os.environ.items() if k != COMPLETE_VAR and k not in _COMPLETION_ENV}
    with contextlib.suppress(OSError):
        subprocess.Popen([sys.executable, "-c", code, instruction], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True, env=env, **detach)


def _requests(shell: str, words: list[str]) -> dict[str, str]:
    """The completion variables of `shell` for the command line `memsafe <words>` (the last word
    being completed), as its completion script sets them."""
    line = " ".join(["memsafe", *words])
    if shell == "bash":
        return {"COMP_WORDS": line, "COMP_CWORD": str(len(words))}
    if shell == "zsh":
        return {"_TYPER_COMPLETE_ARGS": line}
    if shell == "fish":
        return {"_TYPER_COMPLETE_ARGS": line, "_TYPER_COMPLETE_FISH_ACTION": "get-args"}
    return {"_TYPER_COMPLETE_ARGS": line, "_TYPER_COMPLETE_WORD_TO_COMPLETE": words[-1] if words else ""}


def _lines(command, path: list[str]) -> Iterator[list[str]]:
    """Word lists worth answering ahead: each prefix of each subcommand name, and `-`/`--` after
    each command."""
    sub = getattr(command, "commands", None)
    if sub:
        for name, child in sub.items():
            if getattr(child, "hidden", False):
                continue
            for i in range(len(name) + 1):
                yield [*path, name[:i]]
            yield from _lines(child, [*path, name])
    else:
        yield [*path, "-"]
        yield [*path, "--"]


def prefill(instruction: str) -> None:
    """Compute and store the answers to the likely completion requests of one shell
    (`instruction` is `complete_bash`, `complete_zsh`, ...). Run in a detached process."""
    import typer

    from memsafe.cli import app

    shell = instruction.removeprefix("complete_")
    answers: dict[str, str] = {}
    saved_env, saved_out = dict(os.environ), sys.stdout
    command = typer.main.get_command(app)  # built once: building it is most of a TAB's cost
    try:
        for words in _lines(command, []):
            for var in _COMPLETION_ENV:
                os.environ.pop(var, None)
            os.environ.update({COMPLETE_VAR: instruction, **_requests(shell, words)})
            key = request_key([], os.environ, saved_out)
            if key is None:
                continue
            sys.stdout = buffer = io.StringIO()
            try:
                command(prog_name="memsafe", args=[])
            except SystemExit as exc:
                if exc.code not in (0, None):
                    continue
            except Exception:
                continue
            answers[key] = buffer.getvalue()
    finally:
        sys.stdout = saved_out
        os.environ.clear()
        os.environ.update(saved_env)
    merge_json(_path(), answers)
