"""``marin.scaling``'s one public surface: what docs/scaling.md shows imports from it as shown (issue 47:
``compute_optimal`` was documented beside ``fit_ladder`` but lived elsewhere), and importing it, or the
fit.json record module as the data browser and the report do, loads none of the fit's numerics."""

import subprocess
import sys

import pytest

from tests.docs.doc_api import api_problems

NUMERICS = ("numpy", "scipy", "jax", "matplotlib", "marin.trainer", "marin.scaling.fit", "marin.scaling.surface")


def test_every_name_docs_scaling_shows_imports_from_marin_scaling():
    assert api_problems("scaling.md", "marin.scaling") == []


@pytest.mark.parametrize(
    "module, allowed",
    [
        ("marin.scaling", ()),
        ("marin.scaling.record", ()),
        ("data_browser.fit", ()),
        ("marin.report.render", ()),
        ("data_browser.app", ("numpy",)),  # token caches (marin.tokenize.reader) are read with numpy
    ],
)
def test_the_package_and_the_readers_of_fit_json_load_no_numerics(module, allowed):
    heavy = tuple(m for m in NUMERICS if m not in allowed)
    code = f"import sys, {module}; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"importing {module} loads {out.strip()}"


def test_every_public_name_resolves_and_lists_itself():
    import marin.scaling

    assert sorted(marin.scaling.__all__) == sorted(set(marin.scaling.__all__))
    for name in marin.scaling.__all__:
        assert getattr(marin.scaling, name).__name__ == name
    assert set(marin.scaling.__all__) <= set(dir(marin.scaling))
    with pytest.raises(AttributeError, match="no_such_name"):
        marin.scaling.no_such_name  # noqa: B018
