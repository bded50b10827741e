"""Responsibility: encryption at rest for the SQLite store: where the key comes from, how a
connection is keyed, and converting a store between plain and encrypted all-or-nothing.

Part of the storage layer (SQLite only). The cipher is SQLite3 Multiple Ciphers' default,
ChaCha20-Poly1305 (every page encrypted and authenticated; a wrong key cannot read anything),
provided by the `apsw-sqlite3mc` distribution, which memsafe uses as its `apsw` module.

Keys, in order of precedence (never from a command-line argument, never logged or printed):
1. `MEMSAFE_KEY`: the key itself (for scripts);
2. `MEMSAFE_KEY_FILE`: a file holding the key (first line; made 0600 when memsafe writes it);
3. the OS keyring (the `keyring` library), service "memsafe", user = the store file's absolute
   path with symbolic links resolved (the path as given is also looked up, for entries saved
   under it). memsafe saves a key only in a backend that keeps it out of plain files (`Keyring`):
   not keyrings.alt's file backends, nor any backend `keyring` itself does not recommend
   (priority < 1), unless MEMSAFE_ALLOW_INSECURE_KEYRING=1; it reads a key from any backend.

A store reached through a symbolic link is converted where its file is (`store_file`): renaming
a new file over the link would leave the old file, whole, at the link's target.

A key memsafe generates is `msk1-` + 64 hex digits (256 random bits). Such a key needs no
password stretching, so it is applied with one KDF iteration (opening costs < 1 ms); any other
key is a passphrase and gets SQLite3MC's default PBKDF2-SHA256 stretching (about 150 ms).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import apsw

from memsafe import settings
from memsafe.errors import StoreUnavailable
from memsafe.store.common.sql import scalar

if TYPE_CHECKING:  # `keyring` is an optional dependency (the `encryption` extra)
    from keyring.backend import KeyringBackend

KEY_ENV = "MEMSAFE_KEY"
KEY_FILE_ENV = "MEMSAFE_KEY_FILE"
INSECURE_KEYRING_ENV = "MEMSAFE_ALLOW_INSECURE_KEYRING"
KEYRING_SERVICE = "memsafe"
CIPHER = "chacha20"
_SQLITE_HEADER = b"SQLite format 3\x00"
_GENERATED = re.compile(r"msk1-[0-9a-f]{64}")


class KeyUnavailable(StoreUnavailable):
    """No usable key: none configured, or its source cannot be read. The message says where a key is expected."""


class InsecureKeyring(KeyUnavailable):
    """The keyring backend here would keep a new key in a plain file (or is not recommended), and
    the user has not opted in with INSECURE_KEYRING_ENV."""


@dataclass(frozen=True)
class Key:
    """A store key and where it came from (`source` is safe to show; `secret` never is).

    `keyring_user` is the keyring entry's user name when the key came from a keyring;
    `weakness` says why where it lives is unsafe (a keyring backend memsafe would not have
    saved it in, `Keyring.weakness`), None when it is not known to be."""

    secret: str = field(repr=False)
    source: str
    keyring_user: str | None = None
    weakness: str | None = None

    @property
    def generated(self) -> bool:
        """True for a key memsafe generated (256 random bits): applied without password stretching."""
        return _GENERATED.fullmatch(self.secret) is not None

    @property
    def variable(self) -> str | None:
        """The environment variable that set this key, if any."""
        if self.source.startswith(KEY_FILE_ENV):
            return KEY_FILE_ENV
        return KEY_ENV if self.source == KEY_ENV else None


def unavailable_reason() -> str | None:
    """None when this `apsw` can encrypt; else why not and what to run."""
    if hasattr(apsw, "mc_version"):
        return None
    return (
        "this memsafe's apsw module has no encryption (the plain `apsw` distribution replaced "
        "`apsw-sqlite3mc`); run: pip install --force-reinstall apsw-sqlite3mc"
    )


def cipher_name() -> str:
    """The cipher new encrypted stores use, with the library version (for status and doctor)."""
    return f"{CIPHER} (ChaCha20-Poly1305, {getattr(apsw, 'mc_version', 'SQLite3 Multiple Ciphers')})"


def is_encrypted(path: Path) -> bool:
    """True when `path` is a non-empty file that does not start with SQLite's plain header.

    An encrypted page 1 is indistinguishable from random bytes, so a file that is neither
    SQLite nor encrypted also answers True; opening it with a key then says which."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return False
    except OSError:
        return False
    return len(head) > 0 and head != _SQLITE_HEADER


