"""The HTML-to-text extractors the extract step can use, behind one signature: ``(html, config) -> text``.

- ``trafilatura`` (the default): its main-content tree (``bare_extraction``) written out here as plain
  text: every heading, paragraph, list item, quote and code block on its own line(s), a table row's cells
  on one line separated by tabs, and nothing the page did not contain (trafilatura's own text output adds
  ``-`` bullets and Markdown table rules). With ``markdown`` on: trafilatura's Markdown output.
- ``resiliparse`` (what Marin and DCLM use; 8-12x faster, lower F1 on real pages): ``extract_plain_text``
  with main-content heuristics. With ``markdown`` on, its ``minimal_html`` output (headings, paragraphs,
  lists, ``<pre>``) is turned into Markdown here: ``# Heading``, ``- item`` / ``1. item``, fenced code.

Both return "" when they find no text. Which is the default, and why, is measured on real pages in
docs/data_quality.md (``benchmarks/extraction_bench.py``).
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
        list_bullets=config.markdown,
        noscript=False,
    )
    if config.markdown:
        return minimal_html_to_markdown(text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def trafilatura_extract(html: str, config: ExtractorConfig) -> str:
    import trafilatura

    options = dict(
        include_comments=config.comments,
        include_tables=True,
        include_links=False,
        include_images=False,
        deduplicate=False,
        fast=config.fast,
    )
    if config.markdown:
        text = trafilatura.extract(html, output_format="markdown", include_formatting=True, **options)
        return (text or "").strip()
    document = trafilatura.bare_extraction(html, include_formatting=False, with_metadata=False, **options)
    if document is None:
        return ""
    lines: list[str] = []
    for tree in (document.body, document.commentsbody if config.comments else None):
        if tree is not None:
            _plain_lines(tree, lines)
    return "\n".join(lines)


_TEXT_BLOCKS = frozenset({"head", "p", "list", "item", "table", "row", "cell", "quote", "code", "div"})


def _inline_text(element) -> str:
    """An element's text with its children's (a ``<lb/>`` or a block child is a line break)."""
    parts = [element.text or ""]
    for child in element:
        if child.tag == "lb":
            parts.append("\n")
        elif child.tag in _TEXT_BLOCKS:
            parts += ["\n", _inline_text(child), "\n"]
        else:
            parts.append(_inline_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _add_lines(text: str, lines: list[str]) -> None:
    for line in text.split("\n"):
        if line := " ".join(line.split()):
            lines.append(line)


def _plain_lines(element, lines: list[str]) -> None:
    """Plain text of a trafilatura tree, block by block: no bullets, no table rules, code verbatim."""
    if element.tag == "row":
        if any(child.tag in _TEXT_BLOCKS for cell in element for child in cell):
            for cell in element:  # a layout table: cells holding paragraphs are blocks, not one line
                _plain_lines(cell, lines)
        else:
            cells = [" ".join(_inline_text(cell).split()) for cell in element if cell.tag == "cell"]
            if row := "\t".join(cell for cell in cells if cell):
                lines.append(row)
    elif not any(child.tag in _TEXT_BLOCKS for child in element):
        if element.tag != "code":
            _add_lines(_inline_text(element), lines)
        elif code := _inline_text(element).strip("\n"):
            lines.append(code)
    else:
        pending = [element.text or ""]
        for child in element:
            if child.tag in _TEXT_BLOCKS:
                _add_lines("".join(pending), lines)
                _plain_lines(child, lines)
                pending = [child.tail or ""]
            else:
                pending += ["\n" if child.tag == "lb" else _inline_text(child), child.tail or ""]
        _add_lines("".join(pending), lines)


EXTRACTORS: dict[str, Callable[[str, ExtractorConfig], str]] = {
    "trafilatura": trafilatura_extract,
    "resiliparse": resiliparse_extract,
}


def extractor_version(name: str) -> str:
    """The installed version of an extractor's package (recorded in the step's summary)."""
    from importlib.metadata import version

    return version(name)


def extract_text(html: str, config: ExtractorConfig) -> str:
    return EXTRACTORS[config.name](html, config)
