"""Taking URLs apart, once: ``gs://bucket/a/b`` -> scheme ``gs``, bucket ``bucket``, key ``a/b``.

A string without ``://`` is a plain local path (scheme ``""``). Object stores are known by scheme, and the
same table names the package extra that provides each one's filesystem (``pip install -e '.[gcs]'``).
"""

from __future__ import annotations

OBJECT_STORE_FOR_SCHEME = {"gs": "gcs", "gcs": "gcs", "s3": "s3", "s3a": "s3"}
"""URL scheme -> object store, which is also the name of the pyproject extra that installs its client."""


def is_url(path: str) -> bool:
    """True for ``scheme://...``; False for plain paths."""
    return "://" in path


def is_absolute(path: str) -> bool:
    """A URL or a rooted local path (not relative to some base)."""
    return is_url(path) or path.startswith("/")


def split_url(url: str) -> tuple[str, str]:
    """``("gs", "bucket/a/b")`` for ``gs://bucket/a/b``; ``("", path)`` for a plain path."""
    scheme, sep, rest = url.partition("://")
    return (scheme, rest) if sep else ("", url)


def scheme_of(url: str) -> str:
    return split_url(url)[0]


def object_store(url: str) -> str | None:
    """ "gcs" or "s3" for object-store URLs, else None."""
    return OBJECT_STORE_FOR_SCHEME.get(scheme_of(url))


def split_bucket(url: str) -> tuple[str, str, str]:
    """``gs://bucket/a/b`` -> ("gs", "bucket", "a/b")."""
    scheme, rest = split_url(url)
    bucket, _, key = rest.partition("/")
    if not scheme or not bucket:
        raise ValueError(f"{url}: expected SCHEME://BUCKET/PATH")
    return scheme, bucket, key


def like_url(like: str, path: str) -> str:
    """fsspec returns bare paths; ``path`` as a URL in the form the caller used for ``like`` (a plain path
    stays plain, ``file://`` and ``memory:///`` keep their form, object stores get ``scheme://``)."""
    scheme = scheme_of(like)
    if not scheme:
        return path
    if scheme in ("file", "local"):
        return f"file://{path}"
    if scheme == "memory" and like.startswith("memory:///"):
        return f"memory://{path}"
    return f"{scheme}://{path.lstrip('/')}"