def new_key() -> str:
    """A fresh generated key: `msk1-` + 64 hex digits from `secrets` (256 bits)."""
    import secrets  # here: every store opens through this module, and `secrets` costs a recall ~3 ms to import

    return "msk1-" + secrets.token_hex(32)


def _lines(text: str, where: str) -> list[str]:
    """The keys in a key file or keyring entry: one a line, the current first. Two lines appear
    only while `rekey` runs (new, then old), so a kill -9 at any instant leaves a key that opens."""
    keys = [line.strip("\r") for line in text.split("\n") if line.strip()]
    if not keys:
        raise KeyUnavailable(f"the key in {where} is empty")
    if any("\x00" in k for k in keys):
        raise KeyUnavailable(f"the key in {where} contains a NUL character")
    return keys


def key_file() -> Path | None:
    """The path named by MEMSAFE_KEY_FILE (`settings.expand_path`), or None.

    Raises:
        InvalidInput: it holds a variable or placeholder that cannot be expanded.
    """
    from memsafe import settings

    return settings.env_path(KEY_FILE_ENV)


def explicit_keys() -> list[Key]:
    """The keys set in the environment: `MEMSAFE_KEY`, else the lines of `MEMSAFE_KEY_FILE`.

    Raises:
        KeyUnavailable: `MEMSAFE_KEY_FILE` names a file that cannot be read, or a key is empty.
    """
    value = settings.env().key
    if value:
        return [Key(k, KEY_ENV) for k in _lines(value, KEY_ENV)[:1]]
    path = key_file()
    if path is None:
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        hint = "; `memsafe encrypt` writes a new key there" if isinstance(exc, FileNotFoundError) else ""
        raise KeyUnavailable(f"cannot read the key file {path} ({KEY_FILE_ENV}): {reason}{hint}") from None
    where = f"{KEY_FILE_ENV} ({path})"
    return [Key(k, where) for k in _lines(text, where)]


def write_key_file(path: Path, text: str) -> None:
    """Write a key file atomically (a temporary file renamed over it), mode 0600, folder 0700.

    A key file reached through a symbolic link is written where the link points: renaming over
    the link would leave the old key at its target."""
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


@dataclass(frozen=True)
class Keyring:
    """One keyring backend (`keyring.backend.KeyringBackend`) as memsafe judges it.

    `file` is the file a file-backed backend (keyrings.alt) keeps its entries in; `weakness`
    says why memsafe does not save keys there unless INSECURE_KEYRING_ENV is set (None: a
    backend that keeps them out of plain files: macOS Keychain, Windows Credential Locker,
    Secret Service, KWallet)."""

    backend: KeyringBackend = field(repr=False)
    name: str
    file: Path | None
    weakness: str | None

    @property
    def where(self) -> str:
        """Where a key kept here lives, fit to show (never the key)."""
        if self.weakness is None:
            return f"the OS keyring ({self.name})"
        if self.file is not None:
            return f"the keyring file {self.file} ({self.name})"
        return f"the keyring backend {self.name}"


def _judge(backend) -> Keyring:
    """`backend` as a `Keyring`: its name, its file if it keeps one, and its weakness if any.

    Insecure: keyrings.alt's PlaintextKeyring (the key base64 in a file), its EncryptedKeyring
    (a file whose password is asked on a terminal, which hooks, cron and `memsafe serve` do not
    have), any other file backend, and any backend with priority < 1, which `keyring` itself
    does not recommend (`keyring.core.recommended`; its docs: "a priority of one or greater is
    recommended")."""
    cls = type(backend)
    file = getattr(backend, "file_path", None)
    if file is not None:
        scheme = str(getattr(backend, "scheme", ""))
        if cls.__name__ == "PlaintextKeyring" or "no enc" in scheme:
            weakness = "a plain file, the key only base64-encoded: anyone who can read the file has the key"
        elif cls.__name__ == "EncryptedKeyring":
            weakness = ("a file encrypted with a password typed at a terminal, which git hooks, cron and "
                        "`memsafe serve` do not have")
        else:
            weakness = "a file"
        return Keyring(backend, f"{cls.__module__}.{cls.__qualname__}", Path(file), weakness)
    try:
        priority = float(backend.priority)
    except Exception:  # a backend whose viability check fails now
        priority = 0.0
    name = str(getattr(backend, "name", cls.__name__))
    if priority < 1:
        return Keyring(backend, f"{cls.__module__}.{cls.__qualname__}", None,
                       f"not recommended by `keyring` (priority {priority:g})")
    return Keyring(backend, name, None, None)


