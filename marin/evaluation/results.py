"""``results.json``'s record of the eval's own settings, and the Markdown table logged at the end."""

from __future__ import annotations

import dataclasses
import json
from typing import Any


def config_record(config: Any, max_len: int) -> dict[str, Any]:
    """The eval's own settings (an ``EvalConfig``; the model's are under ``model``), so a number can be
    traced to what produced it without the executor's records."""
    record = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "model"}
    record.update(
        max_len=max_len,
        validation=dict(config.validation),
        tasks=list(config.tasks),
        lm_eval_tasks=list(config.lm_eval_tasks),
        unigram_baseline=dict(config.unigram_baseline),
        preference=dict(getattr(config, "preference", {})),
    )
    return json.loads(json.dumps(record, default=str))  # executor paths and the like as plain strings


def format_table(results: dict[str, Any]) -> str:
    lines = []
    if results["validation"] or not (results["tasks"] or results.get("preference")):
        lines += ["| set | loss | perplexity | bits/byte | unigram bits/byte |", "|---|---|---|---|---|"]
    for name, r in results["validation"].items():
        unigram = f"{r['unigram_bits_per_byte']:.4f}" if "unigram_bits_per_byte" in r else "-"
        lines.append(f"| {name} | {r['loss']:.4f} | {r['perplexity']:.2f} | {r['bits_per_byte']:.4f} | {unigram} |")
    if results["tasks"]:
        lines += [
            "",
            "| task | k-shot | items | acc | acc 95% CI | acc_norm | chance |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in results["tasks"].items():
            lo, hi = r["acc"]["ci95"]
            lines.append(
                f"| {name} | {r['num_fewshot']} | {r['items']} | {r['acc']['value']:.3f} | "
                f"[{lo:.3f}, {hi:.3f}] | {r['acc_norm']['value']:.3f} | {r['chance']:.3f} |"
            )
    lines += preference_table(results.get("preference") or {})
    return "\n".join(lines)


def preference_table(preference: dict[str, Any]) -> list[str]:
    """Markdown rows of ``results.json``'s ``preference`` section (the report renders the same table)."""
    if not preference:
        return []
    lines = [
        "",
        "| preference set | pairs | accuracy (95% CI) | mean margin (nats) | reward accuracy | reward margin |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in preference.items():
        lo, hi = r["accuracy"]["ci95"]
        reward = f"{r['reward_accuracy']['value']:.3f}" if "reward_accuracy" in r else "–"
        margin = f"{r['reward_margin']:.4f}" if "reward_margin" in r else "–"
        lines.append(
            f"| {name} | {r['pairs']} | {r['accuracy']['value']:.3f} ({lo:.3f}–{hi:.3f}) | {r['mean_margin']:.3f} | "
            f"{reward} | {margin} |"
        )
    return lines
