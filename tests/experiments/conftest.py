"""Fixtures shared by the experiment tests."""

import pytest


@pytest.fixture(scope="session")
def books_store(tmp_path_factory):
    """One store for the tests that train on the bundled Gutenberg books: the documents, the BPE and the token
    caches (the same steps, the same hashes) are made once per session, not once per test."""
    return tmp_path_factory.mktemp("books") / "store"