def keyrings() -> list[Keyring]:
    """The keyring backends `keyring` would use, in its order (a chain's members, best first);
    [] when `keyring` is not installed or has no backend that can hold a key (its `fail` and
    `null` backends keep nothing: a key saved there would be lost)."""
    try:
        import keyring
        from keyring.backends import chainer, fail, null
    except ImportError:
        return []
    try:
        backend = keyring.get_keyring()
        members = list(backend.backends) if isinstance(backend, chainer.ChainerBackend) else [backend]
    except Exception:  # a broken backend configuration: treat as none
        return []
    return [_judge(b) for b in members if not isinstance(b, (fail.Keyring, null.Keyring))]


def insecure_keyring_allowed() -> bool:
    """True when the user opted in to keys in an insecure keyring backend (INSECURE_KEYRING_ENV=1)."""
    return settings.env().allow_insecure_keyring


def keyring_user(path: Path) -> str:
    """The keyring entry's user name for the store at `path`: its file's absolute path, links resolved."""
    return os.path.realpath(path)


def _users(path: Path) -> list[str]:
    """The user names a key for `path` may be saved under: `keyring_user`, then the path as given."""
    given = os.path.abspath(path)
    return list(dict.fromkeys([keyring_user(path), given]))


def keyring_keys(path: Path) -> list[Key]:
    """The keys saved in a keyring for the store at `path` (current first), or []: the first
    backend holding an entry under one of `_users(path)`. `Key.source` names that backend."""
    for kr in keyrings():
        for user in _users(path):
            try:
                text = kr.backend.get_password(KEYRING_SERVICE, user)
            except Exception:  # a locked or failing keyring: no key from it
                continue
            if text:
                where = kr.where
                return [Key(k, where, keyring_user=user, weakness=kr.weakness) for k in _lines(text, where)]
    return []


def keyring_for_new_key() -> Keyring:
    """The keyring backend a new key is saved in: the first `keyring` would use.

    Raises:
        KeyUnavailable: there is none; InsecureKeyring: it is insecure (`Keyring.weakness`) and the
            user has not opted in (INSECURE_KEYRING_ENV). The message says what to do instead.
    """
    found = keyrings()
    if not found:
        raise KeyUnavailable(
            f"no OS keyring is available here; set {KEY_FILE_ENV} to a file path "
            "(memsafe writes a new key there, mode 0600) and run the command again. Nothing was changed"
        )
    kr = found[0]
    if kr.weakness is not None and not insecure_keyring_allowed():
        raise InsecureKeyring(
            f"the keyring here is {kr.name}, {kr.weakness}" + (f" ({kr.file})" if kr.file else "")
            + f"; memsafe does not keep a key there. Set {KEY_FILE_ENV} to a file path (memsafe writes a new "
            f"key there, mode 0600), or set {INSECURE_KEYRING_ENV}=1 to use that keyring anyway. Nothing was changed"
        )
    return kr


def save_in_keyring(kr: Keyring, path: Path, text: str) -> Key:
    """Save the key entry `text` for the store at `path` in `kr` (replacing any), and read it
    back: a backend that does not keep what it is given must not be trusted with a store's only key.

    Returns:
        the entry's current key, with the source and user name it now has.

    Raises:
        KeyUnavailable: the backend failed or did not keep the entry (nothing was changed).
    """
    user = keyring_user(path)
    try:
        kr.backend.set_password(KEYRING_SERVICE, user, text)
        kept = kr.backend.get_password(KEYRING_SERVICE, user)
    except Exception as exc:
        raise KeyUnavailable(f"cannot save the key in {kr.where}: {exc}. Nothing was changed") from None
    if kept != text:
        raise KeyUnavailable(f"{kr.where} did not keep the key saved in it. Nothing was changed")
    return Key(_lines(text, kr.where)[0], kr.where, keyring_user=user, weakness=kr.weakness)


