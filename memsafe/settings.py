"""Responsibility: where things live (DB path, user config file), the config keys with their
defaults and validation, and project detection.

DB path precedence: `--db` > `MEMSAFE_DB` > `db` in the user config file (`memsafe config set db`)
> `<platformdirs user data dir>/memory.db`. `~` and relative paths are expanded once, against the
current directory, and the absolute result is what `status` shows.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from memsafe.errors import InvalidInput

APP = "memsafe"


def data_dir() -> Path:
    """User data folder (`MEMSAFE_HOME` if set, else platformdirs' user data dir)."""
    home = os.environ.get("MEMSAFE_HOME")
    if home:
        return Path(home).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir(APP, appauthor=False))


def config_file() -> Path:
    """User config file (JSON) holding machine-level settings such as `db`."""
    home = os.environ.get("MEMSAFE_HOME")
    if home:
        return Path(home).expanduser().resolve() / "settings.json"
    import platformdirs

    return Path(platformdirs.user_config_dir(APP, appauthor=False)) / "settings.json"


def default_db_path() -> Path:
    return data_dir() / "memory.db"


def expand_path(raw: str | os.PathLike) -> Path:
    """Expand `~` and make absolute against the current directory. No symlink resolution."""
    text = str(raw).strip()
    if not text:
        raise InvalidInput("empty database path")
    return Path(os.path.abspath(os.path.expanduser(text)))


def read_user_config() -> dict:
    path = config_file()
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}; fix or delete it") from None


def write_user_config(values: dict) -> Path:
    path = config_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def resolve_db_path(cli_db: str | None = None) -> tuple[Path, str]:
    """Return (absolute DB path, where it came from: 'flag' | 'env' | 'config' | 'default')."""
    if cli_db:
        return expand_path(cli_db), "--db"
    env = os.environ.get("MEMSAFE_DB")
    if env:
        return expand_path(env), "MEMSAFE_DB"
    configured = read_user_config().get("db")
    if configured:
        return expand_path(configured), f"config ({config_file()})"
    return default_db_path(), "default"


# ---------------------------------------------------------------------------------------------
# Config keys stored in the database (`memsafe config`).


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
            raise InvalidInput(f"{self.name} must be a {self.type.__name__}, got {shown}") from None
        if isinstance(value, float) and value != value:  # NaN
            raise InvalidInput(f"{self.name} must be a number, got NaN")
        if self.low is not None and value < self.low or self.high is not None and value > self.high:
            raise InvalidInput(f"{self.name} must be between {self.low:g} and {self.high:g}, got {raw}")
        if self.choices and value not in self.choices:
            raise InvalidInput(f"{self.name} must be one of {', '.join(self.choices)}, got {raw!r}")
        return value


CONFIG_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        ConfigKey("token_budget", int, 2000, "default recall budget (tokens, cl100k_base)", 1, 1_000_000),
        ConfigKey(
            "safety_multiplier", float, 0.85, "share of the budget the returned text may use", 0.1, 1.0
        ),
        ConfigKey("recall_limit", int, 10, "default maximum number of memories per recall", 1, 1000),
        ConfigKey("graph_share", float, 0.15, "share of the effective budget reserved for graph context", 0.0, 0.5),
        ConfigKey("rrf_k", float, 60.0, "reciprocal rank fusion constant (Cormack et al. 2009)", 1.0, 1000.0),
        ConfigKey("candidate_depth", int, 50, "candidates taken from each retriever", 5, 1000),
        ConfigKey("weight_lexical", float, 1.0, "weight of the BM25 ranking in fusion", 0.0, 10.0),
        ConfigKey("weight_vector", float, 1.0, "weight of the vector ranking in fusion", 0.0, 10.0),
        ConfigKey("weight_recency", float, 0.05, "weight of recency in the final score", 0.0, 10.0),
        ConfigKey("weight_access", float, 0.03, "weight of access frequency in the final score", 0.0, 10.0),
        ConfigKey("weight_graph", float, 0.03, "weight of graph connectivity in the final score", 0.0, 10.0),
        ConfigKey("weight_confidence", float, 0.05, "weight of confidence in the final score", 0.0, 10.0),
        ConfigKey("weight_decay", float, 0.05, "penalty per decay level in the final score", 0.0, 10.0),
        ConfigKey("recency_half_life_days", float, 30.0, "half-life of the recency signal (days)", 0.1, 36500.0),
        ConfigKey(
            "project_mode",
            str,
            "git-root",
            "how the current project is found: git-root (repository root of the cwd) or cwd",
            choices=("git-root", "cwd"),
        ),
    ]
}


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


def detect_project(cwd: Path | None = None, mode: str = "git-root") -> str | None:
    """Project key for the working directory: its git root (mode 'git-root'; None outside a
    repository, meaning global) or the directory itself (mode 'cwd')."""
    here = Path(cwd or os.getcwd())
    if mode == "cwd":
        return project_key(str(here.resolve()))
    root = git_root(here)
    return project_key(str(root)) if root else None
