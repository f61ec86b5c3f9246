"""Raw web pages for the bundled corpus: HTML around a known main text, so extraction can be measured.

Each page is built as blocks of main text (a heading, paragraphs, lists, tables, code) wrapped in one of
four layouts (HTML5 landmarks, ``div`` soup with CMS class names, an old table layout, a bare page), with
boilerplate around it: navigation, a cookie banner, a sidebar, share buttons, a comment section, a
footer, inline scripts and styles. The page's main text and its boilerplate text are both recorded, so an
extractor's output can be scored word by word::

    page = make_page(rng, domain="stories", kind="article", index=7)
    page.html_bytes      # what a crawler fetched (charset as declared in the headers, or not)
    page.truth["main_text"], page.truth["boilerplate_text"]

Kinds, with the share of pages they get (``KIND_WEIGHTS``):

- ``article``: a domain document (a story, an arithmetic worksheet) as the main text: high quality;
- ``spam``, ``keywords``, ``machine``: low quality (advertising, keyword lists, word salad);
- ``foreign``: an article in German, French, Spanish or Italian (``marin.corpus.languages``);
- broken pages: ``truncated_head`` (the download stops before the body: nothing to extract),
  ``truncated_tail`` (stops in the footer: the article is all there), ``wrong_charset`` (UTF-8 bytes
  declared as ISO-8859-1), ``non_utf8`` (Windows-1252 bytes declared as UTF-8), ``binary`` (an image
  served as text/html) and ``script_only`` (a JavaScript app shell with no text).

``truth["expect"]`` is ``"text"`` where the main text can be recovered and ``"skip"`` where a correct
extractor must report the page as skipped (truncated head, binary, script only).
"""

from __future__ import annotations

import dataclasses
import html
import random
import uuid

from marin.corpus.domains import ANIMALS, NAMES, PLACES, THINGS
from marin.corpus.languages import LANGUAGES, document

KIND_WEIGHTS = {
    "article": 0.60,
    "spam": 0.07,
    "keywords": 0.07,
    "machine": 0.07,
    "foreign": 0.07,
    "truncated_head": 0.02,
    "truncated_tail": 0.02,
    "wrong_charset": 0.02,
    "non_utf8": 0.02,
    "binary": 0.02,
    "script_only": 0.02,
}
LOW_QUALITY = ("spam", "keywords", "machine")
SKIP_KINDS = ("truncated_head", "binary", "script_only")
FOREIGN = tuple(lang for lang in LANGUAGES if lang != "en")

_SITES = ["The Story Garden", "Numbers Daily", "Kidlit Hub", "Bedtime Tales Online", "Sum Fun Zone", "Moonbeam Reads"]
_NAV = ["Home", "About us", "Contact", "Blog", "Shop", "Subscribe", "Login", "Register", "Archive", "Forum"]
_SIDEBAR = ["Trending now", "Popular posts", "Editor picks", "Sponsored content", "Latest updates"]
_SIDE_LINKS = [
    "Top picks of the month",
    "Why subscribers love our newsletter",
    "Win a voucher in our giveaway",
    "Frequently asked questions",
    "Meet our editorial team",
    "Download our mobile app today",
    "Advertise with us",
    "Careers at our company",
]
_COMMENTS = [
    "Great post, thanks for sharing!",
    "First!!",
    "Check out my website for more amazing content.",
    "I disagree with this, honestly.",
    "Bookmarked, will come back later.",
    "Who else is reading this in 2024?",
    "Nice, very informative article.",
    "Can you post more like this please?",
]
_USERS = ["reader42", "anonymous", "jdoe_88", "webfan", "guest", "mommy_blogger", "xXgamerXx"]
_SPAM = [
    "BUY cheap {p} now!!! Best price guaranteed, only ${n}.99 today.",
    "Click here to win a FREE {p}!!!",
    "Limited offer: {p} at {n}0% discount, act now before it is too late!!!",
    "Top rated {p} online, free shipping worldwide, order now!!!",
    "Make ${n}000 per week from home, no experience needed, click the link!!!",
    "Hot singles and cheap {p} in your area, visit our partner site!!!",
]
_PRODUCTS = [
    "watches",
    "pills",
    "sneakers",
    "phones",
    "handbags",
    "sunglasses",
    "crypto coins",
    "loans",
    "casino chips",
]
_KEYWORDS = [
    "cheap",
    "best",
    "buy",
    "online",
    "sale",
    "discount",
    "free",
    "deals",
    "review",
    "price",
    "top",
    "2024",
    "near me",
    "coupon",
    "outlet",
    "wholesale",
    "shipping",
    "store",
]
_TITLES = {
    "stories": ["A Story for Bedtime", "Story Time", "A Tale from the Farm", "Our Story of the Week", "A Little Story"],
    "arithmetic": ["Practice with Numbers", "Maths Corner", "Counting and Sums", "Number Fun for Everyone"],
}
_FOREIGN_TITLES = {
    "de": "Eine kleine Geschichte",
    "fr": "Une petite histoire",
    "es": "Una pequeña historia",
    "it": "Una piccola storia",
}
_SCRIPT = (
    "window.dataLayer = window.dataLayer || []; function gtag(){dataLayer.push(arguments);} "
    "gtag('config', 'UA-{n}'); var adSlots = document.querySelectorAll('.ad-slot');"
)
_STYLE = "body { font-family: sans-serif; margin: 0 } .sidebar { float: right; width: 30% } .ad-slot { height: 90px }"