def forget_keyring_key(path: Path, *, keep: Keyring | None = None) -> bool:
    """Remove the keyring entries for the store at `path` (under each of `_users(path)`, in every
    backend), except the one `save_in_keyring` makes in `keep`; True if one was removed."""
    removed = False
    for kr in keyrings():
        for user in _users(path):
            if keep is not None and type(kr.backend) is type(keep.backend) and user == keyring_user(path):
                continue
            try:
                if kr.backend.get_password(KEYRING_SERVICE, user) is None:
                    continue
                kr.backend.delete_password(KEYRING_SERVICE, user)
                removed = True
            except Exception:
                continue
    return removed


def find_keys(path: Path) -> list[Key]:
    """The keys to try for the store at `path`: the environment's, else the OS keyring's."""
    return explicit_keys() or keyring_keys(path)


def no_key_message(path: Path) -> str:
    """One line saying that `path` needs a key and where memsafe looks for it."""
    return (
        f"cannot open {path}: it is encrypted (or not a SQLite file) and no key was found; "
        f"memsafe reads the key from {KEY_ENV}, from the file named by {KEY_FILE_ENV}, "
        f"or from the OS keyring (service '{KEYRING_SERVICE}', user '{keyring_user(path)}')"
    )


def store_file(path: Path) -> Path:
    """The file the store path `path` names, with every symbolic link resolved (a chain, a link
    to a link, a link into another folder): what a conversion must replace.

    Raises:
        StoreUnavailable: `path` is a link to nothing (dangling), or a loop of links.
    """
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:
        if os.path.islink(path):
            raise StoreUnavailable(
                f"{path} is a symbolic link to {os.path.realpath(path)}, which does not exist; "
                "point it (or --db) at the store"
            ) from None
        raise StoreUnavailable(f"no store at {path}") from None
    except OSError as exc:  # ELOOP
        raise StoreUnavailable(f"cannot follow {path}: {exc.strerror or exc}") from None


def apply(conn: apsw.Connection, key: Key) -> None:
    """Key an open connection before its first read (SQLite3MC `PRAGMA key`).

    Raises:
        StoreUnavailable: this apsw has no encryption (see `unavailable_reason`).
    """
    reason = unavailable_reason()
    if reason:
        raise StoreUnavailable(reason)
    conn.pragma("cipher", CIPHER)
    if key.generated:
        conn.pragma("kdf_iter", 1)
    conn.pragma("hexkey", key.secret.encode("utf-8").hex())


