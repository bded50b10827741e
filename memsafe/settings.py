"""Responsibility: the environment memsafe reads (`VARIABLES`, the one table, parsed once per
process into the typed `Environment` by `env()`), where things live (DB path, user config file),
how a config key is parsed and checked (`ConfigKey`), and project detection.

DB path precedence: `--db` > `MEMSAFE_DB` > `db` in the user config file (`memsafe config set db`)
> `<platformdirs user data dir>/memory.db`. `~` and relative paths are expanded once, against the
current directory, and the absolute result is what `status` shows.

Every path memsafe is given (`--db`, `MEMSAFE_DB`, `MEMSAFE_HOME`, `MEMSAFE_CACHE_DIR`,
`MEMSAFE_KEY_FILE`, `MEMSAFE_MODEL_DIR`, `MEMSAFE_HTTP_TOKENS_FILE`, export and import files,
project paths, the same over MCP) goes through `expand_path`: `~`, `$NAME`, `${NAME}` and
`%NAME%` are expanded from the environment, because MCP clients pass the strings of their config
files as written; one that cannot be expanded (unset, empty, or a client's own placeholder such as
`${workspaceFolder}` or `${env:NAME}`) is refused, never taken as a folder name. A `postgresql://` (or
`postgres://`) URL names a PostgreSQL database instead and is kept as it is.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

from memsafe.errors import InvalidInput, Refused

TYPE_CHECKING = False  # `typing.TYPE_CHECKING` without importing typing (which this module does not need)
if TYPE_CHECKING:
    from datetime import datetime  # `Environment.now`'s type; the module comes with `clock` when a value is set

APP = "memsafe"

@dataclass(frozen=True)
class Variable:
    """One environment variable memsafe reads: its name, what its value is (`kind`), and what it
    does. `owned` is False for a variable of the platform or another tool (HOME, TZ, ...) that
    memsafe reads but does not define; it is documented beside memsafe's own.

    Kinds: path (expanded by `expand_path`), flag (true/false, default false), switch (true/false,
    default true; `0` turns it off), count (a whole number >= 1), time (ISO-8601), text, secret
    (text never shown), level (a log level), program (read by the shell scripts of
    memsafe/data/claude-plugin/bin before memsafe starts, so not in `Environment`)."""

    name: str
    kind: str
    meaning: str
    owned: bool = True


# Every environment variable memsafe reads, with what it does: the one table that `Environment`
# is parsed from, that docs/usage.md's "Environment" and the man pages' ENVIRONMENT are made from
# (scripts/gen_docs.py), and that tests/test_docs.py checks against every `MEMSAFE_*` name the
# code names and every field of `Environment`.
VARIABLES: tuple[Variable, ...] = (
    Variable("MEMSAFE_DB", "text", "the database file or postgresql:// URL (after --db, before `config set db`)"),
    Variable("MEMSAFE_HOME", "path", "folder for the default database, the settings file and hook.log (tests use it)"),
    Variable("MEMSAFE_NOW", "time", "fix the clock (ISO-8601), for tests, benchmarks and reproducible decay runs"),
    Variable("MEMSAFE_DATE_ORDER", "text", "the order of day and month in numeric dates (12/03) a query or flag "
             "names: DMY, MDY or YMD (default: the locale's, LC_TIME; with none a query reads both days)"),
    Variable("MEMSAFE_MODEL_DIR", "path",
             "a folder with model.onnx and tokenizer.json: another compatible embedding model"),
    Variable("MEMSAFE_EMBED_MODEL", "text", "the embedding model by name (minilm, minilm-l3, e5-small; default: "
             "the one the store records, else minilm); a store whose vectors another model made answers by "
             "keywords until `memsafe embed --model NAME`"),
    Variable("MEMSAFE_NO_VEC", "flag", "run without vector search (troubleshooting); recall uses keywords only"),
    Variable("MEMSAFE_NO_MODEL", "flag",
             "run without the embedding model (troubleshooting); recall uses keywords only"),
    Variable("MEMSAFE_EMBED_THREADS", "count",
             "threads the embedding model uses (default: min(4, the cores this process may use))"),
    Variable("MEMSAFE_CACHE_DIR", "path", "cache folder (optimised model graph, token ranks and counts, secret-scan "
             "gates, --help and TAB answers; default: the user cache folder)"),
    Variable("MEMSAFE_BACKGROUND_EMBED", "switch",
             "0: `remember` leaves vectors pending instead of starting a background embedder"),
    Variable("MEMSAFE_SERVE_WARM", "switch",
             "0: `memsafe serve` loads no model in the background (vectors wait for a recall)"),
    Variable("MEMSAFE_WORKSPACE", "text", "the client's workspace folder (Cursor: `${workspaceFolder}`): `serve` "
             "detects the project from it, not from the folder it was started in"),
    Variable("MEMSAFE_MODEL_CACHE", "switch", "0: no cached optimised model graph"),
    Variable("MEMSAFE_CLI_CACHE", "switch", "0: no cached --help and TAB answers"),
    Variable("MEMSAFE_TOKEN_CACHE", "switch", "0: no cached token counts"),
    Variable("MEMSAFE_CLI_FAST", "switch",
             "0: recall, remember and import always go through the full command-line app"),
    Variable("MEMSAFE_DEBUG", "flag", "show tracebacks for user errors"),
    Variable("MEMSAFE_KEY", "secret", "the key of an encrypted store (docs/encryption.md)"),
    Variable("MEMSAFE_KEY_FILE", "path", "a file holding the key of an encrypted store"),
    Variable("MEMSAFE_NEW_KEY", "secret", "the new key for `memsafe rekey` when the key comes from MEMSAFE_KEY"),
    Variable("MEMSAFE_ALLOW_INSECURE_KEYRING", "flag",
             "1: accept a keyring backend that keeps keys in a plain file"),
    Variable("MEMSAFE_LOG_LEVEL", "level", "log detail of `memsafe serve` on stderr (DEBUG, INFO, WARNING)"),
    Variable("MEMSAFE_HTTP_TOKENS_FILE", "path",
             "the tokens (`name token` lines) of `memsafe serve --transport http` (docs/team.md)"),
    Variable("MEMSAFE_BIN", "program", "the memsafe program the Claude Code plugin's scripts start (default: "
             "`memsafe` on the PATH, else ~/.local/bin/memsafe; docs/agents.md)"),
    # Read where they matter, never parsed into `Environment`: the platform's and other tools'.
    Variable("HOME", "path", "the home folder: `~` in paths, and the cache folder below it on Linux", owned=False),
    Variable("XDG_CACHE_HOME", "path", "the user cache folder on Linux (`MEMSAFE_CACHE_DIR` overrides it)",
             owned=False),
    Variable("XDG_DATA_HOME", "path", "the user data folder on Linux (`MEMSAFE_HOME` overrides it)", owned=False),
    Variable("XDG_CONFIG_HOME", "path", "where the settings file is on Linux (`MEMSAFE_HOME` overrides it)",
             owned=False),
    Variable("CLAUDE_PROJECT_DIR", "path", "Claude Code's project folder: `serve` detects the project from it "
             "(after `MEMSAFE_WORKSPACE`)", owned=False),
    Variable("TZ", "text", "the local time zone that calendar words (\"today\", \"last week\") are read in",
             owned=False),
    Variable("LC_ALL", "text", "with LC_TIME and LANG: the locale that picks day-first or month-first dates",
             owned=False),
    Variable("COLUMNS", "count", "the width of tables printed to a pipe (default 120)", owned=False),
    Variable("NO_COLOR", "flag", "no colour in terminal output (as do FORCE_COLOR and TTY_COMPATIBLE the other "
             "way)", owned=False),
    Variable("PGHOST", "text", "with PGPORT and the other libpq variables: the PostgreSQL server of a "
             "postgresql:// URL that names none", owned=False),
)
# Names memsafe sets for its own child processes and scripts, never read from a user's shell.
INTERNAL_VARIABLES = ("_MEMSAFE_COMPLETE", "MEMSAFE_CHAINED", "MEMSAFE_EOF")

_TRUE, _FALSE = frozenset({"true", "1", "yes", "on"}), frozenset({"false", "0", "no", "off"})
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class Environment:
    """Every `MEMSAFE_*` variable of `VARIABLES`, parsed and checked once (`env()`): a field per
    variable, named after it without the prefix. Unset and empty are the same: the default.

    Paths are absolute (`expand_path`, against the directory at parse time; symlinks not
    resolved); `db` is kept as written, because `--db` overrides it and `resolve_db_path` checks
    it only when used; `workspace` as written (stripped), because `serve` judges it itself."""

    db: str | None = None
    home: Path | None = None
    now: datetime | None = None
    date_order: str | None = None
    model_dir: Path | None = None
    embed_model: str | None = None
    no_vec: bool = False
    no_model: bool = False
    embed_threads: int | None = None
    cache_dir: Path | None = None
    background_embed: bool = True
    serve_warm: bool = True
    workspace: str | None = None
    model_cache: bool = True
    cli_cache: bool = True
    token_cache: bool = True
    cli_fast: bool = True
    debug: bool = False
    key: str | None = field(default=None, repr=False)
    key_file: Path | None = None
    new_key: str | None = field(default=None, repr=False)
    allow_insecure_keyring: bool = False
    log_level: str = "WARNING"
    http_tokens_file: Path | None = None


ENV_PREFIX = "MEMSAFE_"


def field_name(variable: str) -> str:
    """The `Environment` field of a `MEMSAFE_*` variable: `MEMSAFE_NO_VEC` -> `no_vec`."""
    return variable.removeprefix(ENV_PREFIX).lower()


def parse_environment(environ: Mapping[str, str] | None = None) -> Environment:
    """An `Environment` from `environ` (default: `os.environ`), every value checked.

    Raises:
        InvalidInput: the first variable whose value is not of its kind, in one line naming it:
            a path with a variable or placeholder that cannot be expanded, a true/false that is
            neither, a count that is not a whole number >= 1, a time that is not ISO-8601.
    """
    source = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for variable in VARIABLES:
        if not variable.owned or variable.kind == "program":
            continue
        raw = source.get(variable.name, "")
        # A value of blanks is unset, except where it was always taken as written (and refused
        # there): a key, a new key, the database, the clock.
        if not (raw if variable.kind in ("secret", "time") or variable.name == "MEMSAFE_DB" else raw.strip()):
            continue
        values[field_name(variable.name)] = _parse(variable, raw)
    return Environment(**values)  # type: ignore[arg-type]  # each value is of its field's type by kind


def _parse(variable: Variable, raw: str) -> object:
    name, kind, text = variable.name, variable.kind, raw.strip()
    shown = repr(text) if len(repr(text)) <= 40 else repr(text)[:39] + "…"
    if kind == "path":
        return expand_path(text, what=name)
    if kind in ("flag", "switch"):
        word = text.lower()
        if word not in _TRUE | _FALSE:
            raise InvalidInput(f"{name} must be 1 or 0 (true/false, yes/no, on/off), got {shown}")
        return word in _TRUE
    if kind == "count":
        if not text.isdigit() or int(text) < 1:
            raise InvalidInput(f"{name} must be a whole number of at least 1, got {shown}")
        return int(text)
    if kind == "time":
        from memsafe import clock

        try:
            return clock.parse_iso(raw)
        except (ValueError, OverflowError):
            raise InvalidInput(f"{name}={raw!r} is not an ISO-8601 time") from None
    if kind == "level":  # an unknown level is the default one, as the logging of `serve` always took it
        return text.upper() if text.upper() in _LEVELS else "WARNING"
    return raw if kind == "secret" or name == "MEMSAFE_DB" else text


_current: Environment | None = None


def env() -> Environment:
    """The process's `Environment`: parsed from `os.environ` at the first call, then kept (a
    command reads each variable many times, and a missing one costs a lookup each time).
    Whoever changes a `MEMSAFE_*` variable in this process afterwards calls `reload()`.

    Raises:
        InvalidInput: see `parse_environment` (again at every call until the value is fixed).
    """
    global _current
    current = _current
    if current is None:
        current = _current = parse_environment()
    return current


def reload() -> None:
    """Forget the kept `Environment`: the next `env()` parses `os.environ` again (after a test or
    a benchmark sets a variable in this process)."""
    global _current
    _current = None


def env_path(name: str) -> Path | None:
    """The path a `MEMSAFE_*` path variable names (`expand_path`, symlinks not resolved), or None
    when it is unset or empty.

    Raises:
        InvalidInput: a value of the environment cannot be parsed (`parse_environment`).
    """
    value = getattr(env(), field_name(name))
    assert value is None or isinstance(value, Path), name
    return value


def data_dir() -> Path:
    """User data folder (`MEMSAFE_HOME` if set, else platformdirs' user data dir).

    Raises:
        InvalidInput: `MEMSAFE_HOME` (or another variable) cannot be parsed (`parse_environment`).
    """
    home = env().home
    if home:
        return home.resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir(APP, appauthor=False))


def cache_dir() -> Path:
    """Folder for caches memsafe can rebuild at any time (the optimised model graph):
    `MEMSAFE_CACHE_DIR` if set, else platformdirs' user cache dir. Not under `MEMSAFE_HOME`: a
    cache of the installed model is the same for every store and test home.

    Raises:
        InvalidInput: `MEMSAFE_CACHE_DIR` (or another variable) cannot be parsed (`parse_environment`).
    """
    folder = env().cache_dir
    if folder:
        return folder.resolve()
    linux = _linux_cache_dir()
    if linux is not None:
        return linux
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP, appauthor=False))


def _linux_cache_dir() -> Path | None:
    """platformdirs' user cache dir on Linux, `$XDG_CACHE_HOME/memsafe` or `$HOME/.cache/memsafe`,
    without importing it (which costs ~5-10 ms of every recall, most of it `tempfile`, which
    platformdirs imports); None where platformdirs has more to decide (another platform,
    Android, a relative $XDG_CACHE_HOME or $HOME). tests/test_speed.py checks that both agree;
    were they ever to differ, a cache would be rebuilt in another folder, nothing lost."""
    import sys

    if sys.platform != "linux" or hasattr(sys, "getandroidapilevel") or os.environ.get("ANDROID_DATA"):
        return None
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):
        return Path(xdg) / APP
    home = os.environ.get("HOME", "")
    return Path(home) / ".cache" / APP if home.startswith("/") else None


def config_file() -> Path:
    """User config file (JSON) holding machine-level settings such as `db`.

    Raises:
        InvalidInput: `MEMSAFE_HOME` (or another variable) cannot be parsed (`parse_environment`).
    """
    home = env().home
    if home:
        return home.resolve() / "settings.json"
    import platformdirs

    return Path(platformdirs.user_config_dir(APP, appauthor=False)) / "settings.json"


def default_db_path() -> Path:
    return data_dir() / "memory.db"


def current_dir() -> Path:
    """The working directory. Raises Refused if it was deleted under us."""
    try:
        return Path(os.getcwd())
    except OSError:
        raise Refused(
            "the current directory no longer exists; cd somewhere else, or pass --project/--global/--db"
        ) from None


# `${...}` (any content), `$NAME`, `%NAME%` (cmd.exe; `ProgramFiles(x86)` has parentheses).
_VARIABLE = re.compile(r"\$\{(?P<braced>[^}]*)\}|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)"
                       r"|%(?P<percent>[A-Za-z_][A-Za-z0-9_()]*)%")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def expand_vars(text: str, what: str = "path") -> str:
    """`text` with `$NAME`, `${NAME}` and `%NAME%` replaced by the environment's values (the
    forms of POSIX shells and of cmd.exe, on every platform: a config file written on one
    system is read on another). Anything else after `$` (`$5`, a lone `$`) is kept.

    Raises:
        InvalidInput: a variable that is unset or empty (an empty `$HOME` would make
            `$HOME/m.db` the root's `/m.db`), or `${...}` holding no plain name: a client's own
            placeholder (`${workspaceFolder}`, `${env:HOME}`, `${input:db}`) it did not fill in.
    """
    def value(match: re.Match) -> str:
        name = next(v for v in match.groupdict().values() if v is not None)
        plain = _NAME.fullmatch(name.replace("(", "_").replace(")", "_")) is not None
        found = os.environ.get(name, "") if plain else ""
        if not found:
            shown = " ".join(text.split())
            shown = shown if len(shown) <= 120 else shown[:119] + "…"
            why = ("is not set in memsafe's environment (or is a placeholder the client did not fill in); write "
                   "the path out or set the variable" if plain else
                   "is a placeholder the client did not fill in; write the path out")
            raise InvalidInput(f"{what} '{shown}': {match.group(0)} {why}")
        return found

    return _VARIABLE.sub(value, text) if ("$" in text or "%" in text) else text


def expand_path(raw: str | os.PathLike, *, what: str = "database path", base: str | os.PathLike | None = None
                ) -> Path:
    """Expand environment variables (`expand_vars`) and `~`, and make absolute against `base`
    (default: the current directory). No symlink resolution. The one place every path setting
    and path argument is expanded (module docstring).

    Args:
        what: how the error names the value (`--db`, `MEMSAFE_HOME`, "export file", ...).

    Raises:
        InvalidInput: empty, not valid text (undecodable bytes), a NUL byte, or a variable or
            placeholder that cannot be expanded.
    """
    text = str(raw).strip()
    if not text:
        raise InvalidInput(f"empty {what}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"the path {text.encode('utf-8', 'replace').decode()!r} is not valid UTF-8 text") from None
    if "\x00" in text:
        raise InvalidInput("a path cannot contain a NUL byte")
    expanded = os.path.expanduser(expand_vars(text, what))
    if not os.path.isabs(expanded):
        expanded = os.path.join(base if base is not None else current_dir(), expanded)
    return Path(os.path.normpath(expanded))


DB_URL_SCHEMES = ("postgresql://", "postgres://")


def is_db_url(raw: str | os.PathLike) -> bool:
    """True when a `--db` value is a PostgreSQL URL rather than a SQLite path."""
    return isinstance(raw, str) and raw.strip().lower().startswith(DB_URL_SCHEMES)


def db_target(raw: str | os.PathLike, *, what: str = "database path") -> Path | str:
    """A `--db` value as memsafe opens it: a PostgreSQL URL as given (libpq rules, checked when
    opened), anything else an absolute path (`expand_path`; `what` names it in errors).

    Raises:
        InvalidInput: see `expand_path`.
    """
    return raw.strip() if isinstance(raw, str) and is_db_url(raw) else expand_path(raw, what=what)


def read_user_config() -> dict:
    path = config_file()
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise Refused(f"cannot read {path}: {exc}; fix or delete it") from None
    if not isinstance(values, dict) or not isinstance(values.get("db", ""), str):
        raise Refused(f"{path} must be a JSON object whose \"db\" is a path string; fix or delete it")
    return values


def write_user_config(values: dict) -> Path:
    path = config_file()
    tmp = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise Refused(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def resolve_db_path(cli_db: str | None = None) -> tuple[Path | str, str]:
    """Return (absolute DB path or PostgreSQL URL (`db_target`), where it came from:
    '--db' | 'MEMSAFE_DB' | 'config (...)' | 'default')."""
    if cli_db is not None:
        return db_target(cli_db, what="database path (--db)"), "--db"
    from_env = env().db
    if from_env:
        return db_target(from_env, what="database path (MEMSAFE_DB)"), "MEMSAFE_DB"
    configured = read_user_config().get("db")
    if configured:
        return db_target(configured, what=f"database path (db in {config_file()})"), f"config ({config_file()})"
    return default_db_path(), "default"


# ---------------------------------------------------------------------------------------------
# Config keys stored in the database (`memsafe config`): how one is parsed and checked. The keys
# themselves are `memsafe.api.config.CONFIG_KEYS` (recall's in `memsafe.recall.weights`).


@dataclass(frozen=True)
class ConfigKey:
    """One setting: its type, default, inclusive bounds and help text."""

    name: str
    type: type
    default: object
    help: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    check: Callable[[object], object] | None = None  # extra validation; raises InvalidInput

    def parse(self, raw: str | int | float | bool) -> object:
        """Validate and convert a raw value. Raises InvalidInput with the allowed range."""
        try:
            if self.type is bool:
                text = str(raw).strip().lower()
                if text not in {"true", "false", "1", "0", "yes", "no", "on", "off"}:
                    raise ValueError
                value: object = text in {"true", "1", "yes", "on"}
            else:
                value = self.type(raw)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf), float(10**400)
            shown = repr(raw) if len(repr(raw)) <= 40 else repr(raw)[:39] + "…"
            noun = {int: "an integer", float: "a number", bool: "true or false"}.get(self.type, "text")
            raise InvalidInput(f"{self.name} must be {noun}, got {shown}") from None
        if isinstance(value, float) and value != value:  # NaN
            raise InvalidInput(f"{self.name} must be a number, got NaN")
        if isinstance(value, (int, float)) and (self.low is not None and value < self.low
                                                or self.high is not None and value > self.high):
            raise InvalidInput(f"{self.name} must be between {self.low:g} and {self.high:g}, got {raw}")
        if self.choices and value not in self.choices:
            shown = repr(raw) if len(repr(raw)) <= 40 else repr(raw)[:39] + "…"
            raise InvalidInput(f"{self.name} must be one of {', '.join(self.choices)}, got {shown}")
        if self.check is not None:
            value = self.check(value)
        return value


# The one config key kept in the user settings file (`config_file()`), not in a store: `memsafe
# config` lists, gets and sets it beside the store's keys (`memsafe.api.config.CONFIG_KEYS`).
DB_KEY = ConfigKey("db", str, "", "database file or postgresql:// URL, kept in the user settings file "
                   "(--db and MEMSAFE_DB come first)")


# ---------------------------------------------------------------------------------------------
# Projects.

_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


def project_key(path: str) -> str:
    """Stable project id for a filesystem path: posix separators, no trailing slash,
    lower-case drive letter. `C:\\Users\\A B\\web` and `c:/Users/A B/web/` give `c:/Users/A B/web`.
    """
    text = path.strip()
    if not text:
        raise InvalidInput("empty project path")
    if _WINDOWS_DRIVE.match(text) or "\\" in text:
        pure = PureWindowsPath(text)
        posix = pure.as_posix()
        if pure.drive:
            posix = pure.drive[0].lower() + posix[1:]
        return posix.rstrip("/") or "/"
    expanded = os.path.expanduser(text)
    if not os.path.isabs(expanded):
        expanded = os.path.abspath(expanded)
    return str(PurePosixPath(os.path.normpath(expanded)))


def git_root(start: Path) -> Path | None:
    """The working-tree root of the git repository containing `start`, or None.

    A linked worktree (`.git` is a file) maps to its main repository's root, so every worktree
    of one repository shares a project. Walks up the tree without running git.
    """
    cur = start.resolve()
    for candidate in (cur, *cur.parents):
        dotgit = candidate / ".git"
        if dotgit.is_dir():
            return candidate
        if dotgit.is_file():
            try:
                line = dotgit.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                return candidate
            if line.startswith("gitdir:"):
                gitdir = (candidate / line[len("gitdir:") :].strip()).resolve()
                common = gitdir / "commondir"
                if common.is_file():
                    main_git = (gitdir / common.read_text().strip()).resolve()
                    return main_git.parent
            return candidate
    return None


MAX_PROJECT_CHARS = 4096  # PATH_MAX on Linux (limits.h): no real project key is longer
ORIGIN_PREFIX = "origin:"  # a project keyed by its repository's remote: `origin:github.com/org/repo`
_SCP_REMOTE = re.compile(  # git@host:org/repo.git, git@[::1]:org/repo.git
    r"^(?:[^@/\s]+@)?(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:/\s\[\]]+)):(?!//)(?P<path>.+)$")


def remote_key(url: str) -> str | None:
    """The project key of a git remote URL: `origin:` + lower-case host + path, without user,
    password, port, `.git` or slashes at the ends, so `git@github.com:org/repo.git`,
    `ssh://git@github.com:22/org/repo` and `https://user@github.com/org/repo/` are one key
    (`origin:github.com/org/repo`). None for a remote on this machine (a path or `file://`),
    which names no repository another machine shares, or for a key longer than MAX_PROJECT_CHARS.
    URL forms: git-clone(1), "GIT URLS"."""
    from urllib.parse import urlsplit

    text = url.strip()
    if "://" in text:
        try:
            parts = urlsplit(text)
            host = parts.hostname
        except ValueError:
            return None
        if parts.scheme.lower() == "file" or not host:
            return None
        path = parts.path
    else:
        match = _SCP_REMOTE.match(text)
        if match is None:
            return None
        host = match["host"] or match["ipv6"]
        if not host or len(host) == 1:  # `C:/path` is a Windows path, not host C
            return None
        path = match["path"]
    path = re.sub(r"/{2,}", "/", path).strip("/")
    path = path[:-4] if path.lower().endswith(".git") else path
    path = path.rstrip("/")
    key = f"{ORIGIN_PREFIX}{host.lower()}/{path}"
    return key if path and len(key) <= MAX_PROJECT_CHARS else None  # too long: the path keys it


def _git_dir(root: Path) -> Path:
    """The git directory of the working tree `root`: `root/.git`, or where a `.git` file points
    (`gitdir: ...`: a submodule's `.git/modules/NAME`, a worktree's `.git/worktrees/NAME`), up to
    its common directory (`commondir`), which holds the config."""
    dotgit = root / ".git"
    try:
        if not dotgit.is_file():
            return dotgit
        line = dotgit.read_text(encoding="utf-8", errors="replace").strip()
        if not line.startswith("gitdir:"):
            return dotgit
        gitdir = root / line[len("gitdir:"):].strip()
        common = gitdir / "commondir"
        return gitdir / common.read_text(encoding="utf-8").strip() if common.is_file() else gitdir
    except OSError:
        return dotgit


def git_origin(root: Path) -> str | None:
    """`remote_key` of the `origin` remote of the repository whose working tree is `root` (read
    from its `.git/config`, without running git), or None: no such remote, or one on this machine."""
    import configparser

    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read(_git_dir(root) / "config", encoding="utf-8")
        url = parser.get('remote "origin"', "url", fallback=None)
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    return remote_key(url) if url else None


def repository_key(root: Path) -> str:
    """Project key of the repository whose working tree is `root`: its `origin` remote's key
    when it has one (the same on every machine and clone), else its path's."""
    return git_origin(root) or project_key(str(root))


def project_for_path(path: str, mode: str = "git-root") -> str:
    """Project key of a path someone typed (`--project-path`, `--project ./web`, `serve --project`):
    the same key `detect_project` gives from inside that folder. Symlinks are resolved and, in
    mode 'git-root', a folder inside a repository keys as the repository's root, so a symlink to
    the repository and any of its subfolders are that one project. A Windows path (on any
    system) or a path that does not exist here is keyed as written (`project_key`).

    Raises:
        InvalidInput: an empty path.
    """
    text = str(path).strip()
    if not text or _WINDOWS_DRIVE.match(text) or "\\" in text:
        return project_key(text)
    expanded = os.path.expanduser(text)
    real = Path(os.path.realpath(os.path.abspath(expanded)))
    try:
        exists = real.exists()
    except OSError:  # a name longer than the file system allows (ENAMETOOLONG): no such folder here
        exists = False
    if not exists:
        return project_key(str(real))
    if mode == "cwd":
        return project_key(str(real if real.is_dir() else real.parent))
    root = git_root(real if real.is_dir() else real.parent)
    return repository_key(root) if root else project_key(str(real))


def detect_project(cwd: Path | None = None, mode: str = "git-root") -> str | None:
    """Project key for the working directory: its repository's (mode 'git-root': `repository_key`
    of its git root; None outside a repository, meaning global) or the directory's (mode 'cwd')."""
    return detect_project_keys(cwd, mode)[0]


def detect_project_keys(cwd: Path | None = None, mode: str = "git-root") -> tuple[str | None, str | None]:
    """(`detect_project`'s key, the key memsafe used for the same folder before repositories were
    keyed by their origin remote: the root's path key, when it differs, else None)."""
    here = Path(cwd) if cwd else current_dir()
    if mode == "cwd":
        return project_key(str(here.resolve())), None
    root = git_root(here)
    if root is None:
        return None, None
    key, path_key = repository_key(root), project_key(str(root))
    return key, (path_key if path_key != key else None)
