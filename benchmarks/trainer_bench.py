"""Trainer throughput on this host: ``train()`` as a user calls it vs PyTorch (eager, torch.compile), even-handed.

    .venv/bin/python benchmarks/trainer_bench.py                      # nano, small, medium: train vs torch.compile
    .venv/bin/python benchmarks/trainer_bench.py --configs nano --rounds 3 --peers train jax torch_eager
    .venv/bin/python benchmarks/trainer_bench.py --peers jax torch_compile --baseline main   # our step, before/after
    .venv/bin/python benchmarks/trainer_bench.py --dtype bfloat16 --configs nano small       # bf16 compute both sides
    python benchmarks/trainer_bench.py --device gpu --configs gpu_1b --dtype bfloat16 --peak 989e12 --rounds 1 \
        --peers train torch_eager torch_compile torch_compile_fp8 --jax-variant fp8='{"matmul_dtype": "float8"}'

Every peer trains the same model (Llama: RMSNorm, GQA + RoPE, SwiGLU, untied embeddings) with the same
optimizer (AdamW, clip 1.0, wd 0.1), fp32 unless ``--dtype bfloat16`` (fp32 parameters, bf16 matmuls: our
``PrecisionPolicy``, torch's ``autocast``). Peers:

* ``train``: ``marin.trainer.train()`` exactly as a user calls it, first thing in a fresh process, on
  ``SyntheticSourceConfig`` documents (the loop, its prefetch thread, metrics and the final checkpoint
  included); tokens/s is what it logs to ``metrics.jsonl``, wall time between two log flushes;
* ``jax``: our jitted step alone on fixed random batches (no loop): the loop's cost is ``train`` against it;
* ``torch_eager``, ``torch_compile`` (fused/foreach AdamW), ``torch_compile_fp8`` (torchao, GPU only): CPU
  torch in a benchmark-only venv (``benchmarks/.venv-torch``, ``pip install torch==2.13.0``); on a GPU the
  machine's own torch.

Even-handed by construction: every peer runs in a fresh process per round; each process runs ``--steps``
untimed steps (the first compiles), then ``--steps`` timed steps with one host sync at the end, and reports
tokens per wall-clock second over those; rounds rotate the order so background load hits all peers alike,
and the table gives the median over rounds with min/max as the noise. Before the peers, the host is
recorded: CPU model and ISA flags, torch's BLAS (MKL/oneDNN), and both frameworks' best ``n x n x n``
matmul rates in fp32 and bf16 (fresh processes each); MFU divides by the best of those in the run's dtype.
``--peak`` overrides it (on a GPU give the data sheet's dense bf16 peak).

``--device gpu`` runs every peer on the GPU with the interpreter that runs this script (a GPU machine's
own jax and torch; no venvs are made): torch with ``autocast("cuda", bfloat16)``, fused AdamW and K/V
repeated for SDPA as torchtitan does; ``torch_compile_fp8`` converts the blocks' linears with torchao's
``convert_to_float8_training`` (tensorwise scaling, the lm_head kept out, as ours) before compiling.

``--baseline REV`` adds our step (``jax``) as of a git revision (``git archive`` of ``marin/`` into a
temporary directory, run by the same worker code), for before/after ratios measured side by side.
``--jax-variant NAME=JSON`` adds ``train`` runs with other settings (``model`` fields, ``compute_dtype``,
``matmul_dtype``, ``optimizer`` fields, ``env`` such as ``XLA_FLAGS``; ``"peer": "jax"`` makes it a run of our
step alone, where ``docs_per_row`` packs that many documents into each row). Each optimizer's step beside
AdamW's (docs/optimizers.md; lion, adafactor and schedule_free_adamw alike):

    .venv/bin/python benchmarks/trainer_bench.py --configs small medium --peers jax --out \
        benchmarks/results/optimizer_step_bench.json \
        --jax-variant muon='{"peer": "jax", "optimizer": {"kind": "muon"}}' \
        --jax-variant soap='{"peer": "jax", "optimizer": {"kind": "soap"}}'

Results go to ``benchmarks/results/trainer_bench.json`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from host import export_revision, trainer_env  # noqa: E402  benchmarks/ is the script's own directory

ROOT = HERE.parent
PROJECT_PY = ROOT / ".venv" / "bin" / "python"
TORCH_VENV = HERE / ".venv-torch"
LEVANTER_VENV = HERE / ".venv-levanter"
RESULTS = HERE / "results" / "trainer_bench.json"

# nano and small are issue 6's configs, medium issue 18's, quickstart the quickstart's pretraining model;
# `batch` is rows per step, the rest is the model.
CONFIGS = {
    "nano": dict(
        vocab_size=8192, hidden_dim=256, mlp_dim=688, num_layers=2, num_heads=4, num_kv_heads=4, seq_len=256, batch=8
    ),
    "small": dict(
        vocab_size=8192, hidden_dim=512, mlp_dim=1376, num_layers=6, num_heads=8, num_kv_heads=4, seq_len=512, batch=8
    ),
    "medium": dict(
        vocab_size=8192, hidden_dim=768, mlp_dim=2048, num_layers=8, num_heads=12, num_kv_heads=4, seq_len=1024, batch=4
    ),
    # The quickstart's pretraining run (llama_nano at its 2k vocab, batch 16): its share of the cold time.
    "quickstart": dict(
        vocab_size=2048, hidden_dim=256, mlp_dim=688, num_layers=2, num_heads=4, num_kv_heads=4, seq_len=256, batch=16
    ),
    # nanoGPT's CPU baby GPT as experiments/shakespeare_char.py trains it (character vocabulary, batch 12).
    "baby": dict(
        vocab_size=66, hidden_dim=128, mlp_dim=344, num_layers=4, num_heads=4, num_kv_heads=4, seq_len=64, batch=12
    ),
    # GPU configs (issue 29): llama_150m's and llama_1b's blocks (untied) at seq 2048, with the 8k vocab of
    # the bundled tokenizer that benchmarks/train_run.py trains the same model with.
    "gpu_150m": dict(
        vocab_size=8192,
        hidden_dim=768,
        mlp_dim=2688,
        num_layers=12,
        num_heads=12,
        num_kv_heads=12,
        seq_len=2048,
        batch=16,
    ),
    "gpu_1b": dict(
        vocab_size=8192,
        hidden_dim=2048,
        mlp_dim=8192,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        seq_len=2048,
        batch=8,
    ),
    # llama_8b's blocks (4096 x 14336 projections, where FP8 pays: docs/trainer.md) with 10 of its 32 layers:
    # 2.2 B parameters, whose fp32 weights, gradients and AdamW state (36 GB) and bf16 activations (~14 GB,
    # no remat) fit in the 75% of an H100's memory that XLA takes by default.
    "gpu_8b_blocks": dict(
        vocab_size=8192,
        hidden_dim=4096,
        mlp_dim=14336,
        num_layers=10,
        num_heads=32,
        num_kv_heads=8,
        seq_len=2048,
        batch=4,
    ),
}
# Timed steps per process (as many untimed ones before them): a few seconds to tens of seconds per turn.
STEPS = {
    "baby": 100,
    "nano": 30,
    "small": 8,
    "medium": 4,
    "quickstart": 30,
    "gpu_150m": 20,
    "gpu_1b": 20,
    "gpu_8b_blocks": 10,
}
PEAK_N = 2048  # the peak is the best rate of an n x n x n matmul, per framework and dtype
LR, WD, CLIP, BETAS, EPS = 1e-3, 0.1, 1.0, (0.9, 0.95), 1e-8
ADAMW = dict(learning_rate=LR, weight_decay=WD, max_grad_norm=CLIP, beta1=BETAS[0], beta2=BETAS[1], epsilon=EPS)
"""The optimizer fields ours and Levanter's configs share (same names in both)."""


