"""lm-evaluation-harness tasks from the eval step, through the engine in process or through the server.

    run_harness(checkpoint, tokenizer, ["hellaswag", "wikitext"], via="engine", batch_size=32)
    run_harness(checkpoint, tokenizer, ["my_task"], via="server", include_path="tasks/")

``via="engine"``: lm-eval's ``--model marin`` (``marin.evaluation.lm_eval_adapter``): log-likelihoods from the
batched scorer, generations batched through the engine. ``via="server"``: the OpenAI-compatible server on
loopback and lm-eval's own ``local-completions`` client against it, tokenizing with the exported tokenizer
(written to a temporary directory), exactly what a user pointing lm-eval at a served model gets. Both give lm-eval's
``hf`` numbers on the export (tests/evaluation/test_lm_eval_parity.py); the served route's rolling windows
are two tokens shorter (``local-completions`` sends each window plus one token and asks for one more).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import Any

HARNESS_VIAS = ("engine", "server")


def run_harness(
    checkpoint: str,
    tokenizer: str | None,
    tasks: Sequence[str],
    *,
    via: str = "engine",
    include_path: str | None = None,
    batch_size: int = 32,
    limit: int | None = None,
    num_fewshot: int | None = None,
) -> dict[str, Any]:
    """lm-eval's per-task metrics (``results`` of ``simple_evaluate``), keyed by task name."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    import marin.evaluation.lm_eval_adapter as adapter

    if via not in HARNESS_VIAS:
        raise ValueError(f"EvalConfig.lm_eval_via must be one of {HARNESS_VIAS}, got {via!r}")
    # lm-eval's own library takes seconds to index: only when a task is not among the local ones
    manager = TaskManager(include_path=include_path, include_defaults=False) if include_path else None
    if manager is None or not set(tasks) <= set(manager.all_tasks):
        manager = TaskManager(include_path=include_path)
    common = dict(tasks=list(tasks), task_manager=manager, limit=limit, num_fewshot=num_fewshot, log_samples=False)
    if via == "engine":
        lm = adapter.MarinLM(checkpoint=checkpoint, tokenizer=tokenizer, batch_size=batch_size)
        out = lm_eval.simple_evaluate(model=lm, batch_size=batch_size, **common)
        return _plain(out["results"])

    from marin.inference.engine import EngineConfig
    from marin.inference.hf import write_hf_tokenizer
    from marin.inference.serve import load_served_model
    from marin.inference.server import serve_on_loopback

    served = load_served_model(checkpoint, tokenizer, engine_config=EngineConfig(slots=min(batch_size, 64)))
    with tempfile.TemporaryDirectory() as hf_tokenizer, serve_on_loopback(served) as (url, _):
        write_hf_tokenizer(tokenizer or checkpoint, hf_tokenizer, served.seq_len)
        args = (
            f"model={served.name},base_url={url}/v1/completions,tokenizer={hf_tokenizer},"
            f"tokenizer_backend=huggingface,max_length={served.seq_len},add_bos_token=True,"
            f"num_concurrent={min(batch_size, 16)},max_retries=1"
        )
        out = lm_eval.simple_evaluate(model="local-completions", model_args=args, batch_size=batch_size, **common)
    return _plain(out["results"])


def _plain(results: dict[str, Any]) -> dict[str, Any]:
    """lm-eval's metric values as JSON numbers (it returns numpy scalars, and "N/A" strings for stderr)."""
    out = {}
    for task, metrics in results.items():
        out[task] = {
            k: (float(v) if hasattr(v, "__float__") and not isinstance(v, str) else v) for k, v in metrics.items()
        }
    return out
