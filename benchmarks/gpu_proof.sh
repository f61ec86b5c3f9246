#!/usr/bin/env bash
# The accelerator proof (issues 29 and 39) on a lent NVIDIA GPU, in phases that each fit one device call:
#
#   bash benchmarks/gpu_proof.sh attention  # attention backends' time and memory (bf16, packed)
#   bash benchmarks/gpu_proof.sh kernels    # attention errors vs fp32, FP8 benchmark, trainer tests on the GPU
#   bash benchmarks/gpu_proof.sh training   # real runs on the bundled data; side by side with PyTorch
#   bash benchmarks/gpu_proof.sh levers1    # issue 39: cuDNN's packing mask, the step beside torch.compile
#   bash benchmarks/gpu_proof.sh levers2    # issue 39: owed GPU tests, more step levers, FP8 at 8B shapes
#   bash benchmarks/gpu_proof.sh serving    # issue 39: the server on llama_1b at 1/16/64 clients beside transformers
#   bash benchmarks/gpu_proof.sh levers3    # issue 39: step vs torch.compile; two fixed tests; FP8 at 8B blocks
#
# Run from the repository root on the GPU machine, with the wheels its image lacks in .whl/ (draccus,
# mergedeep, toml, orjson, zstandard; for `serving` the server's fastapi, starlette, uvicorn, pydantic,
# pydantic-core, annotated-types, annotated-doc, typing-inspection, opentelemetry-api, typing-extensions;
# torchao for the FP8 torch peer) and, for `training`, the token cache from
# `benchmarks/train_run.py prepare --out .gpudata` (docs/trainer.md, "On a GPU", says how; docs/serving.md,
# "On a GPU", lists the serving wheels' versions).
# Logs and JSON results go to $OUT (default: benchmarks/results/gpu); every section has its own time
# limit, so one that fails or hangs does not take the others with it.
set -u
PHASE=${1:?attention, kernels, training, levers1, levers2, serving or levers3}
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
    export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
LOG="$OUT/$PHASE.log"
# GPU_TESTS=<pytest node ids> runs a subset (a lease is short); by default all of these:
TRAINER_GPU_TESTS="tests/trainer/test_pallas_attention.py tests/trainer/test_fp8.py tests/trainer/test_step.py
  tests/trainer/test_model.py tests/trainer/test_blockwise_attention.py"
section() {  # section NAME SECONDS COMMAND...: run with a time limit, log its output and exit status
  local name=$1 limit=$2
  shift 2
  echo "=== $name ($(date -u +%T), limit ${limit}s): $*" | tee -a "$LOG"
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  echo "=== $name: exit ${PIPESTATUS[0]}" | tee -a "$LOG"
}

versions() {  # the device and the frameworks' versions, into the log
  section env 40 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv;
    python3 -c "import jax, torch, transformers; print(\"jax\", jax.__version__, \"torch\", torch.__version__,
\"transformers\", transformers.__version__, jax.devices())"'
}

[ "$PHASE" = attention ] && section env 60 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; python3 - <<EOF
import time, jax, jax.numpy as jnp, torch
print("python", __import__("sys").version.split()[0], "jax", jax.__version__, "torch", torch.__version__, jax.devices())
for dtype, n in ((jnp.bfloat16, 8192), (jnp.float8_e4m3fn, 8192)):
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32).astype(dtype)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32).astype(dtype)
    mm = jax.jit(lambda a, b: jax.lax.dot(a, b, preferred_element_type=jnp.bfloat16))
    mm(a, b).block_until_ready()
    t = time.perf_counter(); [mm(a, b) for _ in range(20)][-1].block_until_ready()
    print(f"{jnp.dtype(dtype).name} {n}^3 matmul: {20 * 2 * n**3 / (time.perf_counter() - t) / 1e12:.0f} TFLOP/s")
EOF'

if [ "$PHASE" = attention ]; then
  # Time and memory: llama_1b's heads (32 / 8, head_dim 64) and llama_8b's (32 / 8, head_dim 128), packed.
  for hd in 64 128; do
    section "attention head_dim $hd" 280 python3 benchmarks/attention_bench.py --dtype bfloat16 --packed \
      --heads 32 --kv-heads 8 --head-dim $hd --seqs 1024 2048 4096 8192 --backends xla cudnn pallas \
      --out "$OUT/attention_hd$hd.json"
  done
elif [ "$PHASE" = kernels ]; then
  # Correctness: every backend against an fp32 reference (one process per head_dim: a GPU process takes
  # seconds to start), at a short and the longest timed sequence.
  for hd in 64 128; do
    section "attention check head_dim $hd" 80 python3 benchmarks/attention_bench.py --dtype bfloat16 --packed \
      --check-only --heads 32 --kv-heads 8 --head-dim $hd --seqs 2048 8192 --backends xla cudnn pallas \
      --out "$OUT/attention_check_hd$hd.json"
  done
  section fp8 90 python3 benchmarks/fp8_bench.py --reps 10 --out "$OUT/fp8_bench.json"
  # The trainer's attention, model, FP8 and step tests, compiled for the GPU (fp32 dots at full precision).
  section tests 150 env MARIN_TEST_JAX_PLATFORMS=cuda JAX_DEFAULT_MATMUL_PRECISION=highest \
    python3 -m pytest -q -p no:cacheprovider --timeout 120 -o addopts="" -rf --tb=short ${GPU_TESTS:-$TRAINER_GPU_TESTS}