def _target_uri(path: Path, key: Key) -> str:
    """A URI that makes VACUUM INTO write an encrypted file (the key as hex: URI-safe)."""
    params = f"cipher={CIPHER}" + ("&kdf_iter=1" if key.generated else "")
    quoted = str(path).replace("%", "%25").replace("?", "%3f").replace("#", "%23").replace("'", "''")
    return f"file:{quoted}?{params}&hexkey={key.secret.encode('utf-8').hex()}"


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def convert(path: Path, *, old: Key | None, new: Key | None) -> int:
    """Rewrite the store at `path` with key `new` (None = plain), all-or-nothing.

    The new file is written beside the old one (`<db>.convert-tmp`, never holding plain text
    when `new` is a key), checked (integrity_check, same row counts) and fsynced, then renamed
    over the old file (atomic on POSIX). Until that rename the old file is untouched and is the
    backup: a kill -9 at any instant leaves either the old or the new file, each complete.
    The store must not be open elsewhere (a running `memsafe serve`): that is checked first.
    A `path` that is a symbolic link is followed (`store_file`): the file it points to is the one
    replaced, the copy written beside it, and the link is left as it was. A file with other
    hard links is refused: renaming over one name would leave the old content under the others.

    Returns:
        the number of memories in the converted store.

    Raises:
        StoreUnavailable: the store is in use by another process, is a dangling link or has other
            hard links, or the copy failed its check (the old file is unchanged then).
    """
    reason = unavailable_reason()
    if reason:
        raise StoreUnavailable(reason)
    given, path = path, store_file(path)
    links = os.stat(path).st_nlink
    if links > 1:
        shown = f"{given} (the file {path})" if path != Path(os.path.abspath(given)) else f"{path}"
        raise StoreUnavailable(
            f"{shown} has {links - 1} other hard link{'s' if links > 2 else ''}, which would keep the "
            "old content after the conversion; remove the other names (`find / -samefile` finds them) "
            "and try again. Nothing was changed"
        )
    tmp = path.with_name(path.name + ".convert-tmp")
    for leftover in (tmp, Path(f"{tmp}-journal"), Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        _remove(leftover)  # from a conversion killed before its rename
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_URI
    lock = apsw.Connection(str(path), flags=flags)
    try:
        if old is not None:
            apply(lock, old)
        lock.pragma("temp_store", "memory")  # no temporary file, plain or not (the build's default too)
        lock.setbusytimeout(2000)
        try:
            # Leaving WAL needs every other connection closed: this proves no server is using the
            # file, and removes the WAL so the renamed new file cannot meet the old one's log.
            mode = lock.pragma("journal_mode", "delete")
        except apsw.NotADBError:
            raise StoreUnavailable(f"cannot open {path}: wrong key or not a memsafe store") from None
        except apsw.BusyError:
            mode = None
        if str(mode).lower() != "delete":
            raise StoreUnavailable(
                f"{path} is in use by another process (a running `memsafe serve` or `memsafe ui`?); "
                "stop it and try again. Nothing was changed"
            )
        count = scalar(lock.execute("SELECT count(*) FROM memories"))
        lock.execute("BEGIN IMMEDIATE")  # no writer may change the file until the rename
        try:
            reader = apsw.Connection(str(path), flags=flags)
            try:
                if old is not None:
                    apply(reader, old)
                reader.pragma("temp_store", "memory")
                if new is not None:
                    reader.execute(f"VACUUM INTO '{_target_uri(tmp, new)}'")
                else:
                    reader.execute("VACUUM INTO ?", (str(tmp),))  # keyed like the source: unkeyed below
            finally:
                reader.close()
            check = apsw.Connection(str(tmp), flags=flags)
            try:
                if new is not None:
                    apply(check, new)
                elif old is not None:
                    apply(check, old)
                    check.pragma("rekey", "")  # the copy is decrypted in place (a rollback journal)
                    check.close()
                    check = apsw.Connection(str(tmp), flags=flags)
                result = scalar(check.execute("PRAGMA integrity_check"))
                copied = scalar(check.execute("SELECT count(*) FROM memories"))
            finally:
                check.close()
            if result != "ok" or copied != count:
                raise StoreUnavailable(
                    f"the converted copy of {path} failed its check ({result}, {copied} of {count} memories); "
                    "the store is unchanged"
                )
            os.chmod(tmp, 0o600)
            _fsync(tmp)
            os.replace(tmp, path)
            _fsync(path.parent)
        finally:
            if lock.in_transaction:
                lock.execute("ROLLBACK")
    except BaseException:
        for leftover in (tmp, Path(f"{tmp}-journal")):
            _remove(leftover)
        raise
    finally:
        lock.close()
    return count


def working_key(path: Path, keys: list[Key]) -> Key:
    """The first of `keys` that opens the encrypted file at `path`.

    Raises:
        KeyUnavailable: no keys; StoreUnavailable: none of them opens it.
    """
    if not keys:
        raise KeyUnavailable(no_key_message(path))
    for key in keys:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            apply(conn, key)
            conn.execute("PRAGMA user_version").fetchone()
            return key
        except apsw.NotADBError:
            continue
        finally:
            conn.close()
    raise StoreUnavailable(f"cannot open {path}: wrong key or not a memsafe store (key from {keys[0].source})")


def backups_of(path: Path) -> list[Path]:
    """The migration backups memsafe wrote beside the store (`<db>.bak-vN[.M]`): beside its file
    (links resolved), and beside the path as given, where a memsafe that did not follow links
    wrote them."""
    import glob

    found: set[Path] = set()
    for base in {Path(os.path.realpath(path)), Path(os.path.abspath(path))}:
        found.update(p for p in base.parent.glob(glob.escape(base.name) + ".bak-v*")
                     if p.is_file() and not p.name.endswith("-journal"))
    return sorted(found)
