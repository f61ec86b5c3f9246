"""Narrowing ``store_prefix`` (tests/conftest.py) to some stores."""

import pytest


def on_stores(*stores: str):
    """Run a ``store_prefix`` test on these stores only: the multi-process scenarios take 10-40 s each, so each
    runs on local disk and on one object store, and each object store gets its share of them (the other
    store runs the same scenario in tests/chaos, which says which)."""
    return pytest.mark.parametrize("store_prefix", stores, indirect=True)
