"""The browser's page families, one ``APIRouter`` each; ``data_browser.app`` includes them (see its docstring)."""

from data_browser.pages import (
    compare_runs_page,
    experiment_page,
    fit_page,
    leaderboard_page,
    listing,
    records,
    rollouts_page,
    sft_page,
    training_page,
    web_steps_page,
)

ROUTERS = (
    listing.router,
    records.router,
    experiment_page.router,
    training_page.router,
    web_steps_page.router,
    sft_page.router,
    compare_runs_page.router,
    leaderboard_page.router,
    fit_page.router,
    rollouts_page.router,
)
"""Included in this order by ``create_app``."""

__all__ = ["ROUTERS"]
