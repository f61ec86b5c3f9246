"""The tokenizer a loaded model is used with, and the tokens that end its generation.

    tokenizer = model_tokenizer("path/to/Qwen3-0.6B")                   # the directory's own tokenizer files
    ends = end_token_ids("path/to/Qwen3-0.6B", tokenizer, vocab_size)   # e.g. (151645, 151643)
    tokenizer = model_tokenizer("local_store/checkpoints/run-1a2b", "local_store/tokenizers/x")

A Hugging Face directory is read as ``transformers`` reads it: its ``tokenizer.json`` (or, without one, the
other tokenizer files it holds, through ``transformers`` itself), encoding text as its own post-processor says
(a Llama 3 prepends ``<|begin_of_text|>``, a Qwen nothing; the lab's exports their document-start EOS), and
generation ends at the ``eos_token_id`` its ``generation_config.json`` declares (else its ``config.json``: the
order ``transformers``' ``generate`` reads them in), an id or a list of ids, and at a known end-of-text
spelling of its tokenizer. A training run's output directory holds no
tokenizer: ``tokenizer`` names the lab tokenizer it was trained with, whose documents start after its EOS
(``document_start_tokenizer``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from tokenizers import Tokenizer

from marin.storage import exists, join, read_text
from marin.trainer.model.hf import is_hf_directory

GENERATION_CONFIG = "generation_config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def model_tokenizer(checkpoint: str, tokenizer: str | None = None) -> Tokenizer:
    """``tokenizer`` (a lab tokenizer: a ``tokenizer.json``, a directory holding one, a hub name) made to put
    its EOS before every encoded text, or, without it, the tokenizer of the HF directory ``checkpoint`` as
    ``transformers`` loads it."""
    from marin.inference.hf import document_start_tokenizer
    from marin.tokenize import load_tokenizer

    if tokenizer is not None:
        return document_start_tokenizer(load_tokenizer(tokenizer))
    if not is_hf_directory(checkpoint):
        raise FileNotFoundError(
            f"{checkpoint}: a training run's output directory holds no tokenizer; pass --tokenizer (the "
            "tokenizer it was trained with)"
        )
    if exists(join(checkpoint, "tokenizer.json")):
        return load_tokenizer(checkpoint)
    return _converted_by_transformers(checkpoint)


def _converted_by_transformers(directory: str) -> Tokenizer:
    """The fast tokenizer ``transformers`` builds from a directory's other tokenizer files (``vocab.json`` and
    ``merges.txt``, a SentencePiece ``tokenizer.model``)."""
    present = [name for name in TOKENIZER_FILES if exists(join(directory, name))]
    if not present:
        raise FileNotFoundError(f"{directory}: no tokenizer files ({', '.join(TOKENIZER_FILES)}); pass --tokenizer")
    if not os.path.isdir(directory):
        raise FileNotFoundError(
            f"{directory}: no tokenizer.json, and its other tokenizer files ({', '.join(present)}) are read "
            "through transformers from a local directory only; pass --tokenizer"
        )
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise FileNotFoundError(
            f"{directory}: no tokenizer.json; reading its {', '.join(present)} needs transformers (the "
            "export-test extra), or pass --tokenizer"
        ) from e
    return AutoTokenizer.from_pretrained(directory).backend_tokenizer


def end_token_ids(checkpoint: str, tokenizer: Tokenizer, vocab_size: int) -> tuple[int, ...]:
    """The ids that end generation: an HF directory's declared ``eos_token_id`` (``generation_config.json``,
    else ``config.json``), then the tokenizer's known end-of-text spelling (``marin.tokenize.eos_id``), each
    once, in that order. A declared id that is not a token of the model (``vocab_size``) is an error naming the
    file and the field, as is finding none."""
    from marin.tokenize import eos_id

    ids: list[int] = []
    if is_hf_directory(checkpoint):
        ids += _declared_eos(checkpoint, vocab_size)
    try:
        ids.append(eos_id(tokenizer))
    except ValueError as e:
        if not ids:
            hf = is_hf_directory(checkpoint)
            where = (
                f"{checkpoint}: neither {GENERATION_CONFIG} nor config.json declares an eos_token_id, and "
                if hf
                else ""
            )
            raise ValueError(where + str(e)) from e
    return tuple(dict.fromkeys(ids))


def _declared_eos(directory: str, vocab_size: int) -> list[int]:
    for name in (GENERATION_CONFIG, "config.json"):
        url = join(directory, name)
        if not exists(url):
            continue
        value = json.loads(read_text(url)).get("eos_token_id")
        if value is not None:
            return _check_ids(value, f"{url}: eos_token_id", vocab_size)
    return []


def _check_ids(value: Any, field: str, vocab_size: int) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{field} {value!r}: expected a token id or a list of them")
    outside = [v for v in values if not 0 <= v < vocab_size]
    if outside:
        raise ValueError(f"{field} {value!r} is not a token of the model (vocab_size {vocab_size})")
    return values
