"""The data browser's web app: server-rendered pages, and the same data as JSON under /api.

FastAPI was chosen over Flask for its typed query parameters (offsets and limits are validated before
any handler runs), its test client, and uvicorn; pages are plain Jinja2 templates, the only script is the
vendored uPlot for training curves, so it works with no network and no build step.

Every route is a GET; every path parameter goes through ``access.resolve`` (``state.resolve``) before any
I/O, and so does every file a page opens on its own (a step's ``metrics.jsonl``, the outputs an experiment
record names).

How it fits together:

- ``web.py``: ``BrowserState`` (config, roots, templates; on ``app.state.browser``, reached through the
  ``State`` dependency, so no route closes over app state), ``page`` (registers one data function as an
  HTML page and its ``/api`` twin), ``to_json`` (the one serializer), ``ERRORS`` (exception type → status
  and title) with its one handler.
- ``pages/``: one ``APIRouter`` per page family: ``listing`` (``/``, ``/browse``, ``/api/list``),
  ``records`` (``/records``, ``/compare``), ``experiment_page`` (``/experiment``), ``training_page``
  (``/training``, ``/api/metrics``).
- ``experiments.py``, ``training.py``, ``readers.py``: reading lab files, no web code.

Adding a page family, e.g. a conversation view of SFT records at ``/conversation?path=&offset=``:

1. ``pages/conversation.py``::

       router = APIRouter()

       def _conversation_page(state: BrowserState, data: dict) -> dict:
           return {"parent": state.parent(data["path"])}  # what only the HTML needs

       @page(router, html="/conversation", template="conversation.html", api="/api/conversation",
             context=_conversation_page)
       def conversation_data(state: State, path: str, offset: int = Query(0, ge=0)) -> dict:
           path = record_file(state, path)  # resolved under the roots, or Forbidden / ReadFailure
           records, more = readers.page(path, offset, state.config.records_per_page, state.config.max_line_bytes)
           return {"path": path, "offset": offset, "more": more, "records": records}

   The data function returns plain values and dataclasses (``to_json`` turns them into JSON); it raises
   ``Forbidden``, ``ReadFailure``, ``OSError`` or ``FileNotFoundError`` (or a type added to ``ERRORS``)
   and never builds an error page itself.
2. ``templates/conversation.html``, extending ``base.html``; it gets the dict and the context as variables.
3. One line in ``pages/__init__.py``: add ``conversation.router`` to ``ROUTERS``.

A view that is not one data function (``/browse`` dispatches on what the path is) is a plain
``@router.get`` taking ``state: State``; its errors go through the same handler.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from data_browser.config import BrowserConfig
from data_browser.pages import ROUTERS
from data_browser.web import ERRORS, BrowserState, FiniteJSONResponse, error_response

__all__ = ["FiniteJSONResponse", "create_app"]


def create_app(config: BrowserConfig) -> FastAPI:
    app = FastAPI(
        title="Marin data browser",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        default_response_class=FiniteJSONResponse,
    )
    app.state.browser = BrowserState.build(config)
    app.mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static")
    for exc_type in ERRORS:
        app.add_exception_handler(exc_type, error_response)
    for router in ROUTERS:
        app.include_router(router)
    return app
