"""The web part of the bundled corpus: crawl-like WARC files, a reference set and language samples.

Written by ``generate_corpus`` beside the plain-text splits (each from its own random stream, so the
existing files keep their bytes)::

    web/<domain>/shard-0000{0,1}.warc.gz       raw pages (``marin.corpus.web``) as WARC response records
    quality/reference/<domain>.jsonl.gz        high-quality reference text: the DCLM recipe's positives
    quality/web_sample/<domain>.jsonl.gz       random web text (other pages, already extracted): its negatives
    langid/<lang>.jsonl.gz                     {"id", "text", "lang"} samples for a language classifier
    ground_truth/web_pages.jsonl.gz            per page: id, url, kind, quality, lang, expect, main_text, ...
"""

from __future__ import annotations

import datetime
import random

from marin.corpus.languages import LANGUAGES, document
from marin.corpus.web import _SITES, SKIP_KINDS, _article_blocks, blocks_text, make_page, page_kinds
from marin.storage import join
from marin.storage.records import write_records
from marin.storage.warc import WarcResponse, write_warc

_EPOCH = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)


def write_web_pages(
    root: str, seed: int, domain: str, make_doc, num_pages: int, num_shards: int
) -> tuple[dict[str, int], list[dict]]:
    """WARC shards of ``num_pages`` pages of ``domain``; returns ({rel path: pages}, ground-truth rows)."""
    rng = random.Random(f"{seed}-web-{domain}")
    kinds = page_kinds(rng, num_pages)
    pages = [
        make_page(rng, seed=seed, domain=domain, kind=kind, index=i, make_doc=make_doc) for i, kind in enumerate(kinds)
    ]
    files, per = {}, -(-num_pages // num_shards)
    for s in range(num_shards):
        rel = f"web/{domain}/shard-{s:05d}.warc.gz"
        chunk = pages[s * per : (s + 1) * per]
        files[rel] = write_warc(
            join(root, rel),
            [
                WarcResponse(
                    record_id=p.truth["id"],
                    url=p.truth["url"],
                    content_type=p.content_type,
                    date=(_EPOCH + datetime.timedelta(minutes=s * per + i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    payload=p.html_bytes,
                )
                for i, p in enumerate(chunk)
            ],
        )
    return files, [p.truth for p in pages]


def write_reference(root: str, seed: int, domain: str, make_doc, num_docs: int) -> dict[str, int]:
    """High-quality reference documents of ``domain``, in the plain text the extract step writes (title first)."""
    rng = random.Random(f"{seed}-reference-{domain}")
    docs = [
        {
            "id": f"reference-{domain}-{i:06d}",
            "text": blocks_text(_article_blocks(domain, make_doc(rng), rng)),
            "source": f"reference/{domain}",
        }
        for i in range(num_docs)
    ]
    rel = f"quality/reference/{domain}.jsonl.gz"
    return {rel: write_records(join(root, rel), docs)}


def write_web_sample(root: str, seed: int, domain: str, make_doc, num_docs: int) -> dict[str, int]:
    """Random web text: pages from another random stream, as an extractor would have left them (main text as
    plain text, sometimes with a site name above and a footer line below). The DCLM recipe's negatives; being
    other pages than ``web/``, a classifier trained on them is not scored on its own training documents."""
    rng = random.Random(f"{seed}-web-sample-{domain}")
    kinds = [k for k in page_kinds(rng, num_docs * 2) if k not in SKIP_KINDS][:num_docs]
    docs = []
    for i, kind in enumerate(kinds):
        page = make_page(rng, seed=seed, domain=domain, kind=kind, index=10_000_000 + i, make_doc=make_doc)
        text = page.truth["main_text"]
        if rng.random() < 0.3:
            text = f"{rng.choice(_SITES)}\n\n{text}"
        if rng.random() < 0.3:
            text = f"{text}\n\nCopyright {rng.randint(2009, 2024)}. All rights reserved."
        docs.append({"id": f"web-sample-{domain}-{i:06d}", "text": text, "source": f"web_sample/{domain}"})
    rel = f"quality/web_sample/{domain}.jsonl.gz"
    return {rel: write_records(join(root, rel), docs)}


def write_langid(root: str, seed: int, num_docs: int, english_docs) -> dict[str, int]:
    """Language samples; English mixes the templates with the corpus's own domains (``english_docs(rng)``)."""
    files = {}
    for lang in LANGUAGES:
        rng = random.Random(f"{seed}-langid-{lang}")
        docs = []
        for i in range(num_docs):
            text = english_docs(rng) if lang == "en" and i % 2 else document(lang, rng)
            docs.append({"id": f"langid-{lang}-{i:06d}", "text": text, "lang": lang})
        rel = f"langid/{lang}.jsonl.gz"
        files[rel] = write_records(join(root, rel), docs)
    return files
