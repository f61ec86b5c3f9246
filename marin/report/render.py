"""The Markdown body of an experiment's GitHub issue, from an ``ExperimentReport``.

    links = Links(repo_url="https://github.com/me/lab", browser_url="http://127.0.0.1:5000")
    body = render(report, links, image="exp42_wsd_vs_cosine_loss.png")

Sections follow ``.github/ISSUE_TEMPLATE/experiment.md`` (description, hypothesis, how to run, links,
results, evals), so the issue opened by hand before the run and the body written after it read alike.
Links point at what cannot move: the experiment file at the commit that ran (not ``main``, which will
have changed by the time anyone reads the issue) and output paths, which are content-addressed by hash.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from collections.abc import Sequence
from urllib.parse import quote

from marin.report.collect import ExperimentReport
from marin.report.leaderboard import Board
from marin.scaling.heldout import HeldoutError, heldout_bpb
from marin.scaling.record import Backtest, BudgetFit, Laws, Prediction

STATE_ICONS = {
    "SUCCESS": "✅",
    "FAILED": "❌",
    "DEP_FAILED": "⛔",
    "RUNNING": "🏃",
    "WAITING": "⏳",
    "UNREADABLE": "⚠️",
    None: "·",
}
MAX_MESSAGE_LINES = 40
"""Failure messages are tracebacks at worst; their last lines say what went wrong."""


@dataclasses.dataclass(frozen=True)
class Links:
    repo_url: str | None = None
    """``https://github.com/<owner>/<repo>``; None: derived from the recorded git remote."""
    browser_url: str | None = "http://127.0.0.1:5000"
    """Where the data browser serves this prefix (``make browse``); None or "": plain paths, no links."""

    def repo(self, record: dict) -> str | None:
        return (self.repo_url or https_remote(record.get("git_remote")) or "").rstrip("/") or None

    def file_at_commit(self, record: dict) -> str | None:
        repo, commit, path = self.repo(record), record.get("git_commit"), record.get("caller_file")
        if not (repo and commit and path) or path.startswith("/"):
            return None
        return f"{repo}/blob/{commit}/{path}"

    def browser(self, page: str, path: str) -> str | None:
        """``<browser>/<page>?path=<URL-quoted path>``, the data browser's URL scheme."""
        if not self.browser_url:
            return None
        return f"{self.browser_url.rstrip('/')}/{page}?path={quote(path, safe='')}"


def https_remote(remote: str | None) -> str | None:
    """``git@github.com:o/r.git`` and ``https://github.com/o/r.git`` -> ``https://github.com/o/r``."""
    if not remote:
        return None
    match = re.match(r"^(?:git@|ssh://git@)([^:/]+)[:/](.+?)(?:\.git)?/?$", remote)
    if match:
        return f"https://{match.group(1)}/{match.group(2)}"
    if remote.startswith(("http://", "https://")):
        return remote[:-4] if remote.endswith(".git") else remote
    return None


def issue_number(caller_file: str | None, docstring: str | None) -> int | None:
    """The experiment's issue: ``exp<N>_<what>.py`` by convention, else an ``issues/<N>`` link in the docstring."""
    match = re.match(r"^exp(\d+)_", (caller_file or "").rsplit("/", 1)[-1])
    if match:
        return int(match.group(1))
    match = re.search(r"/issues/(\d+)", docstring or "")
    return int(match.group(1)) if match else None


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours < 48 else f"{hours / 24:.1f} days"


def _link(text: str, url: str | None) -> str:
    return f"[{text}]({url})" if url else text


def _relative(path: str, prefix: str | None) -> str:
    if prefix and path.startswith(prefix.rstrip("/") + "/"):
        return path[len(prefix.rstrip("/")) + 1 :]
    return path


def split_docstring(docstring: str | None) -> tuple[str | None, str | None]:
    """(description, hypothesis): a paragraph starting ``Hypothesis:`` is the hypothesis, the rest describes."""
    if not docstring:
        return None, None
    description, hypothesis = [], None
    for paragraph in re.split(r"\n\s*\n", docstring.strip()):
        if hypothesis is None and paragraph.lstrip().lower().startswith("hypothesis:"):
            hypothesis = paragraph.lstrip()[len("hypothesis:") :].strip()
        else:
            description.append(paragraph)
    return "\n\n".join(description) or None, hypothesis


