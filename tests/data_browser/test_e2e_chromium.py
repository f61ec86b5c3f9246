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
from tests.data_browser.research_lab import write_rl_run
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
def rl_run(tmp_path_factory):
    """An RL run's files (its rollouts page), under a second root beside the lab's."""
    run = tmp_path_factory.mktemp("rl") / "checkpoints" / "nano-rl"
    write_rl_run(run)
    return str(run)


@pytest.fixture(scope="module")
def server(lab, rl_run):
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    roots = [lab["prefix"], str(Path(rl_run).parent)]
    config = uvicorn.Config(create_app(BrowserConfig(roots=roots)), host="127.0.0.1", port=port, log_level="warning")
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
    page.click("a.experiment:text-matches('^exp_browser-')")
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


def fits_the_viewport(page):
    """Nothing widens the page past the window (no horizontal scrolling of the page itself)."""
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_training_charts_put_loss_first_with_readable_axes(page, server, lab):
    from urllib.parse import quote

    page.goto(f"{server}/training?path={quote(lab['runs']['checkpoints/r-small'], safe='')}")
    page.wait_for_selector("div.chart canvas")
    order = page.eval_on_selector_all("div.chart", "els => els.map(e => e.dataset.metric)")
    assert order[:4] == ["train/loss", "eval/stories/bpb", "eval/stories/loss", "train/learning_rate"]
    axis = page.evaluate(
        """() => {
        const u = document.querySelector("div.chart[data-metric='throughput/tokens_per_s']").uplot, a = u.axes[1];
        u.ctx.font = a.font[0];
        const widths = a._values.map((v) => u.ctx.measureText(v).width / devicePixelRatio);
        return {labels: a._values, size: a._size, widest: Math.max(...widths)};
    }"""
    )
    assert axis["labels"] and all(v.endswith("k") for v in axis["labels"])  # 41k, not "41,000" cut to "1,000"
    assert axis["size"] > axis["widest"]
    assert page.evaluate("[12000, 1.2e6, 3.4e15, 3e-4, 2.5].map(Charts.si)") == ["12k", "1.2M", "3.4e15", "3e-4", "2.5"]
    assert fits_the_viewport(page)


def test_compare_runs_from_the_experiment_page(page, server, lab):
    from urllib.parse import quote

    page.goto(f"{server}/experiment?path={quote(lab['research_record'], safe='')}")
    for name in ("checkpoints/r-small", "checkpoints/r-wide", "checkpoints/r-bigbatch"):
        page.check(f"#compare-runs input[value='{lab['runs'][name]}']")
    page.select_option("#compare-runs select[name=x]", "tokens")
    page.click("#compare-runs button")
    page.wait_for_selector("#charts[data-drawn] canvas")
    assert "x=tokens" in page.url and page.url.count("step=") == 3  # the URL is the page: shareable
    legend = page.locator("#legend li.run")
    assert [legend.nth(i).inner_text().split("\n")[0].strip() for i in range(3)] == [
        "checkpoints/r-small model.hidden_dim=64, trainer.batch_size=8",
        "checkpoints/r-wide model.hidden_dim=128, trainer.batch_size=8",
        "checkpoints/r-bigbatch model.hidden_dim=64, trainer.batch_size=32",
    ]
    charts = page.eval_on_selector_all("div.chart", "els => els.map(e => [e.dataset.metric, e.uplot.series.length])")
    assert charts == [["train/loss", 4], ["eval/stories/bpb", 4]]  # x and one series per run
    assert fits_the_viewport(page)
    shot(page, "compare_runs")
    page.click("a.x-axis:text('flops')")
    page.wait_for_selector("#charts[data-drawn] canvas")
    assert "no throughput/total_flops" in page.locator("li.run:has-text('r-bigbatch') .note").inner_text()
    assert page.eval_on_selector("div.chart", "e => e.uplot.series.length") == 3  # r-bigbatch left out, said why


def test_leaderboard_sorts_by_column_and_compares_the_checked_runs(page, server, lab):
    page.goto(server + "/")
    page.click("header a:text('leaderboard')")
    board = page.locator("form.board").first
    runs = lambda: board.locator("tr.entry").evaluate_all("rows => rows.map(r => r.dataset.run)")  # noqa: E731
    assert runs() == ["checkpoints/r-target", "checkpoints/r-small", "checkpoints/r-wide"]
    assert board.locator("tr.entry").first.locator(".frontier").count() == 1
    board.locator("th:text-is('FLOPs')").click()
    assert runs() == ["checkpoints/r-small", "checkpoints/r-wide", "checkpoints/r-target"]
    assert fits_the_viewport(page)
    shot(page, "leaderboard")
    board.locator("tr[data-run='checkpoints/r-small'] input").check()
    board.locator("tr[data-run='checkpoints/r-target'] input").check()
    board.locator("button").click()
    page.wait_for_selector("#charts[data-drawn] canvas")
    assert "x=flops" in page.url and page.locator("#legend li.run").count() == 2


