"""How long does the data browser take to compare 10 training runs of 2,000 logged steps each? (issue 27)

    .venv/bin/python benchmarks/browser_compare_bench.py               # 10 runs x 2,000 steps, 5 rounds
    .venv/bin/python benchmarks/browser_compare_bench.py --runs 20 --steps 10000 --rounds 3

It writes a store of ``--runs`` training steps (``.executor_status``, ``.executor_info`` with configs that differ
in ``model.hidden_dim`` and ``trainer.batch_size``, and a ``metrics.jsonl`` as the trainer writes it: one train
record a step with the cumulative ``throughput/total_tokens`` and ``throughput/total_flops``, tokens/s every 10
steps, an eval every 100), serves it with uvicorn and measures, as the median over ``--rounds``:

* ``api_s``: the server's answer to ``/api/compare/runs?step=...&x=tokens`` (read, parse, diff, serialize);
* ``page_s``: the same as the HTML page (what the browser downloads);
* ``chromium_s``: in headless Chromium (Debian's /usr/bin/chromium through Playwright, as the tests drive it),
  from navigation to every chart drawn (``#charts[data-drawn]``, set after the last uPlot chart is built).

The JSON goes to ``benchmarks/results/browser_compare_bench.json`` with the date and host.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote
from urllib.request import urlopen

from host import cpu_model  # noqa: E402  benchmarks/ is the script's own directory

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def write_run(root: Path, i: int, steps: int) -> Path:
    hidden, batch, seq_len = 64 * (1 + i % 4), 8 * (1 + i // 4), 256
    out = root / "checkpoints" / f"bench-{i:02d}-{hidden}-{batch}"
    out.mkdir(parents=True)
    (out / ".executor_status").write_text(
        json.dumps({"state": "RUNNING", "time": 0.0}) + "\n" + json.dumps({"state": "SUCCESS", "time": 60.0}) + "\n"
    )
    config = {"model": {"hidden_dim": hidden, "seq_len": seq_len, "num_layers": 4}, "trainer": {"batch_size": batch}}
    (out / ".executor_info").write_text(json.dumps({"name": f"checkpoints/bench-{i:02d}", "config": config}))
    tokens, flops = batch * seq_len, batch * seq_len * 6 * 12 * 4 * hidden**2
    with open(out / "metrics.jsonl", "w") as f:
        for step in range(1, steps + 1):
            loss = 2 + 4 / step**0.5 + i * 0.01
            f.write(
                json.dumps(
                    {
                        "step": step,
                        "train/loss": loss,
                        "train/learning_rate": 3e-3,
                        "train/grad_norm": 1 / step,
                        "throughput/total_tokens": step * tokens,
                        "throughput/total_flops": step * flops,
                    }
                )
                + "\n"
            )
            if step % 10 == 0:
                f.write(json.dumps({"step": step, "throughput/tokens_per_s": 41000.0}) + "\n")
            if step % 100 == 0:
                f.write(json.dumps({"step": step, "eval/stories/bpb": loss / 2, "eval/stories/loss": loss}) + "\n")
    return out


def serve(root: Path):
    import uvicorn

    from data_browser.app import create_app
    from data_browser.config import BrowserConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(BrowserConfig(roots=[str(root)]))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}"


def fetch_seconds(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urlopen(url) as r:
        body = r.read()
        assert r.status == 200, url
    return time.perf_counter() - t0, len(body)


def chromium_seconds(page, url: str) -> float:
    t0 = time.perf_counter()
    page.goto(url)
    page.wait_for_selector("#charts[data-drawn]", timeout=120_000)
    seconds = time.perf_counter() - t0
    assert page.locator("div.chart canvas").count() == 2  # train/loss and eval/stories/bpb
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "browser_compare_bench.json")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = [write_run(root, i, args.steps) for i in range(args.runs)]
        size = sum((p / "metrics.jsonl").stat().st_size for p in paths)
        query = "&".join(f"step={quote(str(p), safe='')}" for p in paths) + "&x=tokens"
        server, base = serve(root)
        rows: dict[str, list[float]] = {"api_s": [], "page_s": [], "chromium_s": []}
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=args.chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            chromium_seconds(page, f"{base}/compare/runs?{query}")  # warm-up: templates, static files, JIT
            for r in range(args.rounds):
                api, api_bytes = fetch_seconds(f"{base}/api/compare/runs?{query}")
                html, page_bytes = fetch_seconds(f"{base}/compare/runs?{query}")
                rows["api_s"].append(api)
                rows["page_s"].append(html)
                rows["chromium_s"].append(chromium_seconds(page, f"{base}/compare/runs?{query}"))
                print(f"[round {r + 1}] " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in rows.items()), file=sys.stderr)
            browser.close()
        server.should_exit = True
    medians = {k: statistics.median(v) for k, v in rows.items()}
    report = {
        "host": cpu_model(),
        "time": time.strftime("%F %T"),
        "runs": args.runs,
        "steps": args.steps,
        "rounds": args.rounds,
        "metrics_bytes": size,
        "api_bytes": api_bytes,
        "page_bytes": page_bytes,
        "median": medians,
        "rounds_s": rows,
    }
    print(f"\n{args.runs} runs x {args.steps} steps ({size / 1e6:.1f} MB of metrics.jsonl) on {report['host']}:")
    print(f"  median of {args.rounds}: " + ", ".join(f"{k} {v:.3f}" for k, v in medians.items()))
    print(f"  API answer {api_bytes / 1e6:.2f} MB, page {page_bytes / 1e6:.2f} MB")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