elif [ "$PHASE" = training ]; then
  section "train bf16" 170 python3 benchmarks/train_run.py run --cache .gpudata/tokenized --config gpu_1b \
    --steps 200 --out /tmp/run-bf16 --json "$OUT/train_bf16.json"
  section "side by side" 270 python3 benchmarks/trainer_bench.py --device gpu --configs gpu_1b --dtype bfloat16 \
    --peak 989e12 --rounds 2 --seconds-per-turn 2 --peers jax torch_compile torch_compile_fp8 torch_eager \
    --jax-variant fp8='{"matmul_dtype": "float8"}' --out "$OUT/trainer_bench_gpu.json"
elif [ "$PHASE" = levers1 ]; then
  # Issue 39, first call: how cuDNN is given the packing mask (exactness and time, one process), then the
  # whole step with each way of masking beside torch.compile (same model, batch, sequence).
  section env 40 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv;
    python3 -c "import jax, torch; from jax._src.cudnn.fused_attention_stablehlo import check_cudnn_version as v;
print(\"jax\", jax.__version__, \"torch\", torch.__version__, \"cudnn\", v(), jax.devices())"'
  section "cudnn probe" 150 python3 benchmarks/cudnn_attention_probe.py --out "$OUT/cudnn_probe.json"
  section "step levers" 300 python3 benchmarks/trainer_bench.py --device gpu --configs gpu_1b --dtype bfloat16 \
    --peak 989e12 --rounds 1 --steps 15 --peers jax torch_compile \
    --jax-variant masked='{"peer": "jax", "model": {"attention_backend": "cudnn_masked"}}' \
    --jax-variant packed8='{"peer": "jax", "docs_per_row": 8}' \
    --jax-variant masked_packed8='{"peer": "jax", "docs_per_row": 8, "model": {"attention_backend": "cudnn_masked"}}' \
    --out "$OUT/levers1.json"
elif [ "$PHASE" = levers2 ]; then
  # Second call: the owed GPU tests, the remaining step levers, FP8 at llama_8b's projection shapes.
  section tests 110 env MARIN_TEST_JAX_PLATFORMS=cuda JAX_DEFAULT_MATMUL_PRECISION=highest \
    python3 -m pytest -q -p no:cacheprovider --timeout 100 -o addopts="" -rf --tb=short \
    tests/trainer/test_cudnn_attention.py tests/trainer/test_blockwise_attention.py \
    tests/trainer/test_fp8.py::test_backward_multiplies_an_e5m2_gradient_with_the_e4m3_operands \
    tests/trainer/test_model.py::test_flops_per_token_matches_xla_cost_analysis \
    tests/trainer/test_model.py::test_remat_lowers_peak_temp_memory_of_the_layer_scan \
    tests/trainer/test_step.py::test_bf16_policy_runs_the_steps_matmuls_in_bf16
  section "step levers 2" 200 python3 benchmarks/trainer_bench.py --device gpu --configs gpu_1b --dtype bfloat16 \
    --peak 989e12 --rounds 1 --steps 15 --peers jax \
    --jax-variant unrolled='{"peer": "jax", "model": {"scan_layers": false}}' \
    --jax-variant no_triton_gemm='{"peer": "jax", "env": {"XLA_FLAGS": "--xla_gpu_enable_triton_gemm=false"}}' \
    --jax-variant fp8='{"peer": "jax", "matmul_dtype": "float8"}' \
    --out "$OUT/levers2.json"
  section "fp8 8b" 60 python3 benchmarks/fp8_bench.py --models llama_8b --reps 10 --out "$OUT/fp8_8b.json"
elif [ "$PHASE" = serving ]; then
  # Issue 39, a third lease's first call: the serving engine and server on llama_1b (random weights, HF
  # export, bf16 by --dtype auto) at 1, 16 and 64 clients, beside transformers' generate (bf16, static
  # cache; uncompiled, then torch.compile'd by generate on CUDA), each in its own process, one after the
  # other; a peer past the budget is stopped and recorded, the JSON keeps the rest.
  versions
  section serving 540 python3 benchmarks/serving_bench.py --device gpu --preset llama_1b --concurrency 1 16 64 \
    --requests_per_client 4 --max_tokens 64 --peers server transformers_eager transformers \
    --peer_timeout 300 --budget 520 --out "$OUT/serving_gpu.json"
elif [ "$PHASE" = levers3 ]; then
  # Second call, in order of what the issue needs most (each section keeps what it measured if the call is
  # cut): the step beside torch.compile on this card (the H200's 1.025x, unrolled, was never run on an
  # H100), the two tests fixed after the H200 lease, then FP8 over a whole step at llama_8b's blocks (the
  # largest that fits one H100 unsharded) beside bf16, layers unrolled (the GPU default).
  versions
  section "step vs torch.compile" 170 python3 benchmarks/trainer_bench.py --device gpu --configs gpu_1b \
    --dtype bfloat16 --peak 989e12 --rounds 1 --steps 15 --peers jax torch_compile --out "$OUT/step_gpu_1b.json"
  section tests 90 env MARIN_TEST_JAX_PLATFORMS=cuda JAX_DEFAULT_MATMUL_PRECISION=highest \
    python3 -m pytest -q -p no:cacheprovider --timeout 80 -o addopts="" -rf --tb=short \
    tests/trainer/test_model.py::test_flops_per_token_matches_xla_cost_analysis \
    tests/trainer/test_model.py::test_remat_lowers_peak_temp_memory_of_the_layer_scan
  section "fp8 8b blocks" 240 python3 benchmarks/trainer_bench.py --device gpu --configs gpu_8b_blocks \
    --dtype bfloat16 --peak 989e12 --rounds 1 --steps 6 --peers jax \
    --jax-variant fp8='{"peer": "jax", "matmul_dtype": "float8"}' --out "$OUT/fp8_8b_blocks.json"
else
  echo "unknown phase $PHASE: attention, kernels, training, levers1, levers2, serving or levers3" >&2
  exit 2
fi
