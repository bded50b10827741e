"""Responsibility: the local web page (`memsafe ui`): a Starlette app that renders Jinja2
templates (autoescaped) over the `memsafe.api` handlers, and the uvicorn loop that serves it on
127.0.0.1 only.

Security (the page can read and destroy memories, so every request is checked by `Guard`):
- a random token per run: a request must carry it (`?token=` once, then an HttpOnly,
  SameSite=Strict cookie named after the port) or it gets 403;
- the Host header must be 127.0.0.1:PORT or localhost:PORT (DNS rebinding);
- a request that changes data must be a POST whose form carries the per-run CSRF token, and
  whose Origin (when sent) is this page and whose Sec-Fetch-Site (when sent) is same-origin;
- a strict Content-Security-Policy: scripts and styles only from this server (`'self'`), no
  inline script, no frames, no other origins; so stored text can never run (XSS).

Every change goes through the same handlers as the CLI, on the same file: the CLI sees it at once.
One store connection serves the page, one request at a time (a lock); a decay dry run uses its
own short-lived connection.
"""

from __future__ import annotations

import difflib
import hmac
from pathlib import Path
from typing import overload
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment, FileSystemBytecodeCache, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memsafe import api, clock
from memsafe import render as text_of
from memsafe.errors import Duplicate, InvalidInput, MemsafeError, NotFound
from memsafe.models import Kind, Status
from memsafe.ui import layout
from memsafe.ui.start import UiState

HERE = Path(__file__).resolve().parent
MAX_BODY_BYTES = 8 * 1024 * 1024  # a form with a 1,000,000-character memory fits
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # no-referrer would make Chromium send `Origin: null` on POST
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
MESSAGES = {
    "updated": "Saved. The previous state is kept as a version.",
    "forgotten": "Forgotten: recall no longer returns it. Restore brings it back.",
    "restored": "Restored: it is active again.",
    "pinned": "Pinned: decay will never compress or archive it.",
    "unpinned": "Unpinned.",
    "confirmed": "Confirmed: it will decay more slowly.",
    "confidence": "Confidence set.",
    "purged": "Purged: the memory and its history are gone for good.",
    "unchanged": "Nothing changed.",
}
GRAPH_MESSAGES = {
    "rename": "Renamed: the old name still finds it (an alias).",
    "merge": "Merged: its memories, relations and names moved here.",
    "alias-add": "Alias added: the entity is found under it too.",
    "alias-remove": "Alias removed.",
    "delete": "Entity deleted with its relations and memory links; the memories are unchanged.",
    "unlink": "Link removed: that memory no longer names the entity.",
}
STATUS_CODES = {NotFound: 404, Duplicate: 409, InvalidInput: 400}


# ---------------------------------------------------------------------------------------------
# Guard: token, host, CSRF origin checks and security headers (pure ASGI middleware)


class Guard:
    """ASGI middleware: refuses (403) what is not this run's page; see the module docstring."""

    def __init__(self, app, state: UiState):
        self.app = app
        self.state = state
        self.hosts = {f"127.0.0.1:{state.port}", f"localhost:{state.port}"}
        self.origins = {f"http://{h}" for h in self.hosts}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        problem = self._problem(request)
        if problem:
            return await self._secure(PlainTextResponse(f"403 Forbidden: {problem}\n", status_code=403))(
                scope, receive, send)
        if "token" in request.query_params and request.method == "GET":
            # trade the token in the URL for a cookie, and drop it from the address bar and history
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(self.state.cookie, self.state.token, httponly=True, samesite="strict", path="/")
            return await self._secure(response)(scope, receive, send)

        async def send_secure(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *SECURITY_HEADERS]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.state.warm()  # after the first page is out, not while it is being made

        return await self.app(scope, receive, send_secure)

    def _problem(self, request: Request) -> str | None:
        if request.headers.get("host", "") not in self.hosts:
            return "unknown host"
        given = request.query_params.get("token") or request.cookies.get(self.state.cookie) or ""
        if not hmac.compare_digest(given.encode(), self.state.token.encode()):
            return "missing or wrong token; open the URL that `memsafe ui` printed"
        if request.method not in ("GET", "HEAD"):
            origin = request.headers.get("origin")
            if origin is not None and origin not in self.origins:
                return "cross-site request refused"
            site = request.headers.get("sec-fetch-site")
            if site is not None and site != "same-origin":
                return "cross-site request refused"
        return None

    @staticmethod
    def _secure(response: Response) -> Response:
        for key, value in SECURITY_HEADERS:
            response.headers[key.decode()] = value.decode()
        return response


