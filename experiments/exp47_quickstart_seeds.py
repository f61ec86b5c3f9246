"""The quickstart's post-training results under several seeds: how much of each number is the recipe, how much
the draw. Issue #47.

The base model is the quickstart's own (``make quickstart`` first: nothing of it reruns). For each seed the
instruct phase (SFT data order), the preference phase (DPO pair order) and the RL phase (GRPO prompt order and
every rollout's sampling seed) run again from it, each seed a set of steps of its own (``-s1``, ``-s2``; seed 0
is the quickstart itself), and every model is evaluated on the same held-out instructions and pairs.

    python experiments/exp47_quickstart_seeds.py --dry_run true   # the quickstart's steps, plus 2 x 13 new ones
    python experiments/exp47_quickstart_seeds.py                  # ~8 minutes on 2 cores after make quickstart

It prints, per seed, exact match base -> SFT -> RL and preference accuracy SFT -> DPO, then each quantity's
range over the seeds (the table of docs/quickstart.md).
"""

import json
import os

from experiments import quickstart
from experiments.models import llama_nano
from marin.execution import executor_main

SEEDS = (0, 1, 2)
RESULTS = ("instruct_eval_base", "instruct_eval_sft", "instruct_eval_rl", "preference_eval_sft", "preference_eval_dpo")


def build(seeds=SEEDS) -> dict[int, dict]:
    """Each seed's post-training steps, keyed by the quickstart's roles (seed 0: the quickstart's own steps)."""
    steps = quickstart.STEPS
    model = llama_nano(vocab_size=quickstart.VOCAB, seq_len=256)
    out = {}
    for seed in seeds:
        if seed == 0:
            out[seed] = steps
            continue
        instruct = quickstart.instruct_phase(steps["tokenizer"], steps["checkpoints"], model, seed=seed)
        chat_tokenizer = instruct["sft_data"] / "tokenizer"
        out[seed] = {**instruct, **quickstart.preference_phase(instruct["sft"], chat_tokenizer, model, seed=seed)}
    return out


PHASES = build()


def summarize(result) -> dict:
    """Per seed: exact match base/SFT/RL and preference accuracy SFT/DPO; printed with their ranges."""
    paths = {p.name: p.output_path for p in result.plan.steps}

    def read(step, section: str, name: str) -> float:
        with open(os.path.join(paths[step.name], "results.json")) as f:
            r = json.load(f)[section][name]
        return r["exact_match"]["value"] if section == "instruct" else r["accuracy"]["value"]

    rows = {
        seed: {
            "base": read(steps["instruct_eval_base"], "instruct", "instructions"),
            "sft": read(steps["instruct_eval_sft"], "instruct", "instructions"),
            "rl": read(steps["instruct_eval_rl"], "instruct", "instructions"),
            "pref_sft": read(steps["preference_eval_sft"], "preference", "instruction_pairs"),
            "pref_dpo": read(steps["preference_eval_dpo"], "preference", "instruction_pairs"),
        }
        for seed, steps in PHASES.items()
    }
    print("\nseed   exact match base -> SFT -> RL   preference accuracy SFT -> DPO")
    for seed, r in rows.items():
        exact = f"{r['base']:.3f} -> {r['sft']:.3f} -> {r['rl']:.3f}"
        print(f"  {seed}    {exact}        {r['pref_sft']:.3f} -> {r['pref_dpo']:.3f}")
    for key in ("sft", "rl", "pref_sft", "pref_dpo"):
        values = [r[key] for r in rows.values()]
        print(f"  {key:8s} range {min(values):.3f} - {max(values):.3f}")
    return rows


if __name__ == "__main__":
    targets = [steps[k] for steps in PHASES.values() for k in RESULTS]
    result = executor_main(steps=targets, description="the quickstart's post-training phases under seeds 0, 1, 2")
    if result is not None:
        summarize(result)
