"""HTML to text: the extract step between download and dedupe.

``extract_pages(ExtractConfig(...))`` reads WARC files, record files with an ``html`` field or plain
``.html`` files, decodes each page (the declared charset is checked against the bytes), extracts its main
text with trafilatura or resiliparse (plain text, a block per line; Markdown on request) and writes documents in
the format the dedupe step reads. Pages without text are written to ``skipped/`` with a reason.
See ``marin.extract.step`` for the layout and docs/data_quality.md for the extractor comparison on real pages.
"""

from marin.extract.config import ExtractConfig, ExtractorConfig
from marin.extract.extractors import EXTRACTORS, extract_text
from marin.extract.measure import word_scores
from marin.extract.pages import decode_html, read_pages
from marin.extract.step import SKIP_REASONS, extract_page, extract_pages

__all__ = [
    "EXTRACTORS",
    "SKIP_REASONS",
    "ExtractConfig",
    "ExtractorConfig",
    "decode_html",
    "extract_page",
    "extract_pages",
    "extract_text",
    "read_pages",
    "word_scores",
]
