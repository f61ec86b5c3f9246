"""What a page of docs/ presents as a package's API, read from the page itself, for tests that import it.

A page shows its API in ```python blocks, whose ``from marin.x import a, b`` lines say where each name lives
and whose calls (``a(...)``) use it, and in its prose, where a function is written as a backticked call.
``api_problems`` lists what a reader copying from the page would hit: an import statement that fails when
run, a name a block calls but the page never imports nor defines, a function of the package the prose calls
but its ``__all__`` does not list (issue 47: ``compute_optimal``), a name imported from the package that its
``__all__`` does not list, and a public name the page never shows.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import pkgutil
import re

from tests.docs.test_docs import DOCS, FENCE

CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
"""Code on a page: its fenced blocks and its inline code spans."""
PROSE_CALL = re.compile(r"`([A-Za-z_]\w*)\(")
"""A backticked call in prose: `name(...)` (``.method(...)`` and ``Class.method`` are not names to import)."""


def python_blocks(page: str) -> list[ast.Module]:
    """The page's ```python blocks, parsed (a block that is not valid Python is an error naming the page)."""
    text = (DOCS / page).read_text()
    return [ast.parse(m.group(2), filename=f"docs/{page}") for m in FENCE.finditer(text) if m.group(1) == "python"]


def import_statements(page: str) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of the page's Python blocks, in page order."""
    return [n for block in python_blocks(page) for n in ast.walk(block) if isinstance(n, (ast.Import, ast.ImportFrom))]


def documented_imports(page: str) -> list[tuple[str, str]]:
    """Every ``(module, name)`` that a ``from module import name`` of the page's Python blocks imports."""
    return [(n.module, a.name) for n in import_statements(page) if isinstance(n, ast.ImportFrom) for a in n.names]


def _bound(blocks: list[ast.Module]) -> set[str]:
    """Names the blocks import, assign or define."""
    bound = set()
    for node in (n for block in blocks for n in ast.walk(block)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return bound


def code_calls(page: str) -> set[str]:
    """Names the page's Python blocks call (``name(...)``)."""
    calls = (n for block in python_blocks(page) for n in ast.walk(block) if isinstance(n, ast.Call))
    return {n.func.id for n in calls if isinstance(n.func, ast.Name)}


def prose_calls(page: str) -> set[str]:
    """Names the page's prose writes as a call (`name(...)`), outside its fenced blocks."""
    return set(PROSE_CALL.findall(FENCE.sub("", (DOCS / page).read_text())))


def defined_in(package: str) -> set[str]:
    """Functions and classes that the package's modules define (not those they import)."""
    names, root = set(), importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, f"{package}."):
        module = importlib.import_module(info.name)
        names |= {k for k, v in vars(module).items() if getattr(v, "__module__", None) == info.name}
    return names


def api_problems(page: str, package: str) -> list[str]:
    """What is wrong with ``page`` as the documentation of ``package``'s public names (empty when nothing)."""
    problems = []
    imports = documented_imports(page)
    if not any(module == package for module, _ in imports):
        problems.append(f"docs/{page} shows no `from {package} import ...`")
    for statement in import_statements(page):
        try:
            exec(compile(ast.Module([statement], []), f"docs/{page}", "exec"), {})  # the line as a reader runs it
        except ImportError as e:
            problems.append(f"docs/{page}: `{ast.unparse(statement)}` fails: {e}")
    known = _bound(python_blocks(page)) | set(dir(builtins))
    problems += [f"docs/{page} calls {n}() but never shows its import" for n in sorted(code_calls(page) - known)]
    public = set(getattr(importlib.import_module(package), "__all__", ()))
    if not public:
        problems.append(f"{package} lists no public names (__all__)")
    hidden = (prose_calls(page) & defined_in(package)) - public
    problems += [f"docs/{page} presents {n}() but {package}.__all__ lacks it" for n in sorted(hidden)]
    shown = {name for module, name in imports if module == package}
    problems += [f"docs/{page} imports {n} from {package}, whose __all__ lacks it" for n in sorted(shown - public)]
    code = "\n".join(CODE.findall((DOCS / page).read_text()))
    unshown = [n for n in sorted(public) if not re.search(rf"\b{n}\b", code)]
    problems += [f"{package}.{n} is public but docs/{page} never shows it" for n in unshown]
    return problems