def flops_per_token(c: dict) -> float:
    """PaLM's 6N + 12·L·H·Q·T (same formula as LlamaConfig.flops_per_token)."""
    d, hd = c["hidden_dim"], c["hidden_dim"] // c["num_heads"]
    attn = d * hd * (2 * c["num_heads"] + 2 * c["num_kv_heads"])
    n = c["num_layers"] * (attn + 3 * d * c["mlp_dim"]) + d * c["vocab_size"]
    return 6.0 * n + 12 * c["num_layers"] * c["num_heads"] * hd * c["seq_len"]


def model_dims(c: dict) -> dict:
    """The config without its batch size: the ``LlamaConfig`` fields."""
    return {k: v for k, v in c.items() if k != "batch"}


def batches(c: dict, n: int = 4):
    import numpy as np

    rng = np.random.default_rng(0)
    return [rng.integers(1, c["vocab_size"], size=(c["batch"], c["seq_len"] + 1), dtype=np.int64) for _ in range(n)]


def packed_segments(c: dict, docs_per_row: int):
    """Segment ids [batch, seq] of ``docs_per_row`` documents per row at random cut points (1: the
    unsegmented rows every peer trains on; more measures what packing costs our attention)."""
    import numpy as np

    rng = np.random.default_rng(1)
    seq = c["seq_len"]
    cuts = np.sort(rng.choice(np.arange(1, seq), size=(c["batch"], docs_per_row - 1), replace=False), axis=1)
    return np.stack([np.searchsorted(row, np.arange(seq), side="right") for row in cuts]).astype(np.int32)