@dataclasses.dataclass(frozen=True)
class Page:
    html_bytes: bytes
    content_type: str
    """The HTTP Content-Type header sent with the page (its charset may be wrong on purpose)."""
    truth: dict
    """id, url, domain, kind, quality, lang, expect, main_text, boilerplate_text."""


def page_id(seed: int, domain: str, index: int) -> str:
    """The WARC-Record-ID of a page (without angle brackets): a UUID derived from seed, domain and index."""
    return f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'marin-corpus/{seed}/web/{domain}/{index}')}"


# -- main text as blocks ------------------------------------------------------------------------------


def _article_blocks(domain: str, text: str, rng: random.Random) -> list[tuple]:
    """A domain document as blocks: ("h1"|"h2"|"p", text), ("ul"|"ol", [items]), ("table", rows), ("pre", code)."""
    blocks: list[tuple] = [("h1", rng.choice(_TITLES[domain]))]
    for part in text.split("\n\n"):
        lines = part.split("\n")
        if lines[0].startswith("Worksheet"):
            blocks.append(("h2", lines[0]))
            if rng.random() < 0.5:
                blocks.append((rng.choice(["ul", "ol"]), lines[1:]))
            else:
                blocks.append(("table", [line.rsplit(" = ", 1) for line in lines[1:]]))
        elif lines[0].startswith("def "):
            blocks.append(("pre", part))
        elif lines[0].startswith("print(") and blocks[-1][0] == "pre":  # a program's blank line, not a new block
            blocks[-1] = ("pre", f"{blocks[-1][1]}\n\n{part}")
        else:
            blocks.append(("p", part))
    return blocks


def _low_quality_blocks(kind: str, rng: random.Random) -> list[tuple]:
    if kind == "spam":
        lines = [
            rng.choice(_SPAM).format(p=rng.choice(_PRODUCTS), n=rng.randint(1, 9)) for _ in range(rng.randint(6, 12))
        ]
        return [("h1", f"BEST {rng.choice(_PRODUCTS).upper()} DEALS!!!")] + [("p", line) for line in lines]
    if kind == "keywords":
        product = rng.choice(_PRODUCTS)
        phrases = [f"{rng.choice(_KEYWORDS)} {product} {rng.choice(_KEYWORDS)}" for _ in range(rng.randint(40, 80))]
        return [("h1", f"{product} {product} {product}"), ("p", ", ".join(phrases))]
    vocab = NAMES + ANIMALS + PLACES + THINGS + ["the", "of", "and", "very", "is", "with", "quickly", "seven"]
    paras = [" ".join(rng.choice(vocab) for _ in range(rng.randint(30, 60))) for _ in range(rng.randint(3, 5))]
    return [("h1", " ".join(rng.choice(vocab) for _ in range(4)))] + [("p", p) for p in paras]


def _foreign_blocks(lang: str, rng: random.Random) -> list[tuple]:
    return [("h1", _FOREIGN_TITLES[lang])] + [("p", p) for p in document(lang, rng).split("\n\n")]


def blocks_text(blocks: list[tuple]) -> str:
    """The plain main text of blocks: one paragraph per block, list items and table rows one per line."""
    out = []
    for tag, body in blocks:
        if tag in ("ul", "ol"):
            out.append("\n".join(body))
        elif tag == "table":
            out.append("\n".join(" = ".join(row) for row in body))
        else:
            out.append(body)
    return "\n\n".join(out)


