"""Responsibility: `memsafe serve --transport http`, the MCP server of `memsafe.mcp.tools` on the MCP
SDK's streamable-HTTP transport, for a team sharing one memory (docs/team.md).

The tools are those of stdio (`build_server`), with the same handlers, minus `transfer` (its paths
would be the server's files, not the caller's). What HTTP adds, each through the SDK where it has
the piece:

- Tokens: `MEMSAFE_HTTP_TOKENS_FILE` holds lines `name token` (`#` comments and blank lines
  allowed), name being the user the token stands for. The SDK's bearer middleware asks
  `TokenTable.user_of` for each request's `Authorization: Bearer …` token; a missing or wrong
  token is answered 401 before the MCP session sees the request, so nothing is written. Only
  SHA-256 digests of the tokens are kept, compared in constant time, and no log line carries a
  token (`_RedactBearer` guards against any library logging an Authorization header).
- A token is required on any bind other than loopback: without a tokens file the server refuses
  to start there. On loopback without a tokens file it serves anyone on this machine, unattributed.
- Host and Origin are checked against DNS rebinding by the SDK's `TransportSecuritySettings`:
  the loopback names, the bound address, this machine's host name, and every `--allow-host`
  (the public name a reverse proxy forwards). Anything else: 421 (Host) or 403 (Origin).
- `GET /healthz` answers without a token: `{"status": "ok", "version": …}` when the store
  opens, 503 otherwise (the reason goes to the log, not to the anonymous caller).
- Attribution: each tool call runs with the token's user as `ServerState.author`, so every
  memory written over HTTP records who wrote it.
- Restarts: sessions live in the server process. After a restart an `initialize` that still
  carries its old session id opens a new session (`RenewStaleSessions`); any other request with
  an unknown id is 404, the protocol's sign to initialize again.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import re
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from memsafe import settings
from memsafe.errors import MemsafeError, Refused

__all__ = ["DEFAULT_PORT", "MCP_PATH", "TOKENS_ENV", "TokenTable", "build_app", "is_loopback", "load_tokens",
           "serve_http"]

log = logging.getLogger("memsafe.http")

TOKENS_ENV = "MEMSAFE_HTTP_TOKENS_FILE"
DEFAULT_PORT = 8765
MCP_PATH = "/mcp"
MIN_TOKEN_CHARS = 16  # a shorter token is refused: it could be guessed (make one with `openssl rand -hex 32`)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


# ---------------------------------------------------------------------------------------------
# Tokens


@dataclass(frozen=True)
class TokenTable:
    """The tokens of a tokens file: (SHA-256 digest of the token, user name) pairs, in file order.

    Attributes:
        entries: the pairs; the tokens themselves are not kept.
        path: the file they came from.
    """

    entries: tuple[tuple[bytes, str], ...]
    path: str

    def user_of(self, token: str) -> str | None:
        """The user a presented token stands for, or None. Every entry is compared, each with
        `hmac.compare_digest` on fixed-length digests, so the time taken says nothing about how
        much of a token matched or which entry did."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found = None
        for known, name in self.entries:
            if hmac.compare_digest(digest, known) and found is None:
                found = name
        return found

    @property
    def users(self) -> list[str]:
        """The distinct user names, sorted."""
        return sorted({name for _, name in self.entries})


