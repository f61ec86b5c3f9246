"""The leaderboard (``/leaderboard``, JSON at ``/api/leaderboard``): training runs ranked by eval bits-per-byte,
one board per held-out set (``marin.report.leaderboard``, which reads only what the executor and the steps
wrote), with links to each run's curves and a comparison of the runs checked."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter

from data_browser.web import State, page
from marin.report.leaderboard import Board, collect_boards

router = APIRouter()


@dataclasses.dataclass
class RootBoards:
    root: str
    boards: list[Board]
    hidden: int
    """Run and eval outputs left out (unread) because they lie outside the browser's roots."""
    error: str | None = None


def root_boards(state, root: str) -> RootBoards:
    """The boards of one root, showing only runs and evals under the roots (a record may name others): those
    outside are counted, never read."""
    outside: set[str] = set()

    def readable(path: str) -> bool:
        if state.allowed(path):
            return True
        outside.add(path)
        return False

    try:
        boards = collect_boards(root, readable=readable)
    except (OSError, ValueError, KeyError, TypeError) as e:  # a record too damaged for the collector
        return RootBoards(root, [], 0, f"cannot rank the runs under {root}: {type(e).__name__}: {e}")
    return RootBoards(root, boards, len(outside))


@page(router, html="/leaderboard", template="leaderboard.html", api="/api/leaderboard")
def leaderboard_data(state: State) -> dict:
    return {"sections": [root_boards(state, root) for root in state.roots]}
