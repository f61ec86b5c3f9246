"""An RL run in the browser: reward curves per environment and a table of sample rollouts per iteration,
read from what the RL step writes (``metrics.jsonl``, ``rollouts/iteration-<k>.jsonl``); roots enforced."""

from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from data_browser.app import create_app
from data_browser.config import BrowserConfig
from tests.data_browser.research_lab import write_rl_run


@pytest.fixture(scope="module")
def rl_lab(tmp_path_factory):
    """An RL run's files as ``marin.posttrain.rl`` writes them (two environments, three iterations)."""
    run = tmp_path_factory.mktemp("rllab") / "checkpoints" / "nano-rl"
    write_rl_run(run)
    client = TestClient(create_app(BrowserConfig(roots=[str(run.parent)])))
    return run, client


def get(client, route, **params):
    return client.get(f"{route}?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items()))


def test_rollouts_page_shows_reward_curves_per_environment_and_the_chosen_iterations_table(rl_lab):
    run, client = rl_lab
    data = get(client, "/api/rollouts", path=run).json()
    assert data["iteration"] == 3 and data["iterations"] == [1, 2, 3]
    assert data["curves"] == {"letters": [0.5, 0.5, 0.5], "math": [0.1, 0.2, pytest.approx(0.3)]}
    assert [(r["group"], r["sample"], r["reward"], r["advantage"]) for r in data["rollouts"]] == [
        (0, 0, 1.0, 1.0), (0, 1, 0.0, -1.0), (1, 0, 1.0, 1.0), (1, 1, 0.0, -1.0)
    ]  # fmt: skip
    page = get(client, "/rollouts", path=run, iteration=2).text
    assert 'id="rollouts"' in page and "What is 1 + 2?" in page and "1 + 2 = 4" in page and "<b>2</b>" in page
    assert 'id="rollouts-link"' in get(client, "/browse", path=run).text
    assert 'id="rollouts-link"' not in get(client, "/browse", path=run / "rollouts").text


def test_rollouts_page_refuses_what_is_not_an_rl_run_or_outside_the_roots(rl_lab, tmp_path):
    run, client = rl_lab
    assert get(client, "/api/rollouts", path=run / "rollouts").status_code == 404
    assert get(client, "/api/rollouts", path=run, iteration=9).status_code == 404
    assert get(client, "/api/rollouts", path=tmp_path).status_code == 403
