"""The HTML-to-text extractors the extract step can use, behind one signature: ``(html, config) -> text``.

- ``resiliparse`` (what Marin and DCLM use): ``extract_plain_text`` with main-content heuristics. With
  ``markdown`` on, its ``minimal_html`` output (headings, paragraphs, lists, ``<pre>``) is turned into
  Markdown here: ``# Heading``, ``- item`` / ``1. item``, fenced code blocks.
- ``trafilatura``: ``extract(..., output_format="markdown")``; tables come out as Markdown rows.

Both return "" when they find no text. Which is the default, and why, is measured in docs/extract.md
(``benchmarks/web_data_bench.py``).
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Callable

from marin.extract.config import ExtractorConfig

_BLOCK = re.compile(r"<(h[1-6]|p|pre|ul|ol)>(.*?)</\1>", re.DOTALL)
_ITEM = re.compile(r"<li>(.*?)</li>", re.DOTALL)
_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
_BLANK_LINES = re.compile(r"\n{3,}")


def _plain(fragment: str) -> str:
    return html_lib.unescape(_TAG.sub("", fragment))


def _between(fragment: str) -> str:
    """Text between block tags: table rows (cells separated by tabs) become Markdown rows."""
    lines = []
    for line in _plain(fragment).strip().split("\n"):
        cells = [c.strip() for c in line.split("\t") if c.strip()]
        lines.append("| " + " | ".join(cells) + " |" if "\t" in line and cells else line)
    return "\n".join(lines).strip()


def minimal_html_to_markdown(text: str) -> str:
    """Markdown from resiliparse's ``minimal_html`` output, blocks separated by blank lines."""
    out, pos = [], 0
    for m in _BLOCK.finditer(text):
        out.append(_between(text[pos : m.start()]))
        tag, body = m.group(1), m.group(2)
        if tag.startswith("h"):
            out.append("#" * int(tag[1]) + " " + " ".join(_plain(body).split()))
        elif tag == "pre":
            out.append("```\n" + _plain(body).strip("\n") + "\n```")
        elif tag in ("ul", "ol"):
            items = [" ".join(_plain(i).split()) for i in _ITEM.findall(body)]
            out.append("\n".join(f"{n}. {i}" if tag == "ol" else f"- {i}" for n, i in enumerate(items, 1)))
        else:
            out.append(_plain(body).strip())
        pos = m.end()
    out.append(_between(text[pos:]))
    return "\n\n".join(part for part in out if part)


def resiliparse_extract(html: str, config: ExtractorConfig) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    text = extract_plain_text(
        html,
        preserve_formatting="minimal_html" if config.markdown else True,
        main_content=config.main_content,
        comments=config.comments,
        links=False,
        alt_texts=False,
        list_bullets=True,
        noscript=False,
    )
    if config.markdown:
        return minimal_html_to_markdown(text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def trafilatura_extract(html: str, config: ExtractorConfig) -> str:
    import trafilatura

    text = trafilatura.extract(
        html,
        output_format="markdown" if config.markdown else "txt",
        include_formatting=config.markdown,
        include_comments=config.comments,
        include_tables=True,
        include_links=False,
        include_images=False,
        deduplicate=False,
        fast=config.fast,
    )
    return (text or "").strip()


EXTRACTORS: dict[str, Callable[[str, ExtractorConfig], str]] = {
    "resiliparse": resiliparse_extract,
    "trafilatura": trafilatura_extract,
}


def extractor_version(name: str) -> str:
    """The installed version of an extractor's package (recorded in the step's summary)."""
    from importlib.metadata import version

    return version(name)


def extract_text(html: str, config: ExtractorConfig) -> str:
    return EXTRACTORS[config.name](html, config)
