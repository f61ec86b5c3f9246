"""SFT token caches as conversations, trained (assistant) tokens marked: ``/sft`` and ``/api/sft``."""

from __future__ import annotations

from fastapi import APIRouter, Query

from data_browser import sft
from data_browser.web import BrowserState, State, page

router = APIRouter()


def _sft_page(state: BrowserState, data: dict) -> dict:
    return {"page_size": state.config.records_per_page}


@page(router, html="/sft", template="sft.html", api="/api/sft", context=_sft_page)
def sft_data(state: State, path: str, offset: int = Query(0, ge=0)) -> dict:
    path = state.resolve(path)
    if not sft.is_sft_cache(path):
        raise FileNotFoundError(f"{path}: not an SFT token cache (no cache.json with a loss mask)")
    tokenizer = state.resolve(sft.tokenizer_of(path))  # the ledger's tokenizer must lie inside the roots too
    items, total = sft.conversations(path, tokenizer, offset, state.config.records_per_page)
    return {"path": path, "offset": offset, "total": total, "conversations": items, "tokenizer": tokenizer}