def optimizer(variant: dict):
    """Our side of the shared optimizer: AdamW at a constant rate, clipping, decoupled weight decay; a variant's
    ``optimizer`` fields (e.g. ``{"kind": "muon"}``) override it, for each optimizer's step cost beside AdamW's."""
    from marin.trainer.optim import OptimizerConfig

    return OptimizerConfig(**{**ADAMW, "schedule": "constant", "warmup": 0, **variant.get("optimizer", {})})


def precision(variant: dict):
    from marin.trainer.step import PrecisionPolicy

    return PrecisionPolicy(
        compute_dtype=variant.get("compute_dtype", "float32"), matmul_dtype=variant.get("matmul_dtype", "default")
    )


# ----------------------------------------------------------------------------------------------------------
# Workers: a `step() -> loss` closure per peer (timed by `timed_worker`), or `train()` itself (`train_worker`).


def jax_worker(c: dict, variant: dict):

    import jax
    import numpy as np

    from marin.trainer.loop import tune_host_allocator
    from marin.trainer.model import LlamaConfig, param_axes
    from marin.trainer.step import StepConfig, init_state, make_train_step

    if variant.get("tune_malloc", True) and variant.get("device", "cpu") == "cpu":
        tune_host_allocator()  # what train() does first

    cfg = LlamaConfig(**model_dims(c), **variant.get("model", {}))
    opt = optimizer(variant)
    tx = opt.build(1000, param_axes(cfg))
    policy = precision(variant)
    # the average is part of an optimizer's step only for schedule-free (its x); an EMA is no peer's
    averaging = opt.schedule_free
    state = init_state(cfg, tx, jax.random.PRNGKey(0), ema=averaging, policy=policy)
    step_cfg = StepConfig(precision=policy, schedule_free=averaging)
    train_step = make_train_step(cfg, tx, opt.lr_schedule(1000), step_cfg)
    data = []
    for tokens in batches(c):
        t = tokens.astype(np.int32)
        b = {
            "input_ids": t[:, :-1],
            "targets": t[:, 1:],
            "loss_mask": np.ones(t[:, 1:].shape, np.float32),
            "segment_ids": packed_segments(c, variant.get("docs_per_row", 1)),
        }
        data.append(jax.device_put(b))
    holder = {"state": state, "i": 0}

    def step():
        holder["state"], metrics = train_step(holder["state"], data[holder["i"] % len(data)])
        holder["i"] += 1
        return metrics["loss"]

    return step, lambda loss: float(loss)


