"""Score an export on 4 simulated CPU devices: ``python sharded_eval_script.py EXPORT HELD_OUT.jsonl TASK.jsonl OUT``.

Prints where the parameters live (their shardings) and writes ``evaluate_model``'s results; the test compares
them with the one-device results of the same export."""

import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"

import json  # noqa: E402

import jax  # noqa: E402

from marin.evaluation.step import EvalConfig, evaluate_model  # noqa: E402
from marin.inference import load_model, place_params  # noqa: E402

if __name__ == "__main__":
    export, held_out, task, out = sys.argv[1:5]
    cfg, params, _ = load_model(export, None)
    placed = place_params(cfg, params)
    specs = {
        "/".join(str(k.key) for k in path): [str(a) for a in leaf.sharding.spec]
        for path, leaf in jax.tree_util.tree_flatten_with_path(placed)[0]
    }
    results = evaluate_model(
        EvalConfig(
            checkpoint_path=export,
            tokenizer=export,
            output_path=out,
            validation={"held_out": held_out},
            tasks=[task],
            batch_size=4,
        )
    )
    print(json.dumps({"devices": jax.device_count(), "specs": specs, "results": results}))
