"""Which paths the browser may show: only those under a configured root, after every normalization.

A requested path is accepted only if, once decoded (repeatedly, so ``%252e%252e`` cannot sneak a
``..`` past one decoding), it has no ``..`` component and, resolved (symlinks followed, for local
roots), it lies under a root of the same scheme. Everything else is refused with ``Forbidden`` (HTTP
403). ``..`` is refused even when it would land back inside a root (``<root>/a/../b``): the browser
never builds such paths itself, so one in a request is a probe, and refusing it keeps the rule simple
to state and to check for every scheme alike.
"""

from __future__ import annotations

import os
from urllib.parse import unquote

from marin.storage import is_local, local_path, split_url


class Forbidden(Exception):
    """The path lies outside every configured root (or tries to)."""


def normalize_root(root: str) -> str:
    if not is_local(root):
        return root.rstrip("/")
    return os.path.realpath(os.path.abspath(local_path(root)))


def _fully_unquoted(path: str) -> str:
    for _ in range(5):
        decoded = unquote(path)
        if decoded == path:
            return path
        path = decoded
    raise Forbidden(f"{path!r}: too many levels of URL encoding")


def resolve(path: str, roots: list[str]) -> str:
    """The canonical form of ``path`` if it is under one of ``roots`` (already normalized)."""
    path = _fully_unquoted(path)
    if "\x00" in path:
        raise Forbidden("NUL byte in path")
    if any(part == ".." for part in path.replace("\\", "/").split("/")):
        raise Forbidden(f"{path}: '..' is not allowed")
    if not is_local(path):
        scheme, rest = split_url(path)
        candidate = f"{scheme}://{rest.strip('/')}"
        for root in roots:
            if not is_local(root) and (candidate == root or candidate.startswith(root + "/")):
                return candidate
        raise Forbidden(f"{path}: outside the configured roots")
    local = local_path(path)
    if not os.path.isabs(local):
        raise Forbidden(f"{path}: relative paths are not allowed")
    real = os.path.realpath(local)  # follows symlinks: a link pointing outside is refused
    for root in roots:
        if is_local(root) and (real == root or real.startswith(root.rstrip("/") + "/")):
            return real
    raise Forbidden(f"{path}: outside the configured roots")