def test_fit_page_shows_the_ladder_and_the_prediction_against_the_actual(page, server, lab):
    import json
    from urllib.parse import quote

    from tests.data_browser.research_lab import ACTUAL

    predicted = json.loads(open(f"{lab['fit']}/fit.json").read())["prediction"]["loss"]  # the real writer's

    page.goto(f"{server}/browse?path={quote(lab['fit'], safe='')}")
    page.click("#fit-link")
    page.wait_for_selector("div.chart canvas")
    assert page.eval_on_selector_all("div.chart", "els => els.map(e => e.dataset.chart)") == [
        "isoflop", "params", "tokens", "loss"]  # fmt: skip
    isoflop = page.eval_on_selector("div.chart[data-chart='isoflop']", "e => e.uplot.series.map(s => s.label)")
    assert isoflop[1:3] == ["C=1e+12", "C=1e+12 fit"] and len(isoflop) == 9  # points and parabola per budget
    assert page.locator("#predicted").inner_text() == f"{predicted:.4f}"
    assert page.locator("#actual").inner_text() == f"{ACTUAL:.4f}"
    assert page.locator("#relative-error").inner_text() == f"{(ACTUAL - predicted) / ACTUAL * 100:+.2f}%"
    assert page.locator("img.plot").evaluate("img => img.complete && img.naturalWidth") > 100  # the step's own PNG
    assert fits_the_viewport(page)
    shot(page, "fit")


def test_a_200_step_dag_fits_the_page_and_zooms_within_its_box(page, server, lab):
    from urllib.parse import quote

    page.goto(f"{server}/experiment?path={quote(lab['wide_record'], safe='')}")
    nodes = page.locator("svg.dag g.node")
    assert nodes.count() == 200
    right = "Math.max(...[...document.querySelectorAll('svg.dag rect')].map(r => r.getBoundingClientRect().right))"
    assert fits_the_viewport(page) and page.evaluate(f"{right} <= document.documentElement.clientWidth")
    shot(page, "experiment_200")
    page.click("#dag-tools button[data-zoom='1']")
    assert page.locator("#dag-scale").inner_text() == "100%"
    assert fits_the_viewport(page)  # the DAG scrolls inside its box, the page does not
    assert page.evaluate("(d => d.scrollWidth > d.clientWidth)(document.getElementById('dag'))")
    last = nodes.nth(199)
    last.scroll_into_view_if_needed()
    box, width = last.bounding_box(), page.evaluate("window.innerWidth")
    assert 0 <= box["x"] and box["x"] + box["width"] <= width and last.is_visible()
    page.click("#dag-tools button[data-zoom='fit']")
    assert page.evaluate(f"{right} <= document.documentElement.clientWidth")


SPLIT_WORDS = r"""(root) => {
  // Words and numbers (text between spaces and path separators) drawn over more than one line. Data in <pre>
  // (configs, results) counts; text (records, web pages, chats, completions) wraps as text does.
  const split = [], walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("script, style, .record, pre.text, pre.chat")) continue;
    for (const m of node.data.matchAll(/[^\s\/_=,;:()\[\]·-]+/g)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
      const where = node.parentElement.tagName.toLowerCase();
      if (lines.size > 1) split.push(`${m[0]} in <${where}> "${node.data.slice(0, 80)}"`);
    }
  }
  return split;
}"""


def laid_out_whole(page):
    """The page fits its window and no word or number on it is split over two lines ("9 2 0 . 2 k"), with
    every ``<details>`` open (a step's config, a result's fields): what a reader can unfold counts too."""
    page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    assert fits_the_viewport(page), page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert page.eval_on_selector("main", SPLIT_WORDS) == []


@pytest.fixture(scope="module")
def phone(browser, server):
    """A 390 x 844 phone that honours the page's viewport (a page without one is laid out 980 px wide)."""
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    yield page
    page.close()