def load_tokens(path: str | os.PathLike) -> TokenTable:
    """Read a tokens file: one `name token` per line (separated by spaces or tabs); `#` starts
    a comment line; blank lines are skipped. A user may have several tokens (laptop, CI).

    Raises:
        Refused: the file cannot be read, holds no token, or a line is not `name token`, a
            name is no valid author (`api.clean_author`), a token is shorter than
            MIN_TOKEN_CHARS or appears twice. The message names the file
            and line, never the token.
    """
    from memsafe.api.hygiene import clean_author

    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise Refused(f"cannot read {TOKENS_ENV} file {where}: {reason}") from None
    entries: list[tuple[bytes, str]] = []
    seen: dict[bytes, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = stripped.split()
        if len(fields) != 2:
            raise Refused(f"{where} line {number}: expected `name token` (two fields), found "
                               f"{len(fields)} field{'s' if len(fields) != 1 else ''}")
        name, token = fields
        try:
            name = clean_author(name)  # as every memory they write will record it
        except MemsafeError as exc:
            raise Refused(f"{where} line {number}: {exc}") from None
        if len(token) < MIN_TOKEN_CHARS:
            raise Refused(f"{where} line {number}: the token of {name} is shorter than {MIN_TOKEN_CHARS} "
                               "characters; make one with: openssl rand -hex 32")
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        if digest in seen:
            raise Refused(f"{where} line {number}: the same token as line {seen[digest]}; give each user "
                               "their own token")
        seen[digest] = number
        entries.append((digest, name))
    if not entries:
        raise Refused(f"{where} holds no token; add lines `name token`")
    return TokenTable(tuple(entries), where)


# ---------------------------------------------------------------------------------------------
# Binding and Host/Origin checks


def is_loopback(host: str) -> bool:
    """True for `localhost` and any loopback address (127.0.0.0/8, ::1)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def security_settings(host: str, allow_hosts: tuple[str, ...] = ()):
    """The SDK's DNS-rebinding settings for a server bound to `host`: the Host header must name
    a loopback name, the bound address (not a wildcard), this machine's host name when bound to
    a wildcard, or one of `allow_hosts` (with or without a port); an Origin header, when sent,
    must be http(s) on one of those names.

    Returns:
        `mcp.server.transport_security.TransportSecuritySettings`.
    """
    from mcp.server.transport_security import TransportSecuritySettings

    names = list(LOOPBACK_NAMES)
    if not _wildcard(host):
        names.append(host)
    else:
        names.append(socket.gethostname())
    names += list(allow_hosts)
    hosts: list[str] = []
    origins: list[str] = []
    for name in dict.fromkeys(n.strip().lower() for n in names if n.strip()):
        shown = f"[{name}]" if ":" in name and not name.startswith("[") else name
        hosts += [shown, f"{shown}:*"]
        origins += [f"{scheme}://{shown}{port}" for scheme in ("http", "https") for port in ("", ":*")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free one), with TCP_NODELAY.

    Raises:
        Refused: the address cannot be bound (in use, not this machine's, a bad name).
    """
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host.strip("[]"), port), family=family, backlog=256)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise Refused(f"cannot listen on {host}:{port} ({reason}); choose another --host or --port") from None
    # Accepted connections inherit TCP_NODELAY (Linux, macOS). Without it uvicorn's response, written
    # as headers then body, waited for the client's delayed ACK: about 40 ms on every keep-alive request.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


# ---------------------------------------------------------------------------------------------
# Logs


_BEARER = re.compile(r"(?i)(bearer\s+)[^\s'\",]+")


