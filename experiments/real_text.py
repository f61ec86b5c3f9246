"""Real public-domain text as steps: a pinned download, then documents split into train and validation.

    raw = public_text_download("tinyshakespeare")        # raw/tinyshakespeare: the bundled copy, verified
    docs = shakespeare_documents()                        # documents/tinyshakespeare: first 90% train, last 10%
    books = gutenberg_documents()                         # documents/gutenberg: 47 books of the bundled slice

The bundled copies (``marin.corpus.public``) are the default, so nothing reaches the network. With
``MARIN_TEXT_SOURCE=upstream`` the same steps download the pinned upstream files instead (TinyShakespeare
from char-rnn, all 258 Gutenberg books, 110.6 MB): the download client verifies each file's SHA-256 either
way, the documents step checks each text's SHA-256 after decompressing, and the two routes are different
steps (their file lists differ), so neither output is ever mistaken for the other. ``MARIN_TEXT_MIRROR=<dir or
URL>`` reads the upstream files from a copy instead (same pins, same step).
"""

from __future__ import annotations

import os

from experiments.defaults import CPU_DATA
from marin.corpus.documents import TextDocumentsConfig, split_text_documents
from marin.corpus.public import public_text
from marin.download import DownloadConfig, download_dataset
from marin.execution import ExecutorStep, this_output_path, versioned

TEXT_SOURCE_ENV = "MARIN_TEXT_SOURCE"
TEXT_MIRROR_ENV = "MARIN_TEXT_MIRROR"
"""A directory or URL holding the upstream files under their relative paths (a bucket copy, a local clone):
read instead of the upstream URL. Every file is still checked against its pin, and the step's identity (its
files and their SHA-256s) is the same, so a mirror's output is the upstream download's."""


def bundled_by_default() -> bool:
    """True unless ``MARIN_TEXT_SOURCE=upstream`` (then the full corpora are downloaded from their pins)."""
    value = os.environ.get(TEXT_SOURCE_ENV, "bundled")
    if value not in ("bundled", "upstream"):
        raise ValueError(f"{TEXT_SOURCE_ENV} must be 'bundled' or 'upstream', got {value!r}")
    return value == "bundled"


def public_text_download(name: str, *, bundled: bool | None = None) -> ExecutorStep:
    """``raw/<name>`` (``raw/<name>-upstream`` for the full download): every pinned file, verified.

    The identity is the file list and their SHA-256s; where they are read from (the package's directory,
    which differs per checkout, or the upstream URL) is not part of it."""
    text = public_text(name)
    bundled = bundled_by_default() if bundled is None else bundled
    files = text.files(bundled)
    source = text.source(bundled)
    if not bundled and os.environ.get(TEXT_MIRROR_ENV):
        source = os.environ[TEXT_MIRROR_ENV]
    return ExecutorStep(
        name=f"raw/{name}" if bundled else f"raw/{name}-upstream",
        fn=download_dataset,
        config=DownloadConfig(
            source=source,
            files=versioned(tuple(files)),
            expected_sha256=versioned(files),
            output_path=this_output_path(),
            license=text.license,
            use_ray=False,  # small files (or a few hundred): one process fetches them in seconds
        ),
        description=f"download {name} ({'bundled' if bundled else 'upstream'}, {len(files)} files, SHA-256 pinned)",
        resources=CPU_DATA,
    )


def text_documents(
    name: str,
    raw: ExecutorStep,
    *,
    transform: str = "none",
    split: str = "hash",
    validation_fraction: float = 0.1,
    text_sha256: dict[str, str] | None = None,
) -> ExecutorStep:
    """``documents/<name>``: each text file of ``raw`` a document (``marin.corpus.documents``), split."""
    return ExecutorStep(
        name=f"documents/{name}",
        fn=split_text_documents,
        config=TextDocumentsConfig(
            input_path=raw,
            output_path=this_output_path(),
            transform=versioned(transform),
            split=versioned(split),
            validation_fraction=versioned(validation_fraction),
            text_sha256=versioned(dict(text_sha256 or {})),
        ),
        description=f"{name}: text files -> documents ({transform}, {split} split {validation_fraction})",
        resources=CPU_DATA,
    )


def shakespeare_documents(*, bundled: bool | None = None) -> ExecutorStep:
    """TinyShakespeare as nanoGPT splits it: the first 90% of the characters train, the last 10% validation."""
    text = public_text("tinyshakespeare")
    raw = public_text_download("tinyshakespeare", bundled=bundled)
    return text_documents(
        "tinyshakespeare", raw, split="prefix", validation_fraction=0.1, text_sha256=text.text_sha256()
    )


def gutenberg_documents(*, bundled: bool | None = None, validation_fraction: float = 0.1) -> ExecutorStep:
    """Gutenberg books without their licence header and footer, whole books split by name hash."""
    text = public_text("gutenberg")
    raw = public_text_download("gutenberg", bundled=bundled)
    return text_documents(
        "gutenberg",
        raw,
        transform="gutenberg-v1",
        split="hash",
        validation_fraction=validation_fraction,
        text_sha256=text.text_sha256(),
    )


def real_text_validation(*, bundled: bool | None = None) -> dict[str, ExecutorStep]:
    """Held-out real text as evaluation sets, one per corpus (as Paloma reports bits-per-byte per source):
    ``{"tinyshakespeare": ..., "gutenberg": ...}``, each a documents step's ``validation/`` records, which the
    eval step tokenizes with the model's own tokenizer (``default_eval(validation={**own, **these})``)."""
    return {
        "tinyshakespeare": shakespeare_documents(bundled=bundled) / "validation",
        "gutenberg": gutenberg_documents(bundled=bundled) / "validation",
    }