def torch_worker(c: dict, variant: dict):

    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    dev = torch.device("cuda" if variant.get("device") == "gpu" else "cpu")
    if dev.type == "cpu":
        torch.set_num_threads(os.cpu_count() or 1)
    d, h, kv = c["hidden_dim"], c["num_heads"], c["num_kv_heads"]
    hd = d // h

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    def rope(x, cos, sin):  # x [batch, heads, seq, head_dim]
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm, self.mlp_norm = RMSNorm(), RMSNorm()
            self.wq, self.wk, self.wv = (
                nn.Linear(d, h * hd, bias=False),
                nn.Linear(d, kv * hd, bias=False),
                nn.Linear(d, kv * hd, bias=False),
            )
            self.wo = nn.Linear(h * hd, d, bias=False)
            self.w_gate, self.w_up = nn.Linear(d, c["mlp_dim"], bias=False), nn.Linear(d, c["mlp_dim"], bias=False)
            self.w_down = nn.Linear(c["mlp_dim"], d, bias=False)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            y = self.attn_norm(x)
            q = self.wq(y).view(b, s, h, hd).transpose(1, 2)
            k = self.wk(y).view(b, s, kv, hd).transpose(1, 2)
            v = self.wv(y).view(b, s, kv, hd).transpose(1, 2)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            if dev.type == "cuda" and kv != h:  # torchtitan's repeat_kv: the flash kernel then serves GQA
                k, v = (x.repeat_interleave(h // kv, dim=1) for x in (k, v))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != h and dev.type == "cpu")
            x = x + self.wo(o.transpose(1, 2).reshape(b, s, d))
            y = self.mlp_norm(x)
            return x + self.w_down(F.silu(self.w_gate(y)) * self.w_up(y))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(c["vocab_size"], d)
            self.layers = nn.ModuleList(Block() for _ in range(c["num_layers"]))
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(d, c["vocab_size"], bias=False)
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.normal_(p, std=0.02)
            inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
            ang = torch.arange(c["seq_len"]).float()[:, None] * inv[None]
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, tokens, targets):
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer(x, self.cos, self.sin)
            logits = self.lm_head(self.norm(x)).float()
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))

    model = Llama().to(dev)
    if variant.get("fp8"):  # torchao's float8 training: tensorwise dynamic scales, lm_head kept out (as ours)
        from torchao.float8 import convert_to_float8_training

        convert_to_float8_training(model, module_filter_fn=lambda module, fqn: fqn != "lm_head")
    decay = [p for n, p in model.named_parameters() if p.dim() > 1 and "embed" not in n and "lm_head" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() > 1 and "embed" not in n and "lm_head" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}],
        lr=LR,
        betas=BETAS,
        eps=EPS,
        **({"fused": True} if dev.type == "cuda" else {"foreach": True}),
    )
    loss_fn = torch.compile(model) if variant.get("compile") else model
    data = [torch.from_numpy(t).to(dev) for t in batches(c)]
    holder = {"i": 0}

    def step():
        t = data[holder["i"] % len(data)]
        holder["i"] += 1
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=variant.get("compute_dtype") == "bfloat16"):
            loss = loss_fn(t[:, :-1], t[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step, lambda loss: float(loss)


def levanter_worker(c: dict, variant: dict):
    """Levanter's own model, loss and optimizer (haliax + equinox), in the shape of Levanter's
    ``Trainer._train_step``: cast-free fp32, value_and_grad, ``AdamConfig.build``, donated state.
    Remat is off (``gradient_checkpointing=False``) so every peer does the same FLOPs; layers are
    scanned (Levanter's default)."""
    import equinox as eqx
    import haliax as hax
    import jax
    import jax.numpy as jnp
    from levanter.models.llama import LlamaConfig as LevLlamaConfig
    from levanter.models.lm_model import LmExample
    from levanter.optim import AdamConfig

    cfg = LevLlamaConfig(
        max_seq_len=c["seq_len"],
        hidden_dim=c["hidden_dim"],
        intermediate_dim=c["mlp_dim"],
        num_layers=c["num_layers"],
        num_heads=c["num_heads"],
        num_kv_heads=c["num_kv_heads"],
        gradient_checkpointing=False,
    )
    Vocab, Batch, Pos = hax.Axis("vocab", c["vocab_size"]), hax.Axis("batch", c["batch"]), cfg.max_Pos
    model = cfg.model_type.init(Vocab, cfg, key=jax.random.PRNGKey(0))
    opt = AdamConfig(**ADAMW, warmup=0.0, lr_schedule="constant").build(1000)
    opt_state = opt.init(eqx.filter(model, eqx.is_inexact_array))

    def loss_fn(model, tokens):
        example = hax.vmap(LmExample.causal, Batch)(tokens)
        return model.compute_next_token_loss(example, key=None).scalar()

    @hax.named_jit(donate_args=(True, True, False))
    def train_step(model, opt_state, tokens):
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, tokens)
        updates, opt_state = opt.update(grads, opt_state, params=eqx.filter(model, eqx.is_inexact_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    # Levanter predicts within a window of seq_len tokens (the last position has no target).
    data = [hax.named(jnp.asarray(t[:, :-1], jnp.int32), (Batch, Pos)) for t in batches(c)]
    holder = {"model": model, "opt_state": opt_state, "i": 0}

    def step():
        holder["model"], holder["opt_state"], loss = train_step(
            holder["model"], holder["opt_state"], data[holder["i"] % len(data)]
        )
        holder["i"] += 1
        return loss

    return step, lambda loss: float(loss)


def jax_peak_worker(c: dict, variant: dict):
    """A 'peak' pseudo-peer: XLA's ``n x n x n`` matmul of operands in the variant's dtype (for MFU and the host
    record)."""
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(variant.get("compute_dtype", "float32"))
    a = b = jnp.full((PEAK_N, PEAK_N), 0.01, dtype)
    # bf16 operands with an fp32 result, as dense() multiplies them (XLA:CPU's fast bf16 kernels)
    mm = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    return lambda: mm(a, b), lambda out: float(out[0, 0])


def torch_peak_worker(c: dict, variant: dict):
    """The same matmul through torch (MKL in fp32, oneDNN in bf16 on CPU)."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    dtype = getattr(torch, variant.get("compute_dtype", "float32"))
    a = b = torch.full((PEAK_N, PEAK_N), 0.01, dtype=dtype)
    return lambda: a @ b, lambda out: float(out[0, 0])


def train_worker(c: dict, variant: dict, steps: int) -> dict:
    """``train()`` as a user calls it, for ``2 * steps`` updates logged every ``steps``: the first flush
    covers compilation and warm-up, the second is the timed one (its ``throughput/tokens_per_s``)."""
    from marin.trainer import (
        CheckpointConfig,
        DataConfig,
        SyntheticSourceConfig,
        TrackerConfig,
        TrainerConfig,
        TrainLmConfig,
        train,
    )
    from marin.trainer.model import LlamaConfig

    model = LlamaConfig(**model_dims(c), **variant.get("model", {}))
    tokens = 2 * steps * c["batch"] * (c["seq_len"] + 1) * 2
    # Long documents, as in the other peers' unsegmented rows; the loop still packs and masks them.
    docs = SyntheticSourceConfig(
        vocab_size=c["vocab_size"], num_tokens=tokens, min_doc_len=4 * c["seq_len"], max_doc_len=4 * c["seq_len"]
    )
    with tempfile.TemporaryDirectory(prefix="trainer-bench-run-") as out:
        config = TrainLmConfig(
            output_path=out,
            model=model,
            data=DataConfig(train={"bench": docs}),
            optimizer=optimizer(variant),
            trainer=TrainerConfig(
                num_train_steps=2 * steps,
                batch_size=c["batch"],
                log_every=steps,
                precision=precision(variant),
                checkpoint=CheckpointConfig(save_interval_minutes=None),
                tracker=TrackerConfig(wandb=False, progress_bar=False),
            ),
        )
        t0 = time.perf_counter()
        result = train(config)
        total = time.perf_counter() - t0
        logged = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines()]
    rates = {m["step"]: m["throughput/tokens_per_s"] for m in logged if "throughput/tokens_per_s" in m}
    step_s = c["batch"] * c["seq_len"] / rates[2 * steps]
    return {
        "seconds": step_s * steps,
        "first_step_s": c["batch"] * c["seq_len"] * steps / rates[steps] - (steps - 1) * step_s,
        "process_s": total,
        "loss": result.train_loss,
    }


def timed_worker(kind: str, c: dict, variant: dict, steps: int) -> dict:
    """A step closure's peer: build, ``steps`` untimed steps (the first compiles), ``steps`` timed ones."""
    t0 = time.perf_counter()
    step, to_float = WORKERS[kind](c, variant)
    built = time.perf_counter()
    to_float(step())  # tracing + compilation + one step
    first = time.perf_counter()
    for _ in range(steps - 1):
        loss = step()
    if steps > 1:
        to_float(loss)
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    value = to_float(loss)  # the only host sync: waits for the last step
    end = time.perf_counter()
    return {"seconds": end - start, "first_step_s": first - built, "process_s": end - t0, "loss": value}


WORKERS = {
    "jax": jax_worker,
    "torch_eager": torch_worker,
    "torch_compile": torch_worker,
    "torch_compile_fp8": torch_worker,
    "levanter": levanter_worker,
    "jax_peak": jax_peak_worker,
    "torch_peak": torch_peak_worker,
}


def serve(kind: str, config: str, variant: dict, steps: int) -> None:
    """Worker main: one measurement, printed as the last line of JSON."""
    c = CONFIGS[config]
    out = train_worker(c, variant, steps) if kind == "train" else timed_worker(kind, c, variant, steps)
    print(json.dumps({"steps": steps, **out}), flush=True)


# ----------------------------------------------------------------------------------------------------------
# Parent: venvs, workers, rounds, report.


def ensure_venv(venv: Path, packages: list[str]) -> Path | None:
    """Create a benchmark-only venv with exactly these packages (never touches the project venv)."""
    python = venv / "bin" / "python"
    marker = venv / ".bench-installed"
    if marker.exists() and marker.read_text() == " ".join(packages):
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    result = subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], capture_output=True, text=True)
    if result.returncode != 0:
        print(f"[bench] could not install {packages} into {venv}:\n{result.stderr[-2000:]}", file=sys.stderr)
        return None
    marker.write_text(" ".join(packages))
    return python


def run_worker(spec: tuple, config: str, steps: int, device: str = "cpu", timeout: float = 1800) -> dict | None:
    """One fresh process of peer ``spec`` (name, python, kind, variant, env): its measurement, or None when
    it cannot run here (the reason goes to stderr)."""
    name, python, kind, variant, env = spec
    cmd = [str(python), str(Path(__file__).resolve()), "--worker", kind, "--config", config]
    cmd += ["--variant", json.dumps(variant), "--steps", str(steps)]
    path = os.pathsep.join([str(ROOT), str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    full_env = {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": {"cpu": "cpu", "gpu": "cuda"}[device], **env}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"[bench] {config}/{name}: skipped (over {timeout:.0f} s)", file=sys.stderr)
        return None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        print(f"[bench] {config}/{name}: skipped (exit {proc.returncode}): {proc.stderr[-1500:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1])


def peer_specs(
    peers: list[str],
    variants: dict[str, dict],
    baselines: dict[str, Path] | None = None,
    dtype: str = "float32",
    device: str = "cpu",
):
    """``(name, python, worker kind, variant, env)`` per peer, JAX variant and baseline revision."""
    specs = []
    lab_env = trainer_env() if device == "cpu" else {}  # the lab's processes start as the executor starts them
    # bf16: our PrecisionPolicy, torch.autocast; parameters stay fp32
    compute = {"compute_dtype": dtype, "device": device}
    project_py = PROJECT_PY if device == "cpu" else Path(sys.executable)  # a GPU machine's own jax and torch
    for peer in peers:
        if peer in ("train", "jax"):
            specs.append((peer, project_py, peer, compute, lab_env))
        elif peer in ("torch_eager", "torch_compile", "torch_compile_fp8"):
            python = project_py if device == "gpu" else ensure_venv(TORCH_VENV, ["torch==2.13.0", "numpy"])
            if python:
                variant = {"compile": peer != "torch_eager", "fp8": peer == "torch_compile_fp8", **compute}
                specs.append((peer, python, "torch_eager", variant, {}))
        elif peer == "levanter":
            python = ensure_venv(LEVANTER_VENV, ["--pre", "marin-levanter", "gitpython"])
            if python:
                specs.append(("levanter", python, "levanter", {}, {}))
        else:
            raise SystemExit(f"unknown peer {peer!r}")
    at = next((i + 1 for i, spec in enumerate(specs) if spec[0] == "train"), len(specs))  # variants follow ours
    for name, spec in variants.items():  # extra runs: --jax-variant NAME='{"model": {...}}'
        env = {**lab_env, **spec.pop("env", {})}
        kind = spec.pop("peer", "train")  # "jax": our step alone, with these settings
        specs.insert(at, (name, project_py, kind, {**compute, **spec}, env))
        at += 1
    for rev, root in (baselines or {}).items():  # --baseline REV: our step as of an older commit
        specs.append((f"jax@{rev}", project_py, "jax", compute, {**lab_env, "PYTHONPATH": f"{root}{os.pathsep}{HERE}"}))
    return specs


def _summary(runs: list[dict], c: dict, peak: float) -> dict:
    tokens_per_step = c["batch"] * c["seq_len"]
    tps = [tokens_per_step * r["steps"] / r["seconds"] for r in runs]
    med = statistics.median(tps)
    return {
        "tokens_per_s": med,
        "tokens_per_s_min": min(tps),
        "tokens_per_s_max": max(tps),
        "rounds": len(runs),
        "mfu": med * flops_per_token(c) / peak,
        "compile_s": statistics.median(r["first_step_s"] for r in runs),
        "timed_steps": runs[0]["steps"],
        "final_loss": runs[-1]["loss"],
    }


def bench_config(config: str, specs, rounds: int, steps: int, peak: float, device: str = "cpu") -> dict:
    """Every peer's tokens/s on ``config``: ``rounds`` fresh processes each, the order rotating per round."""
    c = CONFIGS[config]
    runs: dict[str, list[dict]] = {spec[0]: [] for spec in specs}
    for r in range(rounds):
        for spec in specs[r % len(specs) :] + specs[: r % len(specs)]:
            out = run_worker(spec, config, steps, device)
            if out is not None:
                runs[spec[0]].append(out)
                rate = c["batch"] * c["seq_len"] * steps / out["seconds"]
                print(f"[bench] {config}/{spec[0]} round {r + 1}: {rate:,.0f} tokens/s", file=sys.stderr, flush=True)
    return {name: _summary(got, c, peak) for name, got in runs.items() if got}


def measure_peaks(dtypes: list[str], rounds: int, torch_python: Path | None) -> dict[str, float]:
    """Both frameworks' best ``n x n x n`` matmul rate per dtype, FLOP/s: on a shared machine the best of
    a few short runs is closest to what the hardware does."""
    peaks = {}
    for dtype in dtypes:
        for framework, python in (("jax", PROJECT_PY), ("torch", torch_python)):
            if python is None:
                continue
            spec = (f"{framework}_peak", python, f"{framework}_peak", {"compute_dtype": dtype}, {})
            seconds = [out["seconds"] / out["steps"] for _ in range(rounds) if (out := run_worker(spec, "nano", 10))]
            if seconds:
                peaks[f"{framework}_{dtype}"] = 2 * PEAK_N**3 / min(seconds)
    return peaks


def host_record(torch_python: Path | None) -> dict:
    """What the numbers depend on: CPU model and ISA, cores, both frameworks' versions and torch's BLAS."""
    info = {"cpu_count": os.cpu_count(), "cpu_model": "", "isa": []}
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        info["cpu_model"] = next(line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line)
        flags = set(next(line for line in cpuinfo.splitlines() if line.startswith("flags")).split())
        wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_fp16")
        info["isa"] = [f for f in wanted if f in flags]
    except (OSError, StopIteration):
        pass
    probe = "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)"
    info["jax"] = subprocess.run([str(PROJECT_PY), "-c", probe], capture_output=True, text=True).stdout.strip()
    info["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    if torch_python:
        probe = (
            "import torch; c = torch.__config__.show(); print(torch.__version__); keys = ('Math Kernel', 'MKL-DNN',"
            " 'oneDNN', 'OpenMP'); print(*[l.strip() for l in c.splitlines() if any(k in l for k in keys)], sep='\\n')"
        )
        out = subprocess.run([str(torch_python), "-c", probe], capture_output=True, text=True).stdout.split("\n")
        info["torch"], info["torch_blas"] = out[0], [line for line in out[1:] if line]
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--configs", nargs="+", default=["nano", "small", "medium"], choices=list(CONFIGS))
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu", help="where every peer runs")
    parser.add_argument("--peers", nargs="+", default=["train", "torch_compile"])
    parser.add_argument(
        "--jax-variant",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help='extra train() runs, e.g. scan=\'{"model": {"scan_layers": true}}\' or '
        'flags=\'{"env": {"XLA_FLAGS": "..."}}\'',
    )
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="REV",
        help="also run our step (the jax peer) as of this git revision (before/after), e.g. --baseline main",
    )
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="compute dtype of jax and torch (bfloat16: fp32 parameters, bf16 matmuls)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per peer and config")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per process (default: per config)")
    parser.add_argument(
        "--peak", type=float, default=None, help="peak FLOP/s for MFU (default: the best matmul rate measured here)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the report goes as JSON")
    args = parser.parse_args()
    if args.worker:
        serve(args.worker, args.config, json.loads(args.variant), args.steps)
        return
    if args.device == "gpu" and not args.peak:
        raise SystemExit("--device gpu needs --peak (the GPU's dense bf16 peak, e.g. 989e12 for an H100 SXM)")
    uses_torch = any(p.startswith("torch") for p in args.peers)
    torch_python = None
    if args.device == "cpu" and uses_torch:
        torch_python = ensure_venv(TORCH_VENV, ["torch==2.13.0", "numpy"])
    report = {
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "dtype": args.dtype,
        "device": args.device,
        "host": host_record(torch_python) if args.device == "cpu" else {},
        "load_avg_before": os.getloadavg(),
        "configs": {},
    }
    if args.peak:
        peak = args.peak
    else:
        report["matmul_peaks"] = measure_peaks(sorted({"float32", args.dtype}), 3, torch_python)
        peak = max(v for k, v in report["matmul_peaks"].items() if k.endswith(args.dtype))
    report["peak_flops"] = peak
    print(f"[bench] host: {json.dumps(report['host'])}", file=sys.stderr)
    for name, rate in report.get("matmul_peaks", {}).items():
        print(f"[bench] {PEAK_N}^3 matmul, {name}: {rate / 1e9:,.0f} GFLOP/s", file=sys.stderr)
    print(f"[bench] peak for MFU: {peak / 1e9:,.0f} GFLOP/s", file=sys.stderr)
    baselines = {rev: export_revision(rev) for rev in args.baseline}
    variants = dict(v.split("=", 1) for v in args.jax_variant)
    for config in args.configs:
        specs = peer_specs(
            args.peers, {k: json.loads(v) for k, v in variants.items()}, baselines, args.dtype, args.device
        )
        steps = args.steps or STEPS[config]
        report["configs"][config] = res = bench_config(config, specs, args.rounds, steps, peak, args.device)
        base = res.get("train") or res.get("jax")
        print(f"\n{config}: tokens/s median [min-max] over fresh processes, MFU, compile (first step) s")
        for name, r in res.items():
            ratio = f"  ours/{name} = {base['tokens_per_s'] / r['tokens_per_s']:.2f}x" if base and r is not base else ""
            print(
                f"  {name:18s} {r['tokens_per_s']:8.0f} [{r['tokens_per_s_min']:.0f}-{r['tokens_per_s_max']:.0f}]"
                f"  MFU {r['mfu']:6.1%}  compile {r['compile_s']:5.1f}s{ratio}"
            )
    report["load_avg_after"] = os.getloadavg()
    print(f"\nload average (1, 5, 15 min): before {report['load_avg_before']}, after {report['load_avg_after']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