# ---------------------------------------------------------------------------------------------
# Rendering helpers


def _ago(iso: str | None) -> str:
    """'3 days ago' for a stored UTC time ('' for None)."""
    if not iso:
        return ""
    seconds = (clock.now() - clock.parse_iso(iso)).total_seconds()
    for unit, size in (("year", 31_536_000), ("month", 2_592_000), ("day", 86_400), ("hour", 3600), ("minute", 60)):
        if abs(seconds) >= size:
            n = int(abs(seconds) // size)
            return f"{n} {unit}{'s' if n != 1 else ''} {'ago' if seconds >= 0 else 'from now'}"
    return "just now"


class _TemplateCache(FileSystemBytecodeCache):
    """Jinja2's on-disk cache of compiled templates (keyed by template name and a checksum of
    its source, so an edited template is compiled afresh): a run renders its first page without
    compiling `base.html`, `index.html` and the macros. A folder that cannot be written only
    means no cache."""

    def dump_bytecode(self, bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _template_cache() -> _TemplateCache | None:
    """The cache in `settings.cache_dir()/ui-templates`, or None when that folder cannot be made."""
    from memsafe import settings

    folder = settings.cache_dir() / "ui-templates"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _TemplateCache(str(folder))


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True),
                      trim_blocks=True, lstrip_blocks=True, bytecode_cache=_template_cache())
    env.filters["ago"] = _ago
    env.filters["day"] = lambda iso: (iso or "")[:10]
    env.filters["short"] = lambda text, n=220: text if len(text) <= n else text[: n - 1] + "…"
    return env


def _diff(old: str, new: str) -> list[tuple[str, str]]:
    """Line diff (difflib) as [(kind, line)], kind in ' ', '-', '+'. Long single-line texts are
    compared word by word, so a change inside a paragraph shows where it is."""
    split = (lambda t: t.splitlines()) if ("\n" in old or "\n" in new) else (lambda t: t.split(" "))
    out = []
    for line in difflib.ndiff(split(old), split(new)):
        if line[:1] in (" ", "-", "+"):
            out.append((line[:1], line[2:]))
    return out


@overload
def _int(value: str | None, default: int) -> int: ...
@overload
def _int(value: str | None, default: None = None) -> int | None: ...
def _int(value: str | None, default: int | None = None) -> int | None:
    """`value` as an integer, `default` when absent or empty. Raises InvalidInput."""
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidInput(f"{value[:20]!r} is not a whole number") from None


# ---------------------------------------------------------------------------------------------
# The app


