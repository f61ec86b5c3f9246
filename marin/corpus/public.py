"""Real public-domain text, pinned: where each corpus lives upstream, the SHA-256 of every file, its licence,
and the copy (or slice) that ships with the lab for offline runs and tests.

    text = PUBLIC_TEXTS["tinyshakespeare"]
    text.files(bundled=True)      # {"input.txt": "86c4e6aa..."}: relative path -> SHA-256
    text.source(bundled=True)     # the directory inside the installed package holding those files
    text.source(bundled=False)    # "https://raw.githubusercontent.com/karpathy/char-rnn/<commit>/data/tinyshakespeare/"

``experiments.real_text.public_text_download`` turns one into a download step (the lab's real download client
verifies every file against its pin, either way). The bundled route is the default: nothing is fetched from
the network unless an experiment asks for ``bundled=False``.

- ``tinyshakespeare``: the 1,115,394-byte text of char-rnn and nanoGPT, shipped whole.
- ``gutenberg``: 258 English books of 11 authors (110.6 MB) from ``rcdm-uga/Gutenberg_Text``, pinned per
  file in ``texts/gutenberg/manifest.json``; a slice of 47 of them (15.8 MB of text) ships xz-compressed
  (5.0 MB) under ``texts/gutenberg/slice``. A slice file is its upstream file compressed: its text has the
  upstream SHA-256 (``marin.corpus.documents`` checks it after decompressing).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from urllib.parse import quote

TEXTS_DIR = Path(__file__).resolve().parent / "texts"


@dataclasses.dataclass(frozen=True)
class PinnedFile:
    path: str
    """Relative path, upstream and in the step's output."""
    sha256: str
    """Of the file's bytes (upstream; for a slice file, of its compressed bytes)."""
    size: int
    text_sha256: str | None = None
    """A slice file only: the SHA-256 of its decompressed text (= the upstream file's)."""


@dataclasses.dataclass(frozen=True)
class PublicText:
    name: str
    url: str
    """Upstream base URL, pinned to a commit; a file's URL is ``url + quote(path)``."""
    license: str
    """The licence in one line, recorded in the download's ``provenance.json``."""
    upstream: tuple[PinnedFile, ...]
    bundled: tuple[PinnedFile, ...]
    """What ships under ``TEXTS_DIR / name`` (the whole text, or a compressed slice)."""
    bundled_dir: str = ""
    """Sub-directory of ``TEXTS_DIR / name`` holding the bundled files."""

    def source(self, bundled: bool = True) -> str:
        return str(TEXTS_DIR / self.name / self.bundled_dir) if bundled else self.url

    def pinned(self, bundled: bool = True) -> tuple[PinnedFile, ...]:
        return self.bundled if bundled else self.upstream

    def files(self, bundled: bool = True) -> dict[str, str]:
        """Relative path -> SHA-256 of every file to download."""
        return {f.path: f.sha256 for f in self.pinned(bundled)}

    def text_sha256(self) -> dict[str, str]:
        """Document name (the upstream relative path) -> SHA-256 of its text, for both routes."""
        return {f.path: f.sha256 for f in self.upstream}

    def url_of(self, path: str) -> str:
        return self.url + quote(path)


def _tinyshakespeare() -> PublicText:
    only = PinnedFile("input.txt", "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed", 1_115_394)
    return PublicText(
        name="tinyshakespeare",
        url="https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare/",
        license="Shakespeare's plays: public domain; as distributed in karpathy/char-rnn (MIT)",
        upstream=(only,),
        bundled=(only,),
    )


def _gutenberg() -> PublicText:
    manifest = json.loads((TEXTS_DIR / "gutenberg" / "manifest.json").read_text(encoding="utf-8"))
    upstream, bundled = [], []
    for row in manifest["files"]:
        upstream.append(PinnedFile(row["path"], row["sha256"], row["size"]))
        if "slice" in row:
            piece = row["slice"]
            bundled.append(PinnedFile(piece["path"], piece["sha256"], piece["size"], text_sha256=row["sha256"]))
    return PublicText(
        name="gutenberg",
        url=manifest["url"],
        license=(
            "Project Gutenberg eBooks, public domain in the USA (Project Gutenberg License in each file's footer; "
            "removed with the header by the gutenberg transform); collected in rcdm-uga/Gutenberg_Text"
        ),
        upstream=tuple(upstream),
        bundled=tuple(bundled),
        bundled_dir="slice",
    )


@functools.cache
def public_text(name: str) -> PublicText:
    """The pinned corpus ``name`` (one of ``PUBLIC_TEXT_NAMES``)."""
    builders = {"tinyshakespeare": _tinyshakespeare, "gutenberg": _gutenberg}
    if name not in builders:
        raise KeyError(f"unknown public text {name!r}; known: {sorted(builders)}")
    return builders[name]()


PUBLIC_TEXT_NAMES = ("tinyshakespeare", "gutenberg")