def header(report: ExperimentReport, links: Links) -> list[str]:
    record = report.record
    caller, commit = record.get("caller_file") or record.get("script", "?"), record.get("git_commit")
    created = datetime.datetime.fromtimestamp(record.get("created", 0), tz=datetime.UTC)
    lines = [
        f"<!-- marin-report {record.get('script')} {report.record_url} -->",
        f"**{record.get('description') or record.get('script')}**",
        "",
    ]
    if commit:
        file_link = _link(f"`{caller}`", links.file_at_commit(record))
        lines.append(f"- Experiment file: {file_link} at commit `{commit[:12]}`")
        if links.file_at_commit(record) is None:
            lines.append("  (no GitHub remote was recorded: pass `--repo_url` to link it)")
        if record.get("git_dirty"):
            lines.append(
                "  ⚠️ the working tree had uncommitted changes when this ran: the file at this "
                "commit may differ from what ran"
            )
    else:
        lines.append(
            f"- Experiment file: `{caller}` (no git commit recorded: run from a checkout, or on a Ray "
            "cluster with `.git` in the job's working dir, see docs/cluster.md)"
        )
    lines.append(f"- Record: {_link(f'`{report.record_url}`', links.browser('experiment', report.record_url))}")
    lines.append(f"- Prefix: `{record.get('prefix')}` · run by `{record.get('user')}` on {created:%Y-%m-%d %H:%M} UTC")
    wandb = [s for s in report.steps if s.wandb_url]
    for s in wandb:
        lines.append(f"- W&B: [{s.name}]({s.wandb_url})")
    return lines


def how_to_run(report: ExperimentReport) -> list[str]:
    record = report.record
    caller = record.get("caller_file") or f"experiments/{record.get('script')}.py"
    lines = ["## How to run", "", "```bash"]
    if record.get("git_commit"):
        lines.append(f"git checkout {record['git_commit']}")
    lines += [
        f"MARIN_PREFIX={record.get('prefix')} python {caller} --dry_run true   # what would run, and why",
        f"MARIN_PREFIX={record.get('prefix')} python {caller}",
        f"python -m marin.report {caller} --prefix {record.get('prefix')}   # this report",
        "```",
    ]
    return lines


def steps_table(report: ExperimentReport, links: Links) -> list[str]:
    prefix = report.record.get("prefix")
    lines = ["## Steps", "", "| step | state | duration | output |", "|---|---|---|---|"]
    for s in report.steps:
        output = _link(f"`{_relative(s.output_path, prefix)}`", links.browser("browse", s.output_path))
        state = f"{STATE_ICONS.get(s.state, '?')} {s.state or 'not started'}"
        lines.append(f"| `{s.name}` | {state} | {format_duration(s.duration)} | {output} |")
    return lines


def training_section(report: ExperimentReport, links: Links, image: str | None) -> list[str]:
    runs = [s for s in report.steps if s.curves]
    if not runs:
        return []
    sets = sorted({name for s in runs for name in s.eval_bpb()})
    lines = [
        "## Training",
        "",
        "| run | steps | final train loss |" + "".join(f" eval bpb: {n} |" for n in sets),
        "|---|---|---|" + "---|" * len(sets),
    ]
    for s in runs:
        bpb = s.eval_bpb()
        loss = f"{s.final_loss:.4f}" if s.final_loss is not None else "–"
        cells = "".join(f" {bpb[n]:.4f} |" if n in bpb else " – |" for n in sets)
        run = _link(f"`{s.name}`", links.browser("training", s.output_path))
        lines.append(f"| {run} | {s.final_step if s.final_step is not None else '–'} | {loss} |{cells}")
    if image:
        lines += ["", f"![loss curves]({image})"]
    return lines


def _ci(metric: dict) -> str:
    lo, hi = metric.get("ci95", (None, None))
    if lo is None or hi is None:
        return f"{metric['value']:.3f}"
    return f"{metric['value']:.3f} ({lo:.3f}–{hi:.3f})"


def evals_section(report: ExperimentReport, links: Links) -> list[str]:
    evals = [s for s in report.steps if s.results]
    if not evals:
        return []
    lines = ["## Evals"]
    for s in evals:
        lines += ["", f"### {_link(f'`{s.name}`', links.browser('browse', s.output_path))}"]
        validation = s.results.get("validation") or {}
        if validation:
            lines += [
                "",
                "| validation set | loss | perplexity | bits/byte | unigram bits/byte |",
                "|---|---|---|---|---|",
            ]
            for name, r in validation.items():
                unigram = r.get("unigram_bits_per_byte")
                lines.append(
                    f"| {name} | {r['loss']:.4f} | {r['perplexity']:.2f} | {r['bits_per_byte']:.4f} | "
                    f"{f'{unigram:.4f}' if unigram is not None else '–'} |"
                )
        tasks = s.results.get("tasks") or {}
        if tasks:
            lines += ["", "| task | acc (95% CI) | acc_norm (95% CI) | chance | items |", "|---|---|---|---|---|"]
            for name, r in tasks.items():
                acc_norm = _ci(r["acc_norm"]) if r.get("acc_norm") else "–"
                lines.append(
                    f"| {name} | {_ci(r['acc'])} | {acc_norm} | {r.get('chance', 0):.2f} | {r.get('items', '–')} |"
                )
        lines += preference_lines(s.results.get("preference") or {})
    return lines


