"""Loss, perplexity and bits-per-byte of held-out documents.

    bpb = (sum over target tokens of -ln p(token | prefix)) / ln 2 / (UTF-8 bytes of the documents)

Each document is scored on its own (no attention across documents), as ``[EOS] + tokens + [EOS]``: the
leading EOS is the context every document starts from (as in training, where it follows the previous
document's EOS) and every real token plus the closing EOS is a target. The closing EOS carries no
bytes, so it adds to the loss but not to the denominator — the convention of the Marin/Levanter
bits-per-byte evals. Documents longer than the window are scored in consecutive chunks, each chunk
conditioned on the previous ``stride`` tokens.

Because bytes are counted on the text, bpb compares models with different tokenizers fairly; loss and
perplexity are per token and do not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from marin.evaluation.scoring import Scorer


def document_windows(
    tokens: Sequence[int], eos: int, max_len: int, closing_eos: bool = True
) -> list[tuple[list[int], int]]:
    """Split ``[eos] + tokens + [eos]`` (without the closing EOS if ``closing_eos`` is False) into rows of
    at most ``max_len + 1`` tokens; each row comes with how many of its trailing targets are new (the
    rest re-read earlier tokens as context)."""
    full = [eos, *tokens, eos] if closing_eos else [eos, *tokens]
    targets = len(full) - 1
    if targets <= max_len:
        return [(full, targets)]
    windows = []
    stride = max_len // 2  # context carried into the next chunk
    start_target = 0  # index (in full) of the first target not yet scored, minus one
    while start_target < targets:
        end = min(start_target + max_len - (stride if start_target else 0), targets)
        lo = max(0, start_target - stride) if start_target else 0
        windows.append((full[lo : end + 1], end - start_target))
        start_target = end
    return windows


def evaluate_documents(
    scorer: Scorer, texts: Iterable[str], encode, eos: int, max_documents: int | None = None
) -> dict[str, float]:
    """Loss (nats per target token), perplexity and bits per byte over ``texts``."""
    rows, new_counts = [], []
    total_bytes = 0
    documents = 0
    for text in texts:
        if max_documents is not None and documents >= max_documents:
            break
        if not text:
            continue
        documents += 1
        total_bytes += len(text.encode("utf-8"))
        for row, new in document_windows(encode(text), eos, scorer.max_len):
            rows.append(row)
            new_counts.append(new)
    if not rows:
        raise ValueError("no non-empty documents to evaluate")
    nll = 0.0
    tokens = 0
    for per_token, new in zip(scorer.token_nll(rows), new_counts):
        nll += float(per_token[-new:].sum())
        tokens += new
    return {
        "documents": documents,
        "tokens": tokens,
        "bytes": total_bytes,
        "loss": nll / tokens,
        "perplexity": math.exp(nll / tokens),
        "bits_per_byte": nll / math.log(2) / total_bytes,
    }


def unigram_bits_per_byte(train_token_counts: np.ndarray, texts: Iterable[str], encode, eos: int) -> float:
    """A baseline a trained model must beat: each token's probability is its (add-one smoothed) frequency
    in the training data, scored with exactly the same targets and bytes as ``evaluate_documents``."""
    counts = train_token_counts.astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    nll, total_bytes = 0.0, 0
    for text in texts:
        if not text:
            continue
        ids = np.asarray([*encode(text), eos])
        nll -= float(logp[ids].sum())
        total_bytes += len(text.encode("utf-8"))
    return nll / math.log(2) / total_bytes
