"""Where a serving step's time goes: one engine program traced with ``jax.profiler``, its operations' times
summed by kind and output shape (a dot's shape tells which matrix product it is).

    python benchmarks/engine_step_profile.py [--preset small] [--slots 16] [--rows 16] [--span 256]
        [--program decode|prefill|mixed] [--chunk 64] [--steps 20]

Random weights of ``--preset``; ``decode`` is one decoding step of ``--rows`` rows attending over ``--span``
cache positions, ``prefill`` one chunk of ``--chunk`` prompt tokens, ``mixed`` both in one program. Times are
per step, summed over operations: operations that run at once on different cores each count in full, so the
sum can exceed the step's wall time (printed beside it). This is how the span copies (a quarter of a 16-row
step) and a top-k turned into a full sort were found (docs/serving.md).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

# the runtime's own events, not operations of the program
_RUNTIME = ("ThunkExecutor", "$", "Pjit", "Slinky", "Common", "PjRt", "Execute", "end: ", "Parse", "Handle")


def op_times(trace_dir: str, steps: int) -> dict[str, float]:
    """Milliseconds per step of each traced operation (by its HLO name)."""
    [path] = glob.glob(f"{trace_dir}/**/*.trace.json.gz", recursive=True)
    times: dict[str, float] = collections.defaultdict(float)
    for event in json.load(gzip.open(path))["traceEvents"]:
        if event.get("ph") == "X" and "dur" in event and not event["name"].startswith(_RUNTIME):
            times[event["name"]] += event["dur"] / steps / 1e3
    return times


def output_shapes(hlo: str) -> dict[str, str]:
    """Each instruction's output shape in the compiled HLO text."""
    shapes = {}
    for line in hlo.splitlines():
        match = re.match(r"\s*(?:ROOT )?%(\S+) = (\S+) ", line)
        if match:
            shapes[match.group(1)] = match.group(2)
    return shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--span", type=int, default=256)
    parser.add_argument("--program", choices=["decode", "prefill", "mixed"], default="decode")
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()

    import jax
    import numpy as np

    from marin.inference.slots import (
        SamplingRows,
        decode_slots,
        init_slot_cache,
        mixed_step,
        prefill_chunk,
        split_layers,
    )
    from marin.trainer.model.config import model_preset
    from marin.trainer.model.llama import init_params

    cfg = model_preset(args.preset)
    params = split_layers(init_params(cfg, jax.random.PRNGKey(0)))
    state = {"cache": init_slot_cache(cfg, args.slots, max(256, args.chunk))}
    greedy = SamplingRows.of([(0.0, 0, 1.0, 0, 0)] * args.rows)
    one = SamplingRows.of([(0.0, 0, 1.0, 0, 0)])
    tokens = np.zeros(args.rows, np.int32)
    positions = np.full(args.rows, args.span // 2, np.int32)
    chunk, slot = np.zeros(args.chunk, np.int32), args.slots - 1  # the prompt's slot: the last one
    program, rest = {
        "decode": (decode_slots, (tokens, positions, greedy, args.span)),
        "prefill": (prefill_chunk, (slot, chunk, chunk, 0, args.chunk, False, one, args.span)),
        "mixed": (mixed_step, (slot, chunk, chunk, 0, args.chunk, False, one, tokens, positions, greedy, args.span)),
    }[args.program]

    def step():
        *out, state["cache"] = program(cfg, params, state["cache"], *rest)
        jax.block_until_ready(out)

    hlo = program.lower(cfg, params, state["cache"], *rest).compile().as_text()
    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    wall = (time.perf_counter() - start) / args.steps * 1e3
    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
        for _ in range(args.steps):
            step()
        jax.profiler.stop_trace()
        times = op_times(trace_dir, args.steps)
    shapes = output_shapes(hlo)
    groups: dict[tuple[str, str], list] = collections.defaultdict(lambda: [0.0, 0])
    for name, ms in times.items():
        group = groups[(re.sub(r"\.\d+$", "", name), shapes.get(name, "?"))]
        group[0] += ms
        group[1] += 1
    print(
        f"{args.program}, `{args.preset}`, {args.rows} rows, span {args.span}"
        + (f", chunk {args.chunk}" if args.program != "decode" else "")
        + f": {wall:.1f} ms per step (untraced), operations sum to {sum(times.values()):.1f} ms"
    )
    print("\n| ms per step | count | operation | output shape |\n|---|---|---|---|")
    for (kind, shape), (ms, count) in sorted(groups.items(), key=lambda item: -item[1][0])[: args.top]:
        print(f"| {ms:.2f} | {count} | {kind} | `{shape}` |")


if __name__ == "__main__":
    main()