def _render_blocks(blocks: list[tuple]) -> str:
    e = html.escape
    parts = []
    for tag, body in blocks:
        if tag in ("ul", "ol"):
            parts.append(f"<{tag}>" + "".join(f"<li>{e(item)}</li>" for item in body) + f"</{tag}>")
        elif tag == "table":
            rows = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in body)
            parts.append(f'<table class="worksheet"><tbody>{rows}</tbody></table>')
        elif tag == "pre":
            parts.append(f'<pre><code class="language-python">{e(body)}</code></pre>')
        else:
            parts.append(f"<{tag}>{e(body)}</{tag}>")
    return "\n".join(parts)


# -- boilerplate and layouts --------------------------------------------------------------------------


def _boilerplate(rng: random.Random, site: str) -> dict[str, tuple[str, str]]:
    """Each boilerplate part as (html, visible text)."""
    e = html.escape
    nav = rng.sample(_NAV, rng.randint(4, 7))
    links = rng.sample(_SIDE_LINKS, rng.randint(3, 5))
    heading = rng.choice(_SIDEBAR)
    comments = [(rng.choice(_USERS), rng.choice(_COMMENTS)) for _ in range(rng.randint(0, 4))]
    year = rng.randint(2009, 2024)
    cookie = "We use cookies to personalise content and ads. Accept all cookies or manage your preferences."
    footer = f"Copyright {year} {site}. All rights reserved. Privacy policy. Terms of use. Sitemap."
    share = "Share on Facebook Tweet this Pin it Email a friend"
    parts = {
        "nav": (
            '<ul class="menu">'
            + "".join(f'<li><a href="/{e(n.lower().replace(" ", "-"))}">{e(n)}</a></li>' for n in nav)
            + "</ul>",
            " ".join(nav),
        ),
        "cookie": (
            f'<div id="cookie-banner" class="cookie-consent"><p>{cookie}</p><button>Accept</button></div>',
            cookie + " Accept",
        ),
        "sidebar": (
            f"<h3>{e(heading)}</h3><ul>"
            + "".join(f'<li><a href="/p/{i}">{e(t)}</a></li>' for i, t in enumerate(links))
            + "</ul>",
            " ".join([heading, *links]),
        ),
        "share": (
            '<div class="share-buttons">'
            + "".join(f'<a href="#">{s}</a> ' for s in ("Share on Facebook", "Tweet this", "Pin it", "Email a friend"))
            + "</div>",
            share,
        ),
        "comments": (
            ""
            if not comments
            else f"<h3>{len(comments)} Comments</h3>"
            + "".join(
                f'<div class="comment"><span class="author">{e(u)}</span> says:<p>{e(c)}</p><a href="#">Reply</a></div>'
                for u, c in comments
            ),
            " ".join([f"{len(comments)} Comments", *(f"{u} says: {c} Reply" for u, c in comments)]),
        ),
        "footer": (f"<p>{e(footer)}</p>", footer),
        "ad": ('<div class="ad-slot">Advertisement</div>', "Advertisement"),
    }
    return parts


def _layout(
    rng: random.Random, site: str, title: str, main: str, bp: dict, lang: str, charset: str, script: str
) -> tuple[str, str, str]:
    """(head, body before the footer, footer and end) of a page; the main text sits in the middle part."""
    head = (
        f'<!DOCTYPE html>\n<html lang="{lang}"><head><meta charset="{charset}">'
        f"<title>{html.escape(title)} | {html.escape(site)}</title>"
        f"<style>{_STYLE}</style><script>{script}</script></head>\n"
    )
    style = rng.randrange(4)
    if style == 0:  # HTML5 landmarks
        body = (
            f'<body>{bp["cookie"][0]}<header><a class="logo" href="/">{html.escape(site)}</a>'
            f"<nav>{bp['nav'][0]}</nav></header>\n<main><article>{main}</article>{bp['share'][0]}"
            f'<section class="comments">{bp["comments"][0]}</section></main>\n'
            f'<aside class="sidebar">{bp["sidebar"][0]}{bp["ad"][0]}</aside>\n'
        )
        tail = f"<footer>{bp['footer'][0]}</footer><script>{script}</script></body></html>\n"
    elif style == 1:  # div soup with CMS class names
        body = (
            f'<body><div class="topbar">{bp["nav"][0]}</div>{bp["cookie"][0]}<div id="wrapper">'
            f'<div class="content"><div class="post"><div class="entry-content">{main}</div></div>'
            f'{bp["share"][0]}<div id="comments">{bp["comments"][0]}</div></div>\n'
            f'<div class="sidebar widget-area">{bp["ad"][0]}{bp["sidebar"][0]}</div></div>\n'
        )
        tail = f'<div class="footer">{bp["footer"][0]}</div><script>{script}</script></body></html>\n'
    elif style == 2:  # old table layout
        body = (
            f'<body bgcolor="#ffffff"><table width="100%"><tr><td colspan="2"><b>{html.escape(site)}</b>'
            f'{bp["nav"][0]}</td></tr>\n<tr><td width="20%" valign="top" class="nav">{bp["sidebar"][0]}'
            f'{bp["ad"][0]}</td><td valign="top">{main}{bp["share"][0]}{bp["comments"][0]}</td></tr>\n'
        )
        tail = f'<tr><td colspan="2">{bp["footer"][0]}</td></tr></table>{bp["cookie"][0]}</body></html>\n'
    else:  # bare page
        body = f"<body>{bp['nav'][0]}\n{main}\n{bp['comments'][0]}<hr>\n"
        tail = f'<p class="footer"><small>{bp["footer"][0]}</small></p></body></html>\n'
    return head, body, tail


