"""Responsibility: starting one run of `memsafe ui`, with as little as possible loaded before the
page can answer (usable within 1 s of the command on a 10,000-memory store).

`memsafe [--db PATH] ui [--port N] [--no-open]` comes here straight from `memsafe.__main__`
(`parse_argv`), without building the Typer CLI; any other shape of command line (`--help`, a
typo, `--port abc`) goes through the CLI as before, whose `ui` command calls `main` too. In order:

1. bind 127.0.0.1 (the socket listens at once, so a browser that connects early waits in the
   kernel's queue instead of being refused);
2. open the store (its errors are one line on stderr before any URL is printed);
3. print the URL with this run's token and open the browser (in a thread: a terminal browser
   may not return), so the browser starts while the rest loads;
4. import the web stack (Starlette, uvicorn, Jinja2: `memsafe.ui.server`) and serve until Ctrl-C.

Standard library only at import (and `memsafe.errors`): the store and the web stack load in
`main`.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from memsafe import settings
from memsafe.errors import MemsafeError, Refused

if TYPE_CHECKING:
    import socket

    from memsafe.api import Opened

__all__ = ["DEFAULT_PORT", "UiState", "bind", "main", "parse_argv"]

DEFAULT_PORT = 8377
_PORT = re.compile(r"[0-9]{1,5}")


@dataclass
class UiState:
    """What one run of the page holds: the store (used under `lock`), the port, the token that
    opens the page and the CSRF token that changes must carry (each `secrets.token_urlsafe(32)`:
    256 random bits)."""

    opened: Opened
    port: int
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    lock: threading.Lock = field(default_factory=threading.Lock)
    warmed: threading.Event = field(default_factory=threading.Event)
    warmer: threading.Thread | None = None
    notice: str | None = None  # a warning the next page shows once (a purge's copies still holding the text)

    @property
    def cookie(self) -> str:
        return f"memsafe_ui_{self.port}"  # cookies ignore ports: two pages on two ports keep theirs apart

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}?{urlencode({'token': self.token})}"

    def warm(self) -> None:
        """Load the embedding model and token encoding in the background, once, after the first
        response is sent: the first search then answers sooner, and startup does not wait for it."""
        if self.warmed.is_set():
            return
        self.warmed.set()

        def job():
            from memsafe import embed, tokens

            if self.opened.store.vector_available:
                embed.get_embedder()
            tokens.warm()

        self.warmer = threading.Thread(target=job, name="memsafe-ui-warm", daemon=True)
        self.warmer.start()


def parse_argv(argv: list[str]) -> tuple[str | None, int | None, bool] | None:
    """(db, port, no_open) when `argv` is exactly `[--db PATH]... ui [--port N]... [--no-open]...`
    (also `--db=PATH`, `--port=N`; the last of a repeated option wins, as in the CLI) with N a
    port number 0–65535; None for anything else, which the CLI then parses (help, errors)."""
    db = port = None
    no_open = seen_ui = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if not seen_ui and arg == "ui":
            seen_ui = True
        elif seen_ui and arg == "--no-open":
            no_open = True
        elif name == ("--port" if seen_ui else "--db") and (eq or i + 1 < len(argv)):
            value = inline if eq else argv[i + 1]
            i += 0 if eq else 1
            if not seen_ui:
                db = value
            elif _PORT.fullmatch(value) and int(value) <= 65535:
                port = int(value)
            else:
                return None
        else:
            return None
        i += 1
    return (db, port, no_open) if seen_ui else None


def bind(port: int | None, default_port: int = DEFAULT_PORT) -> socket.socket:
    """A listening socket on 127.0.0.1: `port`, or `default_port` falling back to any free port
    when it is taken (port None), or any free port (0). Raises Refused when `port` is taken."""
    import socket

    def attempt(p: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", p))
        except OSError:
            sock.close()
            raise
        sock.listen(128)
        return sock

    if port is not None:
        try:
            return attempt(port)
        except OSError as exc:
            raise Refused(f"cannot listen on 127.0.0.1:{port} ({exc.strerror or exc}); "
                               "choose another --port, or --port 0 for any free one") from None
    try:
        return attempt(default_port)
    except OSError:
        return attempt(0)


def _open_browser(url: str) -> None:
    """Open `url` in the user's browser; where none can be started (a server over ssh, no
    $BROWSER), say so on stderr instead of leaving the user waiting for a page that never opens."""
    import urllib.parse
    import webbrowser

    try:
        opened = webbrowser.open(url)
    except Exception:  # webbrowser.Error, a broken $BROWSER command
        opened = False
    if not opened:
        port = urllib.parse.urlsplit(url).port
        _line("Note", f"no web browser could be started here; open the URL above in one (from another machine, "
                      f"forward the port first: ssh -L {port}:127.0.0.1:{port} this-host)")


def _line(kind: str, message: str) -> None:
    """One line on stderr, `Kind: message`, control characters made visible (`render.printable`)."""
    from memsafe.render import printable

    sys.stderr.write(f"{kind}: {printable(' '.join(str(message).splitlines()))}\n")
    sys.stderr.flush()


def main(db: str | None, port: int | None, no_open: bool) -> int:
    """Run `memsafe ui` until Ctrl-C (see the module docstring); returns the exit code: 0, or
    the error's code after one `Error: …` line on stderr (port taken, store unusable).
    MEMSAFE_DEBUG=1 lets the exception through instead."""
    try:
        sock = bind(port)
    except MemsafeError as exc:
        if settings.env().debug:
            raise
        _line("Error", str(exc))
        return exc.exit_code
    try:
        return _serve(sock, db, no_open)
    finally:
        sock.close()


def _serve(sock, db: str | None, no_open: bool) -> int:
    import apsw

    from memsafe import api

    try:
        opened = api.open_store(db)
    except (MemsafeError, apsw.Error) as exc:
        if settings.env().debug:
            raise
        if isinstance(exc, MemsafeError):
            _line("Error", str(exc))
            return exc.exit_code
        _line("Error", f"database error in {db or 'the database'}: {exc}; run `memsafe doctor`")
        return 1
    try:
        for warning in opened.warnings:
            _line("Warning", warning)
        for note in opened.notes:
            _line("Note", note)
        state = UiState(opened, sock.getsockname()[1])
        url = state.url()
        sys.stdout.write(url + "\n")  # the one line on stdout: scripts read the URL from here
        sys.stdout.flush()
        sys.stderr.write(f"memsafe ui: serving {opened.path} on 127.0.0.1 only; press Ctrl-C to stop\n")
        sys.stderr.flush()
        if not no_open:
            threading.Thread(target=_open_browser, args=(url,), name="memsafe-ui-browser", daemon=True).start()
        try:
            from memsafe.ui import server

            server.run(state, sock)
        except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled once it has shut down
            pass
    finally:
        opened.store.close()
    sys.stderr.write("memsafe ui: stopped\n")
    if state.warmer is not None and state.warmer.is_alive():
        # the model still loading (native threads) must not race the interpreter's shutdown: it
        # aborts the process ("terminate called without an active exception"). The store is closed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
