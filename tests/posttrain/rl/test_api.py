"""``marin.posttrain.rl``'s public surface: every name docs/rl.md shows imports from where the page says
(issue 47: the package exported nothing, and ``load_prompts`` had to come from ``loop.py``)."""

from tests.docs.doc_api import api_problems


def test_every_name_docs_rl_shows_imports_from_marin_posttrain_rl():
    assert api_problems("rl.md", "marin.posttrain.rl") == []
