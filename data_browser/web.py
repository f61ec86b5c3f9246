"""What every page of the browser shares: its state, the HTML+JSON registration, the serializer, the error table.

A page is one *data function*: a FastAPI dependency taking query parameters (and the ``State``) and
returning a dict. ``page`` registers it twice, e.g.::

    @page(router, html="/records", api="/api/records", template="records.html", context=_records_context)
    def records_data(state: State, path: str, offset: int = Query(0, ge=0)) -> dict:
        return {"path": state.resolve(path), "records": [...], "offset": offset}

``GET /records?path=...`` renders ``records.html`` with the dict (plus ``context(state, data)``: what only a
person needs, such as sibling files or an SVG), ``GET /api/records?path=...`` sends the same dict through
``to_json``. An exception escaping a data function becomes an error page or ``{"error": ...}`` through the
one table ``ERRORS``, so no page handles errors itself.
"""

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from data_browser import training
from data_browser.access import Forbidden, resolve
from data_browser.config import BrowserConfig
from data_browser.readers import ReadFailure

TEMPLATES = Path(__file__).parent / "templates"


def breakable_path(text: object) -> Markup:
    """``text`` escaped, with a line-break opportunity after each ``/`` and ``_``: a long path or file name
    wraps between its parts on a narrow screen instead of inside a word (docs/data_browser.md)."""
    return Markup(str(escape(str(text))).replace("/", "/<wbr>").replace("_", "_<wbr>"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BrowserState:
    """Everything a page needs besides its query: set once on ``app.state.browser`` by ``create_app``."""

    config: BrowserConfig
    roots: list[str]
    """``config.normalized_roots()``: nothing outside them is read or shown."""
    templates: Environment

    @classmethod
    def build(cls, config: BrowserConfig) -> "BrowserState":
        templates = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape())
        templates.filters["q"] = lambda s: quote(str(s), safe="")
        templates.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
        templates.filters["num"] = training.format_number
        templates.policies["json.dumps_function"] = lambda v, **kw: json.dumps(to_json(v), **kw)  # for |tojson
        templates.filters["si"] = training.format_si
        templates.filters["duration"] = training.format_duration
        templates.filters["path"] = breakable_path
        return cls(config=config, roots=config.normalized_roots(), templates=templates)

    def resolve(self, path: str) -> str:
        """``access.resolve`` against the roots: the canonical path, or ``Forbidden``."""
        return resolve(path, self.roots)

    def allowed(self, url: str) -> bool:
        return safe(lambda: bool(self.resolve(url)), False)

    def parent(self, path: str) -> str | None:
        """The enclosing directory if it is still under a root (None at a root)."""
        if path in self.roots:
            return None
        try:
            return self.resolve(path.rstrip("/").rsplit("/", 1)[0])
        except Forbidden:
            return None

    def render(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.templates.get_template(template).render(roots=self.roots, **context)
        return HTMLResponse(html, status_code=status)


def browser_state(request: Request) -> BrowserState:
    return request.app.state.browser


State = Annotated[BrowserState, Depends(browser_state)]
"""Declare ``state: State`` in a data function or route to receive the app's ``BrowserState``."""


def page(
    router: APIRouter,
    *,
    html: str | None = None,
    template: str | None = None,
    api: str | None = None,
    context: Callable[[BrowserState, dict], dict] | None = None,
) -> Callable[[Callable], Callable]:
    """Register a data function at ``GET html`` (rendered through ``template``, with ``context(state, data)``
    added for the page only) and at ``GET api`` (the dict through ``to_json``); either may be None.
    Query parameters and their validation come from the data function's signature, once for both. The
    function itself is returned unchanged: other pages may call it."""
    if (html is None) != (template is None):
        raise ValueError(
            f"page: an HTML route needs a template and a template an HTML route, got html={html!r}, "
            f"template={template!r}"
        )
    if html is None and api is None:
        raise ValueError("page: give html (with template), api, or both")

    def register(data_fn: Callable[..., dict]) -> Callable[..., dict]:
        # No ``from __future__ import annotations`` in this module: FastAPI would resolve these annotations as
        # strings in the module's globals, where ``data_fn`` is not.
        def html_route(state: State, data: Annotated[dict, Depends(data_fn)]) -> HTMLResponse:
            return state.render(template, **data, **(context(state, data) if context else {}))

        def api_route(data: Annotated[dict, Depends(data_fn)]) -> FiniteJSONResponse:
            return FiniteJSONResponse(data)

        if html is not None:
            router.add_api_route(
                html, html_route, methods=["GET"], response_class=HTMLResponse, name=f"{data_fn.__name__}:html"
            )
        if api is not None:
            router.add_api_route(
                api, api_route, methods=["GET"], response_class=FiniteJSONResponse, name=f"{data_fn.__name__}:api"
            )
        return data_fn

    return register


def to_json(value: Any) -> Any:
    """The one serializer of the API: dataclasses become their fields, tuples lists, and NaN and infinities
    the strings "NaN", "Infinity", "-Infinity" (records and metrics may hold them; Starlette's JSONResponse
    refuses them with a 500 and JSON.parse refuses them in a page)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


class FiniteJSONResponse(JSONResponse):
    """A JSON response whose content goes through ``to_json``."""

    def render(self, content: Any) -> bytes:
        return json.dumps(to_json(content), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ErrorKind:
    status: int
    title: str
    """The error page's heading."""
    message: Callable[[BaseException], str] = str
    """The text of the page and of the API's ``{"error": ...}``."""


ERRORS: dict[type[BaseException], ErrorKind] = {
    Forbidden: ErrorKind(status=403, title="Forbidden"),
    ReadFailure: ErrorKind(status=422, title="Cannot read this file"),
    # A directory where a file belongs, no permission, ...
    OSError: ErrorKind(status=422, title="Cannot read this file", message=lambda e: f"{type(e).__name__}: {e}"),
    FileNotFoundError: ErrorKind(status=404, title="Not found", message=lambda e: f"not found: {e}"),
}
"""Exceptions a page may raise and what the visitor gets; a subclass follows its nearest listed class
(``FileNotFoundError`` is an ``OSError`` but is a 404). Anything else is a bug: a 500."""


async def error_response(request: Request, exc: Exception) -> HTMLResponse | FiniteJSONResponse:
    """The one exception handler (registered for every type in ``ERRORS``): JSON under ``/api/``, else a page."""
    kind = next(ERRORS[cls] for cls in type(exc).__mro__ if cls in ERRORS)
    message = kind.message(exc)
    if request.url.path.startswith("/api/"):
        return FiniteJSONResponse({"error": message}, status_code=kind.status)
    return browser_state(request).render("error.html", kind.status, title=kind.title, message=message)


def safe(fn: Callable[[], Any], default: Any) -> Any:
    """``fn()``, or ``default`` where it is refused or unreadable: for optional parts of a page."""
    try:
        return fn()
    except (Forbidden, OSError, ValueError):
        return default