class _RedactBearer(logging.Filter):
    """Replace whatever follows `Bearer ` in a log message with `[redacted]`: no library's debug
    line about request headers can put a token in the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _BEARER.search(message):
            record.msg, record.args = _BEARER.sub(r"\1[redacted]", message), None
        return True


# ---------------------------------------------------------------------------------------------
# The app


def build_app(db: str | None = None, project: str | None = None, *, host: str = "127.0.0.1",
              tokens: TokenTable | None = None, allow_hosts: tuple[str, ...] = ()):
    """The Starlette app: MCP at `MCP_PATH` (bearer tokens when `tokens` is given), `GET /healthz`.

    Args:
        db: database (see `memsafe.mcp.tools.ServerState`).
        project: the project every call is scoped to (None: detected from the working directory).
        host: the address it will be bound to (for the Host checks).
        tokens: the tokens; None serves without them (loopback only: `serve_http` checks that).
        allow_hosts: more Host names clients use (a reverse proxy's public name).

    Returns:
        (ASGI app: the Starlette app inside `RenewStaleSessions`, `ServerState`).
    """
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from pydantic import AnyHttpUrl
    from starlette.responses import JSONResponse

    from memsafe import __version__
    from memsafe.mcp.tools import INSTRUCTIONS, build_server

    options: dict = {}
    if tokens is not None:
        table = tokens

        class Verifier:
            """The SDK's TokenVerifier over a `TokenTable`: the token's user is the client id."""

            async def verify_token(self, token: str) -> AccessToken | None:
                user = table.user_of(token)
                if user is None:
                    log.warning("refused a request: its token is unknown (401)")
                    return None
                return AccessToken(token="[not kept]", client_id=user, scopes=[])

        # The issuer URL is required by the SDK's settings but unused: no OAuth routes are served.
        options = dict(token_verifier=Verifier(), auth=AuthSettings(
            issuer_url=AnyHttpUrl(f"http://{host if ':' not in host else f'[{host}]'}"), resource_server_url=None))
    instructions = INSTRUCTIONS.replace("kept on this machine", "kept on your team's memsafe server, shared with "
                                        "your teammates' agents")
    server = build_server(db, project, instructions=instructions, **options)
    server.remove_tool("transfer")  # its paths would name the server's files, not the caller's
    state = server.memsafe

    def author() -> str | None:
        token = get_access_token()  # set by the SDK for the request that carried this call
        return token.client_id if token is not None else None

    state.author = author
    state.shared = True

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(request):
        import anyio

        def check() -> str | None:
            try:
                with state.store(fresh=True):  # a real open, not a connection kept from before
                    return None
            except Exception as exc:  # a MemsafeError, or a damaged file (apsw): unhealthy either way
                return f"{type(exc).__name__}: {exc}"

        problem = await anyio.to_thread.run_sync(check)
        if problem is not None:
            log.warning("healthz: store unavailable: %s", problem)
            return JSONResponse({"status": "unavailable"}, status_code=503)
        return JSONResponse({"status": "ok", "version": __version__})

    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host,
                                     transport_security=security_settings(host, allow_hosts))
    return RenewStaleSessions(app, server.session_manager), state


class RenewStaleSessions:
    """ASGI wrapper of the MCP app: an `initialize` that still carries a session id this server does
    not know (one from before a restart) opens a new session, instead of the 404 the SDK gives
    any unknown id. After a restart, clients that re-initialize when a call answers 404 (as the
    protocol asks) and clients that re-initialize with their old id both carry on; every other
    request with an unknown id stays 404 (docs/team.md).

    Only the session id is dropped: the token is checked as for any request, and a known id
    (another user's session included) is left to the SDK.
    """

    MAX_BODY = 1 << 20  # bytes of a request looked at; an `initialize` is a few hundred

    def __init__(self, app, manager) -> None:
        self.app, self.manager = app, manager

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST" or scope.get("path") != MCP_PATH:
            return await self.app(scope, receive, send)
        header = b"mcp-session-id"
        stale = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == header), None)
        if stale is None or stale in self.manager._server_instances:
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False) and size <= self.MAX_BODY
        body = b"".join(chunks)
        if _is_initialize(body):
            log.info("an initialize carried an unknown session id (from before a restart?): opening a new session")
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != header]}
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _is_initialize(body: bytes) -> bool:
    """Whether a request body is a JSON-RPC `initialize` request (alone or first in a batch)."""
    import json

    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return False
    if isinstance(message, list) and message:
        message = message[0]
    return isinstance(message, dict) and message.get("method") == "initialize" and "id" in message


def serve_http(db: str | None = None, project: str | None = None, *, host: str = "127.0.0.1",
               port: int = DEFAULT_PORT, allow_hosts: tuple[str, ...] = ()) -> None:
    """Serve MCP over streamable HTTP on host:port until SIGINT or SIGTERM, then end the process
    (exit 130 or 143, after the requests in flight, as over stdio).

    Tokens come from the file `MEMSAFE_HTTP_TOKENS_FILE` names. Writes one line to stderr once
    it accepts requests: `memsafe serve: MCP over HTTP on http://HOST:PORT/mcp (...)`.

    Raises:
        Refused: a bad tokens file; no tokens file on a bind other than loopback; the address
            cannot be bound. InvalidInput: an empty DB path or project. All before anything is served.
        MemsafeError: the store cannot be opened (StoreUnavailable, SchemaTooNew, ...).
    """
    import threading

    import uvicorn

    from memsafe.mcp import tools as stdio_server

    tokens_file = settings.env_path(TOKENS_ENV)  # InvalidInput for a placeholder, before serving
    tokens = load_tokens(str(tokens_file)) if tokens_file else None
    if tokens is None and not is_loopback(host):
        raise Refused(f"serving on {host} needs tokens: set {TOKENS_ENV} to a file of `name token` lines "
                           "(see docs/team.md), or serve on 127.0.0.1")
    stdio_server._setup_logging()
    for handler in logging.getLogger().handlers:
        handler.addFilter(_RedactBearer())
    if tokens is not None and os.name == "posix" and os.stat(tokens.path).st_mode & 0o077:
        log.warning("%s can be read by other users of this machine; chmod 600 it", tokens.path)
    app, state = build_app(db, project, host=host, tokens=tokens, allow_hosts=allow_hosts)
    # Open (and migrate) the store once, before any request: a store that cannot open stops the start
    # with one line, and the first requests arriving together find it ready (a PostgreSQL pool that
    # several threads opened at once failed them all).
    with state.store():
        pass
    sock = _listen(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    who = (f"tokens of {len(tokens.users)} user{'s' if len(tokens.users) != 1 else ''} from {tokens.path}"
           if tokens else "no tokens: anyone on this machine")
    config = uvicorn.Config(app, log_config=None, access_log=True, server_header=False, date_header=False,
                            timeout_graceful_shutdown=3, log_level=logging.getLogger().level)
    server = uvicorn.Server(config)

    def announce() -> None:
        while not server.started and not server.should_exit:
            threading.Event().wait(0.01)
        if server.started:
            sys.stderr.write(f"memsafe serve: MCP over HTTP on http://{shown}:{bound}{MCP_PATH} ({who}); "
                             f"store {state.db}; Ctrl-C stops it\n")
            sys.stderr.flush()

    threading.Thread(target=announce, name="memsafe-http-ready", daemon=True).start()
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again with the handler
    # it found: KeyboardInterrupt for SIGINT; this one for SIGTERM. Exit codes as over stdio.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    code = 0
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    stdio_server._exit(state, code)
