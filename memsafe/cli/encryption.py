"""Responsibility: `memsafe encrypt`, `memsafe decrypt` and `memsafe rekey`: convert the store
in place (keys come from MEMSAFE_KEY, MEMSAFE_KEY_FILE or the OS keyring, never from arguments)."""

from __future__ import annotations

from dataclasses import asdict

import typer

from memsafe import api, render
from memsafe.cli._common import JsonOpt, _emit_json, _errors, app, out, say

_DONE = {"encrypt": "Encrypted", "decrypt": "Decrypted", "rekey": "Re-keyed"}


def _show(report: api.EncryptionReport, json_: bool) -> None:
    if json_:
        _emit_json({**asdict(report), "encrypted": report.action != "decrypt"})
        return
    line = f"{_DONE[report.action]} {report.path}: {render.count_of(report.memories, 'memory')}"
    if report.cipher:
        line += f", cipher {report.cipher}"
    out().print(line, markup=False, highlight=False, soft_wrap=True)
    if report.key_location:
        out().print(f"Key: {report.key_location}", markup=False, highlight=False, soft_wrap=True)
    for backup in report.backups:
        out().print(f"Also converted the migration backup {backup}", markup=False, highlight=False, soft_wrap=True)
    for note in report.notes:
        say("Note", note)
    for warning in report.warnings:
        say("Warning", warning)


def _db(ctx: typer.Context) -> str | None:
    return ctx.obj.db if ctx.obj else None


@app.command()
def encrypt(ctx: typer.Context, json_: JsonOpt = False) -> None:
    """Encrypt the store in place (ChaCha20-Poly1305, SQLite3 Multiple Ciphers).

    The key comes from MEMSAFE_KEY, else from the file MEMSAFE_KEY_FILE (a new key is written
    there if the file does not exist), else a new key is saved in the OS keyring, unless its
    backend keeps keys in a plain file (keyrings.alt): then it refuses, changing nothing, unless
    MEMSAFE_ALLOW_INSECURE_KEYRING=1. Stop running `memsafe serve` processes first.
    All-or-nothing: the old file stays until the encrypted copy is checked and renamed over it;
    a store reached through a symbolic link is converted where its file is.

    Examples:

      memsafe encrypt

      MEMSAFE_KEY_FILE=~/.config/memsafe/key memsafe encrypt
    """
    with _errors(_db(ctx)):
        report = api.encrypt(_db(ctx))
    _show(report, json_)


@app.command()
def decrypt(ctx: typer.Context, json_: JsonOpt = False) -> None:
    """Decrypt the store in place (its text is then readable by anyone who can read the file)."""
    with _errors(_db(ctx)):
        report = api.decrypt(_db(ctx))
    say("Warning", f"{report.path} is no longer encrypted")
    _show(report, json_)


@app.command()
def rekey(ctx: typer.Context, json_: JsonOpt = False) -> None:
    """Re-encrypt the store with a new key, kept where the old one was.

    With a key file or the OS keyring a new key is generated there; with MEMSAFE_KEY, set
    MEMSAFE_NEW_KEY to the new key. A kill at any instant leaves a key that opens the store.
    """
    with _errors(_db(ctx)):
        report = api.rekey(_db(ctx))
    _show(report, json_)
