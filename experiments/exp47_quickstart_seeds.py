"""The quickstart's post-training results under several seeds: how much of each number is the recipe, how much
the draw. Issues #47 and #80.

The base model is the quickstart's own (``make quickstart`` first: nothing of it reruns). For each seed the
instruct phase (SFT data order), the preference phase (DPO pair order) and the RL phase (GRPO prompt order and
every rollout's sampling seed) run again from it, each seed a set of steps of its own (``-s1``, ``-s2``; seed 0
is the quickstart itself), and every model is evaluated on the same held-out and practice questions and pairs.

    python experiments/exp47_quickstart_seeds.py --dry_run true   # the quickstart's steps, plus 2 x 16 new ones
    python experiments/exp47_quickstart_seeds.py                  # ~8 minutes on 2 cores after make quickstart

It prints, per seed, what each phase changed item by item (``quickstart.post_training_gains``), then each
quantity's range over the seeds (the table of docs/quickstart.md). ``exp80_quickstart_spread.py`` runs it under
several CPU kernel settings.
"""

from experiments import quickstart
from experiments.models import llama_nano
from marin.execution import executor_main

SEEDS = (0, 1, 2)
RESULTS = (*quickstart.INSTRUCT_EVALS, *quickstart.PREFERENCE_EVALS)


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


def targets(phases: dict[int, dict]) -> list:
    return [steps[k] for steps in phases.values() for k in RESULTS]


def gains_by_seed(phases: dict[int, dict], output_paths: dict[str, str]) -> dict[int, dict]:
    """``quickstart.post_training_gains`` of every seed, from step name -> output path."""
    return {
        seed: quickstart.post_training_gains({k: output_paths[steps[k].name] for k in RESULTS})
        for seed, steps in phases.items()
    }


def summary_rows(gains: dict[int, dict]) -> list[dict]:
    """One flat row per seed: the numbers docs/quickstart.md tabulates."""
    rows = []
    for seed, g in gains.items():
        held, practice, pref = g["instructions"], g["practice"], g["preference"]
        rows.append(
            {
                "seed": seed,
                "base": held["base"],
                "sft": held["sft"],
                "rl": held["rl"],
                "rl_gained_lost": (held["rl_vs_sft"]["gained"], held["rl_vs_sft"]["lost"]),
                "rl_ci95": held["rl_vs_sft"]["ci95"],
                "practice_sft": practice["sft"],
                "practice_rl": practice["rl"],
                "practice_ci95": practice["rl_vs_sft"]["ci95"],
                "pref_sft": pref["sft"],
                "pref_dpo": pref["dpo"],
                "dpo_gained_lost": (pref["dpo_vs_sft"]["gained"], pref["dpo_vs_sft"]["lost"]),
                "dpo_ci95": pref["dpo_vs_sft"]["ci95"],
                "margin_sft": pref["margin"][0],
                "margin_dpo": pref["margin"][1],
            }
        )
    return rows


def print_rows(rows: list[dict]) -> None:
    print("\nseed  held-out base -> SFT -> RL (+/-)   practice SFT -> RL   preference SFT -> DPO (+/-)   margin")
    for r in rows:
        print(
            f"  {r['seed']}   {r['base']:.3f} -> {r['sft']:.3f} -> {r['rl']:.3f} (+{r['rl_gained_lost'][0]}/-"
            f"{r['rl_gained_lost'][1]})   {r['practice_sft']:.3f} -> {r['practice_rl']:.3f}   {r['pref_sft']:.3f} -> "
            f"{r['pref_dpo']:.3f} (+{r['dpo_gained_lost'][0]}/-{r['dpo_gained_lost'][1]})   "
            f"{r['margin_sft']:.2f} -> {r['margin_dpo']:.2f}"
        )
    for key in ("sft", "rl", "practice_sft", "practice_rl", "pref_sft", "pref_dpo"):
        values = [r[key] for r in rows]
        print(f"  {key:12s} range {min(values):.3f} - {max(values):.3f}")


def main(seeds=SEEDS, args: list[str] | None = None) -> None:
    phases = build(seeds)
    result = executor_main(
        steps=targets(phases), description=f"the quickstart's post-training phases under seeds {seeds}", args=args
    )
    if result is not None:
        print_rows(summary_rows(gains_by_seed(phases, {p.name: p.output_path for p in result.plan.steps})))


if __name__ == "__main__":
    main()
