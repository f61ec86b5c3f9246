"""`make test` cannot pass by skipping: under MARIN_REQUIRE_ALL=1 a missing test dependency is an error."""

import pytest

from tests.requirements import MissingTestDependency, require_module, require_path


def test_missing_dependency_skips_by_default_and_fails_under_require_all(monkeypatch, tmp_path):
    monkeypatch.delenv("MARIN_REQUIRE_ALL", raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs the xyz extra"):
        require_module("marin_no_such_module", "the xyz extra")
    monkeypatch.setenv("MARIN_REQUIRE_ALL", "1")
    with pytest.raises(MissingTestDependency, match="needs the xyz extra: cannot import marin_no_such_module"):
        require_module("marin_no_such_module", "the xyz extra")
    with pytest.raises(MissingTestDependency, match="chromium"):
        require_path(str(tmp_path / "chromium"), "Debian chromium")
    assert require_module("json", "json").dumps([]) == "[]"


def test_make_test_requires_everything():
    from pathlib import Path

    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert ".installed-dev" in recipe and "chromium" in recipe and "MARIN_REQUIRE_ALL=1" in recipe