def build_app(state: UiState) -> Guard:
    """The Starlette app for one run (routes, Guard, static files)."""
    env = _environment()
    store = lambda: state.opened.store  # noqa: E731

    def render(request: Request, name: str, status_code: int = 200, **context) -> HTMLResponse:
        counts = api.store_counts(store())
        html = env.get_template(name).render(
            request=request, csrf=state.csrf, db_path=str(state.opened.path), counts=counts,
            kinds=[k.value for k in Kind], statuses=[s.value for s in Status], ages=api.AGES, **context)
        return HTMLResponse(html, status_code=status_code)

    def failure(request: Request, exc: MemsafeError) -> HTMLResponse:
        code = next((c for t, c in STATUS_CODES.items() if isinstance(exc, t)), 400)
        return render(request, "error.html", status_code=code, error=str(exc))

    def guarded(fn):
        """Run a page function under the store lock; a MemsafeError becomes an error page."""
        def page(request: Request):
            with state.lock:
                try:
                    return fn(request)
                except MemsafeError as exc:
                    return failure(request, exc)
        return page

    @guarded
    def index(request: Request):
        q = request.query_params
        filters = {k: q.get(k, "") for k in ("q", "project", "kind", "tag", "status", "age")}
        filters["status"] = filters["status"] or "active"
        common = dict(project=filters["project"] or None, kinds=[filters["kind"]] if filters["kind"] else [],
                      tags=[filters["tag"]] if filters["tag"] else [], status=filters["status"],
                      age=filters["age"] or None)
        page = results = None
        if filters["q"].strip():
            results = api.search(store(), filters["q"], **common)
        else:
            page = api.browse(store(), after_id=_int(q.get("after")), **common)
        more = {k: v for k, v in filters.items() if v and k != "q"}
        message = MESSAGES.get(q.get("msg", ""))
        if q.get("msg") == "purged" and state.notice:  # shown once: copies that still hold the text
            message, state.notice = f"{message} Warning: {state.notice}", None
        return render(request, "index.html", filters=filters, page=page, results=results,
                      facets=api.facets(store()), message=message,
                      next_url=f"/?{urlencode({**more, 'after': page.next_after})}" if page and page.next_after
                      else None,
                      first_url=f"/?{urlencode(more)}" if q.get("after") else None)

    @guarded
    def memory(request: Request):
        memory_id = _int(request.path_params["id"])
        m = api.get(store(), memory_id)
        hist = api.history(store(), memory_id)
        versions = hist.versions
        q = request.query_params
        b = _int(q.get("b"), len(versions))
        a = _int(q.get("a"), max(b - 1, 1))
        if not (1 <= a <= len(versions) and 1 <= b <= len(versions)):
            raise InvalidInput(f"versions are numbered 1 to {len(versions)}")
        as_of = api.text_as_of(store(), memory_id, q["as_of"]) if q.get("as_of", "").strip() else None
        return render(request, "memory.html", m=m, prov=api.provenance(m), versions=versions, a=a, b=b,
                      diff=_diff(versions[a - 1].content, versions[b - 1].content) if a != b else None,
                      events=api.memory_events(store(), memory_id), as_of=as_of, as_of_text=q.get("as_of", ""),
                      pinned=api.PIN_TAG in m.tags, message=MESSAGES.get(q.get("msg", "")))

    @guarded
    def graph(request: Request):
        q = request.query_params
        name = q.get("entity", "").strip()
        depth = 2 if q.get("depth") == "2" else 1
        view = nodes = edges = None
        if name:
            view = api.graph_show(store(), name, depth=depth, limit=40, all_projects=True)
            nodes, edges = layout.radial(view)
        return render(request, "graph.html", entity=name, depth=depth, view=view, nodes=nodes, edges=edges,
                      top=api.top_entities(store()), message=GRAPH_MESSAGES.get(q.get("msg", "")))

    @guarded
    def charts(request: Request):
        data = api.store_charts(store())
        return render(
            request, "charts.html", data=data,
            kind_bars=layout.hbars(data.by_kind), decay_bars=layout.hbars(
                [(f"level {lvl}: {label}", n) for (lvl, n), label in
                 zip(data.by_decay, ("full text", "summary", "brief"))]),
            age_bars=layout.hbars(data.by_age), status_bars=layout.hbars(data.by_status),
            recall_cols=layout.columns(data.recall_days),
            event_cols=layout.columns([(d, sum(v.values())) for d, v in data.event_days]),
        )

    @guarded
    def decay(request: Request):
        # a dry run marks its connection (no checkpoint on close): give it its own
        opened = api.open_store(str(state.opened.path), create=False)
        try:
            report = api.decay(opened.store, dry_run=True)
        finally:
            opened.store.close()
        plan = api.decay_chart(report)
        return render(request, "decay.html", report=report, plan=plan,
                      plan_bars=layout.hbars([(f"→ {a}", sum(k.values())) for a, k in plan.items()]))

    async def act(request: Request):
        """POST /m/{id}/{action}: one curation action through one api handler, then back to the page."""
        form = await _checked_form(request)
        if isinstance(form, Response):
            return form
        return await run_in_threadpool(_act, request, form)

    async def graph_act(request: Request):
        """POST /graph/{action}: one graph edit through one api handler, then back to the graph page."""
        form = await _checked_form(request)
        if isinstance(form, Response):
            return form
        return await run_in_threadpool(_graph_act, request, form)

    async def _checked_form(request: Request) -> dict | Response:
        """The posted form, or the response refusing it (too large, wrong CSRF token)."""
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return PlainTextResponse("413 the form is too large\n", status_code=413)
        form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
        if not hmac.compare_digest(form.get("csrf", "").encode(), state.csrf.encode()):
            return PlainTextResponse("403 Forbidden: missing or wrong CSRF token; reload the page\n", status_code=403)
        return form

    def _graph_act(request: Request, form: dict):
        action = request.path_params["action"]
        with state.lock:
            try:
                edit = _apply_graph(store(), action, form)
            except MemsafeError as exc:
                return failure(request, exc)
        shown = "" if edit.action == "delete" else edit.entity.name
        if edit.action == "unlink":  # back to the graph it was done on, unless its centre went with the link
            at = form.get("at", "")
            shown = "" if edit.detail and at == edit.entity.name else at
        depth = "2" if form.get("depth") == "2" else "1"
        query = {"entity": shown, "depth": depth, "msg": edit.action} if shown else {"msg": edit.action}
        return RedirectResponse(f"/graph?{urlencode(query)}", status_code=303)

    def _act(request: Request, form: dict):
        action = request.path_params["action"]
        with state.lock:
            try:
                memory_id = _int(request.path_params["id"])
                assert memory_id is not None  # the route's {id} is never empty
                msg = _apply(store(), memory_id, action, form, state)
            except MemsafeError as exc:
                return failure(request, exc)
        target = "/?msg=purged" if msg == "purged" else f"/m/{memory_id}?msg={msg}"
        return RedirectResponse(target, status_code=303)

    routes = [
        Route("/", index),
        Route("/m/{id}", memory),
        Route("/m/{id}/{action}", act, methods=["POST"]),
        Route("/graph", graph),
        Route("/graph/{action}", graph_act, methods=["POST"]),
        Route("/charts", charts),
        Route("/decay", decay),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    return Guard(app, state)


def _apply(store, memory_id: int, action: str, form: dict, state: UiState | None = None) -> str:
    """Run one curation action; returns the message key for the page (a purge leaves its warning
    about copies that still hold the text in `state.notice`). Raises MemsafeError."""
    if action == "edit":
        kind = form.get("kind") or None
        tags = [t.strip() for t in form.get("tags", "").split(",") if t.strip()]
        before = api.get(store, memory_id)
        content = form.get("content")
        changed = api.update(store, memory_id, content=content if content != before.content else None,
                             tags=tags, kind=kind)
        return "updated" if changed.updated_at != before.updated_at else "unchanged"
    if action == "forget":
        api.forget(store, memory_id, reason=form.get("reason") or "forgotten in memsafe ui")
        return "forgotten"
    if action == "restore":
        api.restore(store, memory_id)
        return "restored"
    if action in ("pin", "unpin"):
        api.pin(store, memory_id, pinned=action == "pin")
        return action + "ned"
    if action == "confirm":
        api.confirm(store, memory_id, reason="confirmed in memsafe ui")
        return "confirmed"
    if action == "confidence":
        try:
            value = float(form.get("value", ""))
        except ValueError:
            raise InvalidInput("confidence must be a number between 0.01 and 0.99") from None
        api.set_confidence(store, memory_id, value=value, reason="set in memsafe ui")
        return "confidence"
    if action == "purge":
        expected = f"purge {memory_id}"
        if " ".join(form.get("confirm", "").split()).lower() != expected:
            raise InvalidInput(f"to purge, type exactly: {expected}")
        report = api.purge(store, [memory_id])
        if state is not None:
            state.notice = text_of.purge_copies(report)
        return "purged"
    raise NotFound(f"unknown action {action[:40]!r}")


def _apply_graph(store, action: str, form: dict):
    """Run one graph edit from the page's form (fields `entity`, `other`, `memory`) over every
    project, as the page shows the graph; returns the `GraphEdit`. Raises MemsafeError."""
    entity, other = form.get("entity", ""), form.get("other", "")
    if action == "rename":
        return api.rename_entity(store, entity, other)
    if action == "merge":
        return api.merge_entities(store, entity, other)
    if action == "alias":
        return api.add_alias(store, entity, other)
    if action == "unalias":
        return api.remove_alias(store, entity, other)
    if action == "delete":
        if form.get("confirm") != "yes":
            raise InvalidInput("tick the box to confirm deleting the entity")
        return api.delete_entity(store, entity)
    if action == "unlink":
        memory_id = _int(form.get("memory"))
        if memory_id is None:
            raise InvalidInput("which memory? (no memory id given)")
        return api.unlink_entity(store, memory_id, entity)
    raise NotFound(f"unknown action {action[:40]!r}")


# ---------------------------------------------------------------------------------------------
# Running


def run(state: UiState, sock) -> None:
    """Serve `state`'s page on `sock` (bound and listening: `start.bind`) until Ctrl-C (uvicorn;
    no access log, no websockets)."""
    import uvicorn

    config = uvicorn.Config(build_app(state), log_level="warning", access_log=False, lifespan="off",
                            server_header=False, date_header=False, ws="none")
    uvicorn.Server(config).run(sockets=[sock])