def _used(style_html: str, bp: dict) -> str:
    """The visible boilerplate text that actually appears in ``style_html``."""
    return " ".join(text for part, text in bp.values() if part and part in style_html)


# -- pages --------------------------------------------------------------------------------------------


def make_page(rng: random.Random, *, seed: int, domain: str, kind: str, index: int, make_doc) -> Page:
    """One page of ``kind`` (see the module docstring); ``make_doc(rng)`` writes the domain's documents."""
    site = rng.choice(_SITES)
    lang = "en"
    if kind in ("foreign", "wrong_charset", "non_utf8"):
        lang = rng.choice(FOREIGN)
        blocks = _foreign_blocks(lang, rng)
    elif kind in LOW_QUALITY:
        blocks = _low_quality_blocks(kind, rng)
    else:
        blocks = _article_blocks(domain, make_doc(rng), rng)
    pid = page_id(seed, domain, index)
    url = f"https://{site.lower().replace(' ', '')}.example/{domain}/{index:06d}.html"
    bp = _boilerplate(rng, site)
    script = _SCRIPT.replace("{n}", str(rng.randint(10000, 99999)))
    declared = "iso-8859-1" if kind == "wrong_charset" else "utf-8"
    head, body, tail = _layout(rng, site, blocks[0][1], _render_blocks(blocks), bp, lang, declared, script)
    if kind == "script_only":
        body, tail = f'<body><div id="app"></div><noscript></noscript><script>{script}</script>', "</body></html>"
        blocks = []
    main_text = blocks_text(blocks)
    boilerplate = " ".join([site, _used(head + body + tail, bp), script, _STYLE]) if kind != "script_only" else script
    document_html = head + body + tail
    encoding = "cp1252" if kind == "non_utf8" else "utf-8"
    data = document_html.encode(encoding)
    if kind == "truncated_head":
        data = data[: rng.randint(len(head) // 3, len(head) - 1)]
        main_text, boilerplate = "", script
    elif kind == "truncated_tail":
        data = data[: len((head + body).encode(encoding)) + rng.randint(0, len(tail) // 2)]
    elif kind == "binary":
        data = b"\x89PNG\r\n\x1a\n" + bytes(rng.getrandbits(8) for _ in range(rng.randint(2000, 6000)))
        main_text, boilerplate = "", ""
    quality = "low" if kind in LOW_QUALITY else (None if kind in SKIP_KINDS else "high")
    truth = {
        "id": pid,
        "url": url,
        "domain": domain,
        "kind": kind,
        "quality": quality,
        "lang": None if kind in SKIP_KINDS else lang,
        "expect": "skip" if kind in SKIP_KINDS else "text",
        "main_text": main_text,
        "boilerplate_text": boilerplate,
    }
    return Page(html_bytes=data, content_type=f"text/html; charset={declared}", truth=truth)


def page_kinds(rng: random.Random, n: int) -> list[str]:
    """``n`` kinds in the proportions of ``KIND_WEIGHTS`` (rounded; the rest are articles), shuffled."""
    kinds = []
    for kind, weight in KIND_WEIGHTS.items():
        if kind != "article":
            kinds += [kind] * max(1 if n >= 50 else 0, round(n * weight))
    kinds = kinds[:n]
    kinds += ["article"] * (n - len(kinds))
    rng.shuffle(kinds)
    return kinds