def test_every_page_fits_a_phone_without_splitting_words_or_numbers(phone, server, lab, rl_run):
    from urllib.parse import quote

    def visit(path, ready="main", name=None):
        phone.goto(server + path)
        phone.wait_for_selector(ready)
        assert phone.evaluate("window.innerWidth") == 390, "the page must declare a device-width viewport"
        laid_out_whole(phone)
        if name:
            shot(phone, name)

    runs = [lab["runs"][n] for n in ("checkpoints/r-small", "checkpoints/r-wide", "checkpoints/r-target")]
    visit(f"/training?path={quote(lab['runs']['checkpoints/r-small'], safe='')}", "div.chart canvas", "phone_training")
    visit(f"/training?path={quote(lab['train'], safe='')}", "#results")
    visit("/compare/runs?" + "&".join(f"step={quote(r, safe='')}" for r in runs), "#charts[data-drawn] canvas")
    visit("/leaderboard", "table.leaderboard", "phone_leaderboard")
    visit(f"/experiment?path={quote(lab['research_record'], safe='')}", "svg.dag")
    # the opened configs (issue 47: never squeezed into a column) each take their step card's width
    configs = "[...document.querySelectorAll('#steps pre')].map((p) => p.clientWidth / p.closest('tr').clientWidth)"
    assert all(share >= 0.9 for share in phone.evaluate(configs)), phone.evaluate(configs)
    visit(f"/experiment?path={quote(lab['record'], safe='')}", "svg.dag")
    visit(f"/fit?path={quote(lab['fit'], safe='')}", "div.chart canvas")
    visit("/")
    visit(f"/browse?path={quote(lab['raw'], safe='')}")
    visit(f"/records?path={quote(lab['raw'] + '/docs.jsonl', safe='')}", "#summary")
    left, right = (quote(f"{lab['raw']}/{name}", safe="") for name in ("docs.jsonl", "deduped.jsonl"))
    visit(f"/compare?left={left}&right={right}", "div.record.right")
    visit(f"/rollouts?path={quote(rl_run, safe='')}&iteration=2", "#rollouts")


STEP_ROWS = """() => [...document.querySelectorAll("#steps tr[id^='step-']")].map((row) => {
  // cells by position: the compare box, the step's name, its state, its duration, its output path and links
  const [pick, name, state, time, output] = [...row.children].map((td) => td.getBoundingClientRect());
  const r = row.getBoundingClientRect();
  // how much of the row its text covers: the area of every line of every text node shown (a closed config is not)
  let text = 0;
  const walker = document.createTreeWalker(row, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("details:not([open]) > :not(summary)")) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const line of range.getClientRects()) text += line.width * line.height;
  }
  return {id: row.id, height: r.height, width: r.width, right: r.right, covered: text / (r.width * r.height),
          output: output.width, outputTop: output.top, above: Math.max(name.bottom, state.bottom, time.bottom),
          tops: [pick.top, name.top, state.top, time.top, output.top]};
})"""


def test_a_phone_shows_each_step_as_a_card_with_its_path_across_it(phone, page, server, lab):
    """Issue 79: on a phone the step table squeezed the output path into a strip at the right of a row wider than
    the phone, every row ~200 px tall and mostly blank. There each step is a card: name, state and time on top,
    then its path and links across the card's width; a desktop keeps the table."""
    from urllib.parse import quote

    url = f"{server}/experiment?path={quote(lab['research_record'], safe='')}"
    phone.goto(url)
    phone.wait_for_selector("svg.dag")
    cards = phone.evaluate(STEP_ROWS)
    assert len(cards) == 9
    for card in cards:
        assert card["right"] <= 390, card  # the whole card on the screen, nothing to scroll sideways to
        assert card["output"] >= 0.9 * card["width"], card  # the path spans the card, not a strip beside it
        assert card["above"] <= card["outputTop"] + 1, card  # name, state and time first, then the path
        assert card["covered"] >= 0.3, card  # not mostly blank (a squeezed row's text covers a fifth of it)
    assert phone.locator("#steps th").first.is_hidden()  # no column headings over cards
    laid_out_whole(phone)

    page.goto(url)
    page.wait_for_selector("svg.dag")
    rows = page.evaluate(STEP_ROWS)
    assert page.locator("#steps th").first.is_visible()
    assert all(len({round(t) for t in row["tops"]}) == 1 for row in rows), rows  # one table row per step


def test_a_long_experiment_path_leaves_the_leaderboards_numbers_whole_on_a_desktop(page, server):
    page.goto(server + "/leaderboard")
    laid_out_whole(page)


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
        steps = len(quickstart_run["steps"])  # 33 since the preference (issue 37) and RL (issue 38) phases
        assert nodes.count() == steps
        assert {nodes.nth(i).get_attribute("data-state") for i in range(steps)} == {"SUCCESS"}
        shot(page, "quickstart_experiment")
        page.click("tr[id^='step-checkpoints'] a:text('metrics')")
        page.wait_for_selector("div.chart canvas")
        assert page.locator("div.chart[data-metric='train/loss']").count() == 1
        page.close()
    finally:
        srv.should_exit = True
        thread.join(10)
