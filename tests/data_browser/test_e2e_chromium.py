"""End to end in a real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright)."""

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from data_browser.app import create_app
from data_browser.config import BrowserConfig
from tests.requirements import require_module, require_path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

require_path(CHROMIUM, "Debian chromium (make test installs it with apt-get: make chromium)")
require_module("playwright.sync_api", "playwright (the dev extra)")


@pytest.fixture(scope="module")
def server(lab):
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        create_app(BrowserConfig(roots=[lab["prefix"]])), host="127.0.0.1", port=port, log_level="warning"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser():
    """One Playwright session per module: its sync API runs an event loop on this thread while open,
    so a second ``sync_playwright()`` beside it would fail ("Sync API inside the asyncio loop")."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def page(browser, server):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    yield page
    page.close()


def shot(page, name):
    """Screenshots for docs/images are refreshed with UPDATE_SCREENSHOTS=1 (so test runs leave git clean)."""
    png = page.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000  # a real, non-blank page image
    if os.environ.get("UPDATE_SCREENSHOTS"):
        IMAGES.mkdir(parents=True, exist_ok=True)
        (IMAGES / f"browser_{name}.png").write_bytes(png)


def test_experiment_page_shows_dag_with_all_steps_successful(page, server):
    page.goto(server + "/")
    page.click("a.experiment")
    nodes = page.locator("svg.dag g.node")
    assert nodes.count() == 2
    assert {nodes.nth(i).get_attribute("data-state") for i in range(2)} == {"SUCCESS"}
    assert page.locator("#steps").inner_text().count("SUCCESS") == 2
    shot(page, "experiment")


def test_records_page_forward_and_search(page, server, lab):
    page.goto(server + "/")
    page.click(f"header a:text('{lab['prefix']}')")
    page.click("text=documents/")
    page.click("a:text-matches('^raw-')")
    page.click("text=docs.jsonl")  # first match: docs.jsonl
    assert "Records 0–99" in page.locator("#summary").inner_text()
    page.click("#next")
    assert "Records 100–199" in page.locator("#summary").inner_text()
    assert page.locator("#rec-100").count() == 1
    shot(page, "records")
    page.fill("#search", "record number 42 ")
    page.press("#search", "Enter")
    page.wait_for_selector("#rec-42")
    assert "1 match(es)" in page.locator("#summary").inner_text()


def test_side_by_side_from_the_records_page_by_id_then_by_index(page, server, lab):
    from urllib.parse import quote

    page.goto(f"{server}/records?path={quote(lab['raw'] + '/docs.jsonl', safe='')}")
    page.click("a.compare-with:text('deduped.jsonl')")
    assert "aligned by id" in page.locator("#heading").inner_text()
    assert page.locator("p.missing").count() == 34  # doc-0, doc-3, ... were removed by the dedupe
    assert "doc-1" in page.locator("div.record.right").first.inner_text()
    shot(page, "compare")
    page.click("#realign")
    assert "aligned by record index" in page.locator("#heading").inner_text()
    assert page.locator("p.missing").count() == 0
    assert "doc-1" in page.locator("div.record.right").first.inner_text()  # #0 of deduped beside doc-0
    page.goto(f"{server}/records?path={quote(lab['raw'] + '/docs.jsonl', safe='')}")  # its form takes any path
    page.fill("#compare-right", lab["raw"] + "/texts.jsonl")
    page.press("#compare-right", "Enter")
    page.wait_for_selector("#heading")
    assert "aligned by record index" in page.locator("#heading").inner_text()  # texts.jsonl has no ids
    assert page.locator("div.record.right").count() == 5


def test_training_page_draws_charts(page, server, lab):
    from urllib.parse import quote

    page.goto(f"{server}/training?path={quote(lab['train'], safe='')}")
    page.wait_for_selector("div.chart canvas")
    metrics = {
        page.locator("div.chart").nth(i).get_attribute("data-metric") for i in range(page.locator("div.chart").count())
    }
    assert {"loss", "lr", "tokens_per_s", "eval/stories/bpb"} <= metrics
    acc = page.locator("#results tr[data-name='arith_mc'][data-metric='acc'] td.value")
    assert acc.inner_text() == "0.8100"
    acc.scroll_into_view_if_needed()
    shot(page, "results")
    shot(page, "training")


@pytest.mark.slow
def test_quickstart_experiment_page_shows_every_step_successful(quickstart_run, browser):
    """The real thing: the quickstart's outputs, its experiment page, its training curves."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(
        uvicorn.Config(
            create_app(BrowserConfig(roots=[quickstart_run["prefix"]])),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.05)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/")
        page.click("a.experiment:text-matches('^quickstart-')")
        nodes = page.locator("svg.dag g.node")
        assert nodes.count() == 23
        assert {nodes.nth(i).get_attribute("data-state") for i in range(23)} == {"SUCCESS"}
        shot(page, "quickstart_experiment")
        page.click("tr[id^='step-checkpoints'] a:text('metrics')")
        page.wait_for_selector("div.chart canvas")
        assert page.locator("div.chart[data-metric='train/loss']").count() == 1
        page.close()
    finally:
        srv.should_exit = True
        thread.join(10)
