"""Responsibility: where things live (DB path, user config file), how a config key is parsed and
checked (`ConfigKey`), and project detection.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from memsafe.errors import InvalidInput, Refused

APP = "memsafe"

# Every environment variable a user may set, with what it does: the one table that docs/usage.md's
# "Environment" and the man pages' ENVIRONMENT are made from (scripts/gen_docs.py), and that
# tests/test_docs.py checks against every `MEMSAFE_*` name the code reads.
VARIABLES: tuple[tuple[str, str], ...] = (
    ("MEMSAFE_DB", "the database file or postgresql:// URL (after --db, before `config set db`)"),
    ("MEMSAFE_HOME", "folder for the default database, the settings file and hook.log (tests use it)"),
    ("MEMSAFE_NOW", "fix the clock (ISO-8601), for tests, benchmarks and reproducible decay runs"),
    ("MEMSAFE_DATE_ORDER", "the order of day and month in numeric dates (12/03) a query or flag names: DMY, "
                           "MDY or YMD (default: the locale's, LC_TIME; with none a query reads both days)"),
    ("MEMSAFE_MODEL_DIR", "a folder with model.onnx and tokenizer.json: another compatible embedding model"),
    ("MEMSAFE_EMBED_MODEL", "the embedding model by name (minilm, minilm-l3, e5-small; default: the one the store "
                            "records, else minilm); a store whose vectors another model made answers by keywords "
                            "until `memsafe embed --model NAME`"),
    ("MEMSAFE_NO_VEC", "run without vector search (troubleshooting); recall uses keywords only"),
    ("MEMSAFE_NO_MODEL", "run without the embedding model (troubleshooting); recall uses keywords only"),
    ("MEMSAFE_EMBED_THREADS", "threads the embedding model uses (default: min(4, the cores this process may use))"),
    ("MEMSAFE_CACHE_DIR", "cache folder (optimised model graph, token ranks and counts, secret-scan gates, "
                          "--help and TAB answers; default: the user cache folder)"),
    ("MEMSAFE_BACKGROUND_EMBED", "0: `remember` leaves vectors pending instead of starting a background embedder"),
    ("MEMSAFE_SERVE_WARM", "0: `memsafe serve` loads no model in the background (vectors wait for a recall)"),
    ("MEMSAFE_WORKSPACE", "the client's workspace folder (Cursor: `${workspaceFolder}`): `serve` detects the "
                          "project from it, not from the folder it was started in"),
    ("MEMSAFE_MODEL_CACHE", "0: no cached optimised model graph"),
    ("MEMSAFE_CLI_CACHE", "0: no cached --help and TAB answers"),
    ("MEMSAFE_TOKEN_CACHE", "0: no cached token counts"),
    ("MEMSAFE_CLI_FAST", "0: recall, remember and import always go through the full command-line app"),
    ("MEMSAFE_DEBUG", "show tracebacks for user errors"),
    ("MEMSAFE_KEY", "the key of an encrypted store (docs/encryption.md)"),
    ("MEMSAFE_KEY_FILE", "a file holding the key of an encrypted store"),
    ("MEMSAFE_NEW_KEY", "the new key for `memsafe rekey` when the key comes from MEMSAFE_KEY"),
    ("MEMSAFE_ALLOW_INSECURE_KEYRING", "1: accept a keyring backend that keeps keys in a plain file"),
    ("MEMSAFE_LOG_LEVEL", "log detail of `memsafe serve` on stderr (DEBUG, INFO, WARNING)"),
    ("MEMSAFE_HTTP_TOKENS_FILE", "the tokens (`name token` lines) of `memsafe serve --transport http` (docs/team.md)"),
)
# Names memsafe sets for its own child processes and scripts, never read from a user's shell.
INTERNAL_VARIABLES = ("_MEMSAFE_COMPLETE", "MEMSAFE_CHAINED", "MEMSAFE_EOF")


def env_path(name: str) -> Path | None:
    """The path an environment variable names (`expand_path`, symlinks not resolved), or None
    when it is unset or empty.

    Raises:
        InvalidInput: the value holds a variable or placeholder that cannot be expanded.
    """
    value = os.environ.get(name, "").strip()
    return expand_path(value, what=name) if value else None


# Path settings every command may read (the store's folder, caches, the model, keys, HTTP tokens).
# `MEMSAFE_DB` is checked where it is read (`resolve_db_path`): `--db` overrides it.
PATH_SETTINGS = ("MEMSAFE_HOME", "MEMSAFE_CACHE_DIR", "MEMSAFE_MODEL_DIR", "MEMSAFE_KEY_FILE",
                 "MEMSAFE_HTTP_TOKENS_FILE")


def check_path_settings(environ: dict | None = None) -> None:
    """Refuse, before a command starts, a path setting of PATH_SETTINGS holding a variable or
    placeholder that cannot be expanded (`expand_vars`): read deep inside a command (a cache
    folder, the model's loader thread), it would otherwise fail there, or not at all.

    Raises:
        InvalidInput: the first such setting, named with its value.
    """
    env = os.environ if environ is None else environ
    for name in PATH_SETTINGS:
        value = env.get(name, "").strip()
        if value:
            expand_vars(value, name)


def data_dir() -> Path:
    """User data folder (`MEMSAFE_HOME` if set, else platformdirs' user data dir).

    Raises:
        InvalidInput: `MEMSAFE_HOME` cannot be expanded (`expand_path`).
    """
    home = env_path("MEMSAFE_HOME")
    if home:
        return home.resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir(APP, appauthor=False))


def cache_dir() -> Path:
    """Folder for caches memsafe can rebuild at any time (the optimised model graph):
    `MEMSAFE_CACHE_DIR` if set, else platformdirs' user cache dir. Not under `MEMSAFE_HOME`: a
    cache of the installed model is the same for every store and test home.

    Raises:
        InvalidInput: `MEMSAFE_CACHE_DIR` cannot be expanded (`expand_path`).
    """
    folder = env_path("MEMSAFE_CACHE_DIR")
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
        InvalidInput: `MEMSAFE_HOME` cannot be expanded (`expand_path`).
    """
    home = env_path("MEMSAFE_HOME")
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
    env = os.environ.get("MEMSAFE_DB")
    if env:
        return db_target(env, what="database path (MEMSAFE_DB)"), "MEMSAFE_DB"
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
