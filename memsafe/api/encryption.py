"""Responsibility: the encryption handlers: `encrypt`, `decrypt` and `rekey` a SQLite store in
place, all-or-nothing (see `memsafe.store.sqlite.encryption` for keys, cipher and the conversion).

Unlike the other handlers these take the store's path, not an open `Store`: a store is
converted while nothing has it open.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from memsafe import settings
from memsafe.errors import NotFound, Refused
from memsafe.store.sqlite import encryption

__all__ = ["EncryptionReport", "encrypt", "decrypt", "rekey", "NEW_KEY_ENV"]

NEW_KEY_ENV = "MEMSAFE_NEW_KEY"


@dataclass
class EncryptionReport:
    """What a conversion did. `key_location` says where the key now lives (never the key);
    `warnings` say what is unsafe about it (a key in a plain keyring file the user allowed)."""

    path: Path
    action: str  # encrypt | decrypt | rekey
    memories: int
    cipher: str | None
    key_location: str | None
    backups: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _weak(kr: encryption.Keyring) -> list[str]:
    """The warning for a key saved in `kr` when it is an insecure backend (allowed by the user)."""
    if kr.weakness is None:
        return []
    return [f"the key is in {kr.where}, {kr.weakness} ({encryption.INSECURE_KEYRING_ENV} allowed it); "
            f"a key file ({encryption.KEY_FILE_ENV}) outside the store's folder or a secure OS keyring is safer"]


def _existing(db: str | None) -> tuple[Path, list[str]]:
    """The store path `db` names (a SQLite file that exists) and notes for the report: where a
    symbolic link led (`encryption.store_file`: the file is what is converted, the link stays).

    Raises:
        Refused: a PostgreSQL store; NotFound: no store there; StoreUnavailable: a dangling
            link or a loop of links.
    """
    path, _origin = settings.resolve_db_path(db)
    if isinstance(path, str):
        raise Refused("encryption is for SQLite stores only; a PostgreSQL store is protected by its server "
                           "(disk encryption, TLS, roles: docs/team.md)")
    if os.path.islink(path) or path.is_file():
        real = encryption.store_file(path)  # a dangling link or a loop: one line
    else:
        real = path
    if not real.is_file():
        raise NotFound(
            f"no store at {path}; to start an encrypted store, set {encryption.KEY_FILE_ENV} "
            "(or MEMSAFE_KEY) and any memsafe command creates it encrypted"
        )
    notes = [] if real == path else [f"{path} is a symbolic link: converted the file it points to, {real}"]
    return path, notes


def _convert_backups(path: Path, old: encryption.Key | None, new: encryption.Key | None) -> list[Path]:
    """Convert the migration backups beside the store like the store itself (no plain copy stays)."""
    done = []
    for backup in encryption.backups_of(path):
        if encryption.is_encrypted(backup) == (new is not None):
            continue  # already in the target form
        try:
            source = encryption.working_key(backup, [old]) if old is not None else None
        except encryption.StoreUnavailable:
            continue  # encrypted with another key: leave it as it is
        encryption.convert(backup, old=source, new=new)
        done.append(backup)
    return done


def encrypt(db: str | None = None) -> EncryptionReport:
    """Encrypt a plain store in place, with its migration backups.

    The key is MEMSAFE_KEY, else the file MEMSAFE_KEY_FILE (a new key is generated into it when
    the file does not exist yet), else a new key saved in the OS keyring, when its backend keeps
    keys out of plain files (`encryption.keyring_for_new_key`; MEMSAFE_ALLOW_INSECURE_KEYRING=1
    allows any). `key_location` names where the key is, the keyring backend and its file included.

    Raises:
        NotFound: no store at the path; Refused: already encrypted;
        KeyUnavailable: nowhere safe to keep a new key; StoreUnavailable: in use, a dangling link,
            or the copy failed.
    """
    path, notes = _existing(db)
    if encryption.is_encrypted(path):
        raise Refused(f"{path} is already encrypted; `memsafe rekey` changes its key")
    file = encryption.key_file()
    undo: Callable[[], object] | None
    undo, warnings = None, []
    if settings.env().key or (file is not None and file.exists()):
        key = encryption.explicit_keys()[0]
        location = key.source
    elif file is not None:
        key = encryption.Key(encryption.new_key(), f"{encryption.KEY_FILE_ENV} ({file})")
        encryption.write_key_file(file, key.secret + "\n")
        location, undo = f"a new key in {file} (mode 0600)", lambda: file.unlink(missing_ok=True)
    else:
        keyring = encryption.keyring_for_new_key()
        key = encryption.save_in_keyring(keyring, path, encryption.new_key())
        location = (f"a new key in {key.source}, service '{encryption.KEYRING_SERVICE}', "
                    f"user '{key.keyring_user}'")
        warnings = _weak(keyring)
        undo = lambda: encryption.forget_keyring_key(path)  # noqa: E731
    try:
        count = encryption.convert(path, old=None, new=key)
    except BaseException:
        if undo is not None:
            undo()
        raise
    backups = _convert_backups(path, None, key)
    return EncryptionReport(path, "encrypt", count, encryption.cipher_name(), location, backups, notes, warnings)


def decrypt(db: str | None = None) -> EncryptionReport:
    """Decrypt an encrypted store in place (with its migration backups); a keyring entry is removed.

    Raises:
        NotFound; Refused: not encrypted; KeyUnavailable / StoreUnavailable: no or wrong key, in use.
    """
    path, notes = _existing(db)
    if not encryption.is_encrypted(path):
        raise Refused(f"{path} is not encrypted")
    key = encryption.working_key(path, encryption.find_keys(path))
    count = encryption.convert(path, old=key, new=None)
    backups = _convert_backups(path, key, None)
    if key.keyring_user is not None:
        encryption.forget_keyring_key(path)
    elif key.variable:
        notes.append(f"unset {key.variable}: memsafe refuses to open a plain store while a key is set")
    return EncryptionReport(path, "decrypt", count, None, None, backups, notes)


def rekey(db: str | None = None) -> EncryptionReport:
    """Re-encrypt a store with a new key, where the old one lived (the key file or the keyring:
    a new key is generated; MEMSAFE_KEY: the new key is MEMSAFE_NEW_KEY). A new key goes to a
    keyring backend only when `encryption.keyring_for_new_key` allows it.

    Crash safety: the key file or keyring entry first holds the new and the old key (both are
    tried on open), then the store is converted, then the old key is dropped.

    Raises:
        NotFound; Refused: not encrypted, or MEMSAFE_KEY without MEMSAFE_NEW_KEY;
        KeyUnavailable / StoreUnavailable.
    """
    path, notes = _existing(db)
    if not encryption.is_encrypted(path):
        raise Refused(f"{path} is not encrypted; `memsafe encrypt` encrypts it")
    old = encryption.working_key(path, encryption.find_keys(path))
    warnings: list[str] = []
    if old.variable == encryption.KEY_ENV:
        secret = settings.env().new_key or ""
        if not secret.strip():
            raise Refused(
                f"the key comes from {encryption.KEY_ENV}: set {NEW_KEY_ENV} to the new key "
                "(memsafe never takes a key as an argument)"
            )
        new = encryption.Key(secret.strip("\r\n"), NEW_KEY_ENV)
        if new.secret == old.secret:
            raise Refused(f"{NEW_KEY_ENV} is the same as {encryption.KEY_ENV}")
        stage: Callable[[], object]
        finish: Callable[[], object]
        restore: Callable[[], object]
        stage = finish = restore = lambda: None  # noqa: E731
        location = f"{NEW_KEY_ENV}: set {encryption.KEY_ENV} to it from now on"
    elif old.variable == encryption.KEY_FILE_ENV:
        file = encryption.key_file()
        assert file is not None  # the old key came from it
        new = encryption.Key(encryption.new_key(), old.source)
        stage = lambda: encryption.write_key_file(file, f"{new.secret}\n{old.secret}\n")  # noqa: E731
        finish = lambda: encryption.write_key_file(file, new.secret + "\n")  # noqa: E731
        restore = lambda: encryption.write_key_file(file, old.secret + "\n")  # noqa: E731
        location = f"a new key in {file}"
    else:
        try:
            keyring = encryption.keyring_for_new_key()
        except encryption.InsecureKeyring:
            raise encryption.InsecureKeyring(
                f"the key is in {old.source}, where memsafe does not put a new key; set "
                f"{encryption.INSECURE_KEYRING_ENV}=1 to rekey it there anyway, or move it to a key file: "
                f"`memsafe decrypt`, then `memsafe encrypt` with {encryption.KEY_FILE_ENV} set. Nothing was changed"
            ) from None
        new = encryption.Key(encryption.new_key(), keyring.where)
        stage = lambda: encryption.save_in_keyring(keyring, path, f"{new.secret}\n{old.secret}")  # noqa: E731
        restore = lambda: encryption.save_in_keyring(keyring, path, old.secret)  # noqa: E731

        def finish():  # the new key alone, and no entry left elsewhere (another backend, the link's path)
            encryption.save_in_keyring(keyring, path, new.secret)
            encryption.forget_keyring_key(path, keep=keyring)

        location = f"a new key in {keyring.where}"
        warnings = _weak(keyring)
    stage()
    try:
        count = encryption.convert(path, old=old, new=new)
    except BaseException:
        restore()
        raise
    backups = _convert_backups(path, old, new)
    finish()
    return EncryptionReport(path, "rekey", count, encryption.cipher_name(), location, backups, notes, warnings)
