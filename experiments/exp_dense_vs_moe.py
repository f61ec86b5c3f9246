"""Dense against mixture-of-experts at equal active parameters and equal training compute, on Gutenberg books.
Issue #45.

OLMoE (Muennighoff et al. 2024, fig. 4) and Switch (Fedus et al. 2021) find that a MoE reaches a lower loss than
the dense model of its active size at equal FLOPs: the extra experts are parameters a token does not pay for.
Here, at a CPU's scale:

- dense: the nano family's width 64 (``marin.scaling.ladder.nano_family``) with 4 layers, SwiGLU width 168;
- MoE: the same with every MLP replaced by 8 experts of width 84, top-2 (so 2 x 84 = 168 active, as dense),
  renormalized, load-balancing loss 0.01 and router z-loss 0.001 (OLMoE's); 3.9x the dense model's MLP
  parameters, 1.0x its active ones (plus the router);
- compute: both get the FLOPs of 20 tokens per active parameter of the dense model (Chinchilla), counted by
  ``LlamaConfig.flops_per_token`` (active parameters; the router's small share makes the MoE's run 0.2% shorter);
- each at three learning rates (AdamW, warmup-stable-decay, weight decay 0.1, batch 16 x 128 tokens, the 2,048
  BPE of ``exp43_books_ladder``), seed 0; the loss is bits per byte on the first two held-out books.

Hypothesis (OLMoE's): the MoE's best bpb is below the dense model's best. The outcome goes in
docs/model_families.md whichever way it falls.

    python experiments/exp_dense_vs_moe.py --dry_run true
    python experiments/exp_dense_vs_moe.py
"""

from __future__ import annotations

import dataclasses
import json

from experiments.defaults import default_eval, default_train, output_path_of
from experiments.exp43_books_ladder import HELDOUT_BOOKS, TRAIN, books_tokenized
from marin.execution import ExecutorStep, executor_main, this_output_path, versioned
from marin.scaling.heldout import heldout_bpb
from marin.scaling.ladder import nano_family
from marin.storage import join, write_atomic

VOCAB, SEQ_LEN, BATCH = 2048, 128, 16
WIDTH, LAYERS = 64, 4
EXPERTS, TOP_K = 8, 2
TOKENS_PER_PARAM = 20.0
LEARNING_RATES = (2.5e-3, 5e-3, 1e-2)
SCHEDULE = {"schedule": "wsd", "warmup": 0.05, "decay": 0.3, "min_lr_ratio": 0.05}


def models() -> dict:
    dense = dataclasses.replace(nano_family(vocab_size=VOCAB, seq_len=SEQ_LEN, widths=(WIDTH,))[0], num_layers=LAYERS)
    moe = dataclasses.replace(
        dense,
        mlp_dim=dense.mlp_dim // TOP_K,
        num_experts=EXPERTS,
        experts_per_token=TOP_K,
        router_aux_loss_coef=0.01,
        router_z_loss_coef=0.001,
    )
    return {"dense": dense, "moe": moe}


@dataclasses.dataclass(frozen=True)
class ComparisonConfig:
    runs: tuple[tuple[str, float, float, int, str], ...]
    """(model, learning rate, training FLOPs, steps, eval output path) per run."""
    heldout: str
    output_path: str


def compare(config: ComparisonConfig) -> None:
    """``comparison.json`` and ``comparison.md``: every run's held-out bpb and each model's best."""
    rows = [
        {"model": m, "learning_rate": lr, "flops": flops, "steps": steps, "bpb": heldout_bpb(path, config.heldout)}
        for m, lr, flops, steps, path in config.runs
    ]
    best = {m: min((r for r in rows if r["model"] == m), key=lambda r: r["bpb"]) for m in {r["model"] for r in rows}}
    record = {"runs": rows, "best": best, "moe_minus_dense_bpb": best["moe"]["bpb"] - best["dense"]["bpb"]}
    write_atomic(join(config.output_path, "comparison.json"), json.dumps(record, indent=2))
    lines = ["| model | lr | steps | training FLOPs | bpb |", "|---|---|---|---|---|"]
    lines += [
        f"| {r['model']} | {r['learning_rate']:g} | {r['steps']} | {r['flops']:.3g} | {r['bpb']:.4f} |"
        for r in sorted(rows, key=lambda r: (r["model"], r["learning_rate"]))
    ]
    lines += ["", f"MoE best minus dense best: {record['moe_minus_dense_bpb']:+.4f} bpb"]
    write_atomic(join(config.output_path, "comparison.md"), "\n".join(lines) + "\n")


def build(learning_rates=LEARNING_RATES, tokens_per_param=TOKENS_PER_PARAM, train=TRAIN, bundled=None) -> dict:
    """The runs, their evals and the comparison; tests build a tiny one."""
    tokenizer, tokenized = books_tokenized(bundled)
    family = models()
    budget = tokens_per_param * family["dense"].flops_per_token() / 6 * family["dense"].flops_per_token()
    made = []
    for name, model in family.items():
        steps = max(1, round(budget / model.flops_per_token() / (BATCH * SEQ_LEN)))
        for lr in learning_rates:
            run = f"moe-vs-dense-{name}-h{WIDTH}-l{LAYERS}-lr{lr:g}"
            config = dataclasses.replace(
                train, **SCHEDULE, num_train_steps=steps, batch_size=BATCH, learning_rate=lr, weight_decay=0.1
            )
            checkpoint = default_train(run, {"gutenberg": tokenized}, model, config, validation={})
            evaluation = default_eval(
                run,
                checkpoint,
                tokenizer=tokenizer,
                validation={"gutenberg": tokenized / "validation"},
                model=model,
                max_documents=HELDOUT_BOOKS,
            )
            flops = model.flops_per_token() * steps * BATCH * SEQ_LEN
            made.append((checkpoint, evaluation, (name, lr, flops, steps, output_path_of(evaluation))))
    comparison = ExecutorStep(
        name="analysis/dense-vs-moe",
        fn=compare,
        config=ComparisonConfig(
            runs=tuple(ref for _, _, ref in made), heldout=versioned("gutenberg"), output_path=this_output_path()
        ),
        description="dense vs MoE at equal active parameters and FLOPs: held-out bpb of each learning rate",
    )
    return {"runs": [c for c, _, _ in made], "evals": [e for _, e, _ in made], "comparison": comparison}


STUDY = build()

if __name__ == "__main__":
    executor_main(steps=[STUDY["comparison"]], description="Dense vs MoE at equal active parameters and compute")