def preference_lines(preference: dict) -> list[str]:
    """The preference eval's table (``results.json`` ``preference``, written by ``marin.evaluation.preference``):
    how often the model prefers the chosen reply, and DPO's implicit reward when the eval had a reference."""
    if not preference:
        return []
    lines = [
        "",
        "| preference set | pairs | accuracy (95% CI) | margin (nats) | reward accuracy (95% CI) | reward margin |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in preference.items():
        reward = _ci(r["reward_accuracy"]) if r.get("reward_accuracy") else "–"
        margin = f"{r['reward_margin']:.4f}" if r.get("reward_margin") is not None else "–"
        lines.append(f"| {name} | {r['pairs']} | {_ci(r['accuracy'])} | {r['mean_margin']:.3f} | {reward} | {margin} |")
    return lines


def _span(interval: Sequence[float] | None, fmt: str = ".3g") -> str:
    return f"[{interval[0]:{fmt}}, {interval[1]:{fmt}}]" if interval else "–"


def fit_section(report: ExperimentReport, links: Links) -> list[str]:
    """Each scaling ladder's fit: the laws with their intervals and the prediction against the target's
    measured loss, once the target has been evaluated; a damaged part of ``fit.json`` is named, not skipped."""
    fits = [s for s in report.steps if s.fit is not None]
    if not fits:
        return []
    lines = ["## Scaling fit"]
    for s in fits:
        fit, level = s.fit, s.fit.bootstrap.level if s.fit.bootstrap else 0.9
        samples = f" ({fit.bootstrap.samples} samples)" if fit.bootstrap else ""
        lines += [
            "",
            f"### {_link(f'`{s.name}`', links.browser('fit', s.output_path))}",
            "",
            f"{len(fit.runs)} runs at {len(fit.budgets)} budgets; loss: {fit.heldout} bits/byte; "
            f"N = model FLOPs per token / 6. Intervals: {level:.0%} bootstrap{samples}, the prediction's widened "
            "for extrapolation by the backtest.",
        ]
        lines += [f"- ⚠️ `fit.json` {part}: {message}" for part, message in s.fit_errors.items()]
        if "file" in s.fit_errors:  # not a fit at all: nothing more to show
            continue
        lines += [f"- left out: `{r.run}` ({r.reason})" for r in fit.skipped]
        lines += laws_table(fit.laws) + budgets_table(fit.budgets)
        lines += prediction_table(fit.prediction, fit.heldout) + backtest_lines(fit.backtest, level)
    return lines


def laws_table(laws: Laws) -> list[str]:
    lines = ["", "| law | fit | interval of the exponent |", "|---|---|---|"]
    for law, label in ((laws.params_opt, "N*(C)"), (laws.tokens_opt, "D*(C)")):
        if law is None:
            lines.append(f"| {label} | not fitted: {laws.note or ''} | – |")
        else:
            lines.append(
                f"| {label} | {law.coefficient:.3g} · C^{law.exponent:.3f} | {_span(law.interval.get('exponent'))} |"
            )
    if laws.loss is not None:
        loss = laws.loss
        formula = f"{loss.E:.3f} + {loss.A:.3g} · C^-{loss.gamma:.3f}"
        lines.append(f"| L*(C) | {formula} | {_span(loss.interval.get('gamma'))} |")
    return lines


def budgets_table(budgets: list[BudgetFit]) -> list[str]:
    lines = [
        "",
        "| budget (FLOPs) | N* | D* | L* | N* interval | bracketed by the runs |",
        "|---|---|---|---|---|---|",
    ]
    for b in budgets:
        if b.params_opt is None:
            lines.append(f"| {b.budget:.3g} | – | – | – | – | {b.note or 'no minimum'} |")
            continue
        lines.append(
            f"| {b.budget:.3g} | {b.params_opt:.3g} | {b.tokens_opt:.3g} | {b.loss_opt:.4f} | "
            f"{_span(b.params_opt_interval)} | {'yes' if b.bracketed else 'no: extrapolated'} |"
        )
    return lines


def target_actual(prediction: Prediction, heldout: str | None) -> tuple[float | None, str]:
    """The target's measured loss (``marin.scaling.heldout``) and how to show it."""
    if not prediction.eval_path or heldout is None:
        return None, "not run yet"
    try:
        actual = heldout_bpb(prediction.eval_path, heldout)
    except FileNotFoundError:
        return None, "not run yet"
    except HeldoutError as e:
        return None, f"unreadable ({e})"
    return (actual, f"{actual:.4f}") if math.isfinite(actual) and actual > 0 else (None, f"{actual!r}")


def prediction_table(prediction: Prediction | None, heldout: str | None) -> list[str]:
    if prediction is None:
        return []
    actual, measured = target_actual(prediction, heldout)
    interval = prediction.interval
    shown = (
        _span(interval, ".4f")
        if interval
        else f"not calibrated (bootstrap {_span(prediction.bootstrap_interval, '.4f')})"
    )
    error = f"{(actual - prediction.loss) / actual:+.2%}" if actual is not None else "–"
    inside = (
        ""
        if actual is None or not interval
        else (" (inside)" if interval[0] <= actual <= interval[1] else " (outside)")
    )
    return [
        "",
        "| target | FLOPs | N | D | predicted | interval | actual | relative error |",
        "|---|---|---|---|---|---|---|---|",
        f"| `{prediction.run}` | {prediction.flops:.3g} | {prediction.params:.3g} | {prediction.tokens:.3g} | "
        f"{prediction.loss:.4f} | {shown} | {measured}{inside} | {error} |",
    ]


def backtest_lines(check: Backtest | None, level: float) -> list[str]:
    """The ladder's check on itself: its top budget octave predicted from the smaller budgets."""
    if check is None:
        return []
    if check.note is not None or not check.runs:
        return ["", f"Backtest: not run, so the interval is not calibrated ({check.note or 'no runs'})."]
    worst = max(check.runs, key=lambda r: abs(r.error))
    held_out = ", ".join(f"{b:.3g}" for b in check.held_out_budgets)
    widening = (
        f"; intervals widen by {check.widening:.4f} in log loss per e-fold past the runs"
        if check.widening is not None
        else ""
    )
    return [
        "",
        f"Backtest (before trusting the target): fitted on the {check.fitted_runs} runs below "
        f"{held_out} FLOPs, the surface predicts that budget's {len(check.runs)} runs "
        f"{check.mean_abs_error:.1%} off on average (worst {worst.error:+.1%}, `{worst.run}`); "
        f"{check.inside_bootstrap} of {len(check.runs)} inside their {level:.0%} bootstrap intervals{widening}.",
    ]


def leaderboard_markdown(boards: list[Board], links: Links) -> str:
    """The leaderboard as Markdown: one table per held-out set, lowest bits per byte first."""
    lines = ["# Leaderboard", ""]
    if not boards:
        lines.append("_(no training run with an eval of its own: run an experiment with an eval step first)_")
    for board in boards:
        lines += [
            f"## {board.heldout} ({board.documents:,} documents, {board.bytes:,} bytes)",
            "",
            "| rank | run | experiment | optimizer | params | tokens | FLOPs | wall time | bits/byte | frontier |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for rank, e in enumerate(board.entries, 1):
            run = _link(f"`{e.run}`", links.browser("training", e.run_path))
            cells = [
                e.optimizer or "–",
                f"{e.params:,}" if e.params is not None else "–",
                f"{e.tokens:.3g}" if e.tokens is not None else "–",
                f"{e.flops:.3g}" if e.flops is not None else "–",
                format_duration(e.wall_seconds),
                f"{e.bpb:.4f}",
                "★" if e.frontier else "",
            ]
            lines.append(f"| {rank} | {run} | `{e.experiment}` | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(
        "Frontier (★): no other run on the board reached lower bits per byte with at most its FLOPs. "
        "FLOPs are model FLOPs (6N + attention per token) as the trainer logs them."
    )
    return "\n".join(lines) + "\n"


def failures_section(report: ExperimentReport) -> list[str]:
    if not report.failures:
        return []
    lines = ["## Failures"]
    for s in report.failures:
        message = (s.message or "(no message recorded)").rstrip().splitlines()
        if len(message) > MAX_MESSAGE_LINES:
            message = [f"... ({len(message) - MAX_MESSAGE_LINES} lines cut)", *message[-MAX_MESSAGE_LINES:]]
        lines += ["", f"### `{s.name}`: {s.state}", "", f"`{s.output_path}`", "", "```", *message, "```"]
    return lines


def render(report: ExperimentReport, links: Links, image: str | None = None) -> str:
    """The issue body. ``image`` is the loss-curve file name, relative to where the Markdown is written."""
    description, hypothesis = split_docstring(report.docstring)
    parts = [
        header(report, links),
        ["## Description", "", description or "_(the experiment file has no docstring)_"],
        [
            "## Hypothesis",
            "",
            hypothesis or "_(none stated: add a paragraph starting `Hypothesis:` to the experiment's docstring)_",
        ],
        how_to_run(report),
        steps_table(report, links),
        training_section(report, links, image),
        evals_section(report, links),
        fit_section(report, links),
        failures_section(report),
    ]
    return "\n\n".join("\n".join(p) for p in parts if p) + "\n"
