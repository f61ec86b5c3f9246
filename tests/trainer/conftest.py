"""Trainer tests run on CPU with tiny models (a few thousand parameters, seconds to compile).

On a GPU machine ``MARIN_TEST_JAX_PLATFORMS=cuda`` runs them there instead (with
``JAX_DEFAULT_MATMUL_PRECISION=highest``, so fp32 dots are not TF32): that is how the attention kernels'
and FP8 tests ran compiled on an H100 (``benchmarks/gpu_proof.sh``, docs/trainer.md).

XLA:CPU spends most of a tiny model's test time compiling, and many tests (and the subprocesses of the
resume test) compile identical programs, so the session shares a persistent compilation cache in a
fresh temporary directory (cold at the start of every session: nothing is reused across sessions). The root
conftest switches it on in the pytest process itself for these tests (``IN_PROCESS_CACHE_DIRS``).
"""

import dataclasses
import os
import re

from tests.compile_cache import share_compilation_cache

os.environ["JAX_PLATFORMS"] = os.environ.get("MARIN_TEST_JAX_PLATFORMS", "cpu")
share_compilation_cache()

import pytest  # noqa: E402

from marin.trainer.model import LlamaConfig  # noqa: E402


def tiny_model(**overrides) -> LlamaConfig:
    """2 layers, width 64, 4 query / 2 kv heads, seq 32, vocab 256: compiles in ~1 s."""
    base = LlamaConfig(
        vocab_size=256, hidden_dim=64, mlp_dim=128, num_layers=2, num_heads=4, num_kv_heads=2, seq_len=32
    )
    return dataclasses.replace(base, **overrides)


@pytest.fixture
def tiny():
    return tiny_model()


def init(cfg: LlamaConfig, seed: int = 0):
    """Jitted parameter init (eager init dispatches one small program per leaf)."""
    import jax

    from marin.trainer.model import init_params

    return jax.jit(init_params, static_argnums=0)(cfg, jax.random.PRNGKey(seed))


def updates_of_converted_buffers(text: str) -> list[str]:
    """Every ``dynamic-update-slice`` of the compiled program whose buffer operand is a ``convert``: an update
    XLA:CPU does not do in place, because its float normalization turned a bf16 buffer into fp32 for it."""
    found = []
    for computation in re.split(r"\n(?=\S)", text):
        ops = dict(re.findall(r"(%[\w.\-]+) = \S+ ([\w\-]+)\(", computation))
        for name, buffer in re.findall(r"(%[\w.\-]+) = \S+ dynamic-update-slice\((%[\w.\-]+),", computation):
            if ops.get(buffer) == "convert":
                found.append(name)
    return found
