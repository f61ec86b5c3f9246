"""The research loop's pages without a browser: compare runs, leaderboard, scaling fit, the training page's chart
order and its links, and a crawl showing that every link reachable from the index leads to a page."""

import json
import shutil
from html import unescape
from html.parser import HTMLParser
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from fastapi.testclient import TestClient

from data_browser import training
from data_browser.app import create_app
from data_browser.config import BrowserConfig
from data_browser.config_diff import differing_fields
from data_browser.runs import fill_by_step
from tests.data_browser.research_lab import ACTUAL, CALLER_FILE, NO_MINIMUM
from tests.scaling.ladder_store import FIT_V1


@pytest.fixture(scope="module")
def client(lab):
    return TestClient(create_app(BrowserConfig(roots=[lab["prefix"]])))


def get(client, route, **params):
    query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items())
    return client.get(f"{route}?{query}" if query else route, follow_redirects=False)


def compare(client, lab, names, x="step", api=True):
    steps = "&".join(f"step={quote(lab['runs'][n], safe='')}" for n in names)
    return client.get(f"{'/api' if api else ''}/compare/runs?{steps}&x={x}")


class Links(HTMLParser):
    """Every href and src of a page, and each compare form as submitted with all its boxes checked."""

    def __init__(self):
        super().__init__()
        self.hrefs, self.form = [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.hrefs += [v for k, v in attrs if k in ("href", "src") and v]
        if tag == "form" and a.get("action") == "/compare/runs":
            self.form = []
        elif self.form is not None and tag == "input" and a.get("name") == "step":
            self.form.append(a["value"])

    def handle_endtag(self, tag):
        if tag == "form" and self.form:
            self.hrefs.append("/compare/runs?" + "&".join(f"step={quote(v, safe='')}" for v in self.form))
        if tag == "form":
            self.form = None


# Files the fixture store damages or points outside the root on purpose: their links must be refused, not 200.
TRAPS = {"corrupt.jsonl.gz": 422, "corrupt.parquet": 422, "link_outside": 403}


def test_every_link_reachable_from_the_index_leads_to_a_page(client, lab):
    """A bounded crawl: same-site links, one per route and path (pages of one file differ only in offset)."""
    seen, queue, checked = set(), ["/"], 0
    while queue and checked < 400:
        url = queue.pop(0)
        r = client.get(url, follow_redirects=True)
        checked += 1
        trap = next((code for name, code in TRAPS.items() if name in unescape(url)), None)
        assert r.status_code == (trap or 200), f"{url} -> {r.status_code}: {r.text[:300]}"
        if trap or not r.headers["content-type"].startswith("text/html"):
            continue
        parser = Links()
        parser.feed(r.text)
        for href in map(unescape, parser.hrefs):
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or not parts.path:  # W&B, GitHub, #step-... anchors
                continue
            query = parse_qs(parts.query)
            key = (parts.path, tuple(sorted((k, tuple(v)) for k, v in query.items() if k not in ("offset", "q"))))
            if key not in seen:
                seen.add(key)
                queue.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    assert not queue and checked > 100, f"{checked} pages checked, {len(queue)} links left unchecked"
    routes = {path for path, _ in seen}
    assert {"/compare/runs", "/leaderboard", "/fit", "/fit/plot", "/training", "/experiment"} <= routes


def test_charts_come_in_order_of_importance(client, lab):
    keys = ["throughput/total_tokens", "eval/stories/bpb", "train/grad_norm", "zeta", "throughput/tokens_per_s",
            "train/learning_rate", "eval/stories/loss", "train/loss", "step"]  # fmt: skip
    assert training.chart_order(keys) == [
        "train/loss", "eval/stories/bpb", "eval/stories/loss", "train/learning_rate", "train/grad_norm",
        "throughput/tokens_per_s", "throughput/total_tokens", "zeta"]  # fmt: skip
    html = get(client, "/training", path=lab["train"]).text  # an old-style log: loss, lr, tokens_per_s
    order = json.loads(html.split('<script id="order" type="application/json">')[1].split("</script>")[0])
    assert order[:3] == ["loss", "eval/stories/bpb", "lr"]


def test_only_views_that_exist_are_linked(client, lab):
    html = get(client, "/experiment", path=lab["research_record"]).text
    fit_row = html.split(f'id="step-analysis/{lab["fit"].rsplit("/", 1)[1]}"')[1].split("</tr>")[0]
    assert "/training?path=" not in fit_row and f"/fit?path={quote(lab['fit'], safe='')}" in fit_row
    assert html.count('class="training"') == 8  # 4 runs (metrics) and their 4 evals (results)
    assert html.count('type="checkbox" name="step"') == 4  # only runs with curves can be compared
    listing = get(client, "/browse", path=lab["fit"]).text
    assert 'id="training-link"' not in listing and 'id="fit-link"' in listing
    wide = get(client, "/experiment", path=lab["wide_record"]).text
    assert wide.count("/browse?path=") == 11  # the source and chain 0 ran; the others have no output yet


def test_compare_labels_runs_by_the_config_fields_that_differ(client, lab):
    data = compare(client, lab, ["checkpoints/r-small", "checkpoints/r-wide", "checkpoints/r-bigbatch"]).json()
    labels = {r["name"]: r["fields"] for r in data["runs"]}
    assert labels == {
        "checkpoints/r-small": ["model.hidden_dim=64", "trainer.batch_size=8"],
        "checkpoints/r-wide": ["model.hidden_dim=128", "trainer.batch_size=8"],
        "checkpoints/r-bigbatch": ["model.hidden_dim=64", "trainer.batch_size=32"],
    }
    html = compare(client, lab, ["checkpoints/r-small", "checkpoints/r-wide"], api=False).text
    assert "model.hidden_dim=128" in html and "trainer.batch_size" not in html  # same batch size: not a difference
    assert differing_fields([{"a": {"b": 1}, "output_path": "/x"}, None, {"a": {"b": 2}, "output_path": "/y"}]) == [
        ["a.b=1"], [], ["a.b=2"]]  # fmt: skip


def test_compare_x_axes_use_logged_totals_else_config_and_never_invent_flops(client, lab):
    names = ["checkpoints/r-small", "checkpoints/r-bigbatch"]
    by_tokens = {r["name"]: r for r in compare(client, lab, names, "tokens").json()["runs"]}
    small, big = by_tokens["checkpoints/r-small"], by_tokens["checkpoints/r-bigbatch"]
    assert small["curves"]["train/loss"]["x"][:2] == [1024, 2048] and not small["notes"]  # logged: 8 x 128 a step
    assert big["curves"]["train/loss"]["x"][:2] == [4096, 8192]  # 32 x 128 from its config, as its note says
    assert big["notes"] == [
        "tokens = step × trainer.batch_size × model.seq_len (its log predates throughput/total_tokens)"
    ]
    assert small["curves"]["eval/stories/bpb"]["x"] == [25 * 1024, 50 * 1024]  # eval lines take their step's total
    by_flops = {r["name"]: r for r in compare(client, lab, names, "flops").json()["runs"]}
    assert by_flops["checkpoints/r-bigbatch"]["curves"] == {} and "no throughput/total_flops" in by_flops[
        "checkpoints/r-bigbatch"]["notes"][0]  # fmt: skip
    assert by_flops["checkpoints/r-small"]["curves"]["train/loss"]["x"][0] == 1024 * 6e5
    assert fill_by_step([10, 15, 20], [100, None, 200]) == [100, 150.0, 200]


def test_compare_survives_damaged_and_missing_runs(client, lab, tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "metrics.jsonl").write_text('{"step": 1, "train/loss": 2.0}\nnot json\n')
    (root / "a" / ".executor_info").write_text("{broken")
    (root / "b").mkdir()
    c = TestClient(create_app(BrowserConfig(roots=[str(root)])))
    r = c.get(f"/compare/runs?step={quote(str(root / 'a'), safe='')}&step={quote(str(root / 'b'), safe='')}")
    assert r.status_code == 200
    text = unescape(r.text)
    assert (
        "config unknown" in text
        and "1 line(s) without a JSON object" in text
        and f"no metrics.jsonl in {root}/b" in text
    )
    assert c.get(f"/compare/runs?step={quote(lab['secret'], safe='')}").status_code == 403


def test_compare_names_runs_that_do_not_exist_and_never_counts_them(client, lab):
    real = [lab["runs"]["checkpoints/r-small"], lab["runs"]["checkpoints/r-wide"]]
    ghost = f"{lab['prefix']}/checkpoints/r-never-ran-0000"
    query = "&".join(f"step={quote(p, safe='')}" for p in (real[0], ghost, real[1]))
    page, api = client.get(f"/compare/runs?{query}"), client.get(f"/api/compare/runs?{query}")
    assert page.status_code == api.status_code == 200
    assert [r["path"] for r in api.json()["runs"]] == real and api.json()["missing"] == [ghost]
    html = page.text.replace("<wbr>", "")
    assert "2 run(s) overlaid" in html and f"not found: {ghost}" in html
    alone = f"step={quote(ghost, safe='')}"
    page, api = client.get(f"/compare/runs?{alone}"), client.get(f"/api/compare/runs?{alone}")
    assert page.status_code == api.status_code == 404
    assert api.json() == {"error": f"not found: no such run: {ghost}"} and "run(s) overlaid" not in page.text
    assert ghost in page.text.replace("<wbr>", "")


def test_leaderboard_ranks_runs_per_heldout_fingerprint(client, lab):
    [section] = client.get("/api/leaderboard").json()["sections"]
    boards = {(b["heldout"], b["documents"]): b for b in section["boards"]}
    main = boards[("stories", 50)]["entries"]
    assert [(e["run"], e["bpb"], e["frontier"]) for e in main] == [
        ("checkpoints/r-target", ACTUAL, True),
        ("checkpoints/r-small", 1.31, True),
        ("checkpoints/r-wide", 1.35, False),  # more FLOPs than r-small for a worse bpb
    ]
    assert [e["run"] for e in boards[("stories", 40)]["entries"]] == ["checkpoints/r-bigbatch"]  # other documents
    html = client.get("/leaderboard").text
    assert (
        html.count('class="entry"') == 4
        and 'action="/compare/runs"' in html
        and CALLER_FILE in html.replace("<wbr>", "")
        and "<th>optimizer</th>" in html  # the column (empty here: these records name no optimizer kind)
    )


def test_fit_page_shows_laws_and_the_prediction_against_the_actual_loss(client, lab):
    """The page reads the fit.json the analysis step writes (research_lab runs the real writer): it used to refuse
    its ``laws.surface.objective`` string and drop the surface from the table."""
    written = json.loads(open(f"{lab['fit']}/fit.json").read())
    predicted, interval = written["prediction"]["loss"], written["prediction"]["interval"]
    view = get(client, "/api/fit", path=lab["fit"]).json()["fit"]
    fit = view["record"]
    assert view["errors"] == {} and fit == written and len(fit["budgets"]) == 4 and len(fit["runs"]) == 12
    assert view["actual"]["loss"] == ACTUAL and view["actual"]["relative_error"] == pytest.approx(
        (ACTUAL - predicted) / ACTUAL
    )
    html = unescape(get(client, "/fit", path=lab["fit"]).text)
    assert f'id="predicted">{predicted:.4f}<' in html and f'id="actual">{ACTUAL:.4f}<' in html
    assert f'id="relative-error">{(ACTUAL - predicted) / ACTUAL * 100:+.2f}%<' in html and "90% interval" in html
    assert f'id="predicted-interval">[{interval[0]:.4f}, {interval[1]:.4f}]<' in html and "inside the interval" in html
    loss = fit["laws"]["loss"]
    assert f"E = {loss['E']:.4f}" in html and f"gamma = {loss['gamma']:.4f}" in html and "fit-error" not in html
    assert 'data-law="surface"' in html and "huber-log-0.001" in html and "isoflop.png" in html
    assert NO_MINIMUM in html and "laws.png" not in html  # listed, but removed from the directory
    backtest = fit["backtest"]
    assert backtest["held_out_budgets"] == [3e13] and len(backtest["runs"]) == 3
    assert f'<b id="backtest-error">{backtest["mean_abs_error"] * 100:.1f}%</b>' in html
    assert f'id="widening">{backtest["widening"]:.4f}<' in html
    assert get(client, "/fit/plot", path=lab["fit"], name="isoflop.png").content[:4] == b"\x89PNG"
    assert get(client, "/fit/plot", path=lab["fit"], name="fit.json").status_code == 422


def test_damaged_fit_parts_are_errors_in_place_and_a_missing_target_eval_is_not_run_yet(lab, tmp_path):
    document = json.loads(open(f"{lab['fit']}/fit.json").read())
    document["budgets"][1]["quadratic"] = [1, 2]
    document["laws"]["loss"]["gamma"] = "fast"
    document["prediction"]["eval_path"] = str(tmp_path / "not-yet")
    document["backtest"]["runs"][0]["error"] = None
    step = tmp_path / "fit-1"
    step.mkdir()
    (step / "fit.json").write_text(json.dumps(document))
    c = TestClient(create_app(BrowserConfig(roots=[str(tmp_path)])))
    r = get(c, "/fit", path=step)
    assert r.status_code == 200
    view = get(c, "/api/fit", path=step).json()["fit"]
    fit = view["record"]
    assert view["errors"] == {
        "budgets": f"{step}/fit.json: budgets[1].quadratic must be a list of 3 numbers, got [1, 2]",
        "laws.loss": f"{step}/fit.json: laws.loss.gamma must be a finite number, got 'fast'",
        "backtest": f"{step}/fit.json: backtest.runs[0].error must be a finite number, got None",
    }
    assert fit["laws"]["params_opt"] == document["laws"]["params_opt"] and view["actual"]["status"] == "not run yet"
    assert 'id="actual" colspan="2">not run yet<' in r.text
    (step / "fit.json").write_text('{"kind": "isoflop_fit", "runs": [')
    r = get(c, "/fit", path=step)
    assert r.status_code == 200 and f"{step}/fit.json: not valid JSON" in unescape(r.text)
    del document["prediction"]
    document["backtest"] = {"note": "the backtest cannot fit the 3 runs below the top budget octave"}
    (step / "fit.json").write_text(json.dumps(document))
    html = unescape(get(c, "/fit", path=step).text)
    assert (
        "No prediction in this fit." in html
        and "the backtest cannot fit the 3 runs below the top budget octave" in html
    )


def test_a_fit_written_by_format_1_still_shows(tmp_path):
    """Stores written before format 2 (``laws.loss.alpha``, ``prediction.budget`` as 6·N·D, bootstrap-only
    intervals) read through the record's upgrade: the page shows them, with the interval marked uncalibrated."""
    step = tmp_path / "old-fit"
    step.mkdir()
    shutil.copy(FIT_V1, step / "fit.json")
    c = TestClient(create_app(BrowserConfig(roots=[str(tmp_path)])))
    view = get(c, "/api/fit", path=step).json()["fit"]
    old = json.loads(FIT_V1.read_text())
    assert view["errors"] == {} and view["record"]["laws"]["loss"]["gamma"] == old["laws"]["loss"]["alpha"]
    html = unescape(get(c, "/fit", path=step).text)
    assert 'id="predicted-interval">not calibrated<' in html and "fit-error" not in html
    assert (
        f"gamma = {old['laws']['loss']['alpha']:.4f}" in html
        and "outside the browser's roots" in view["actual"]["status"]
    )
