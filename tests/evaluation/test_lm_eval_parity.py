"""The lab's lm-eval numbers are lm-eval's numbers: ``--model marin`` in process and ``local-completions``
against the lab's server give, document by document, what lm-eval's own ``hf`` model gives on the exported
checkpoint — per-choice log-likelihoods, acc and acc_norm, rolling perplexities over documents several
windows long, greedy generations — at batch 1 and batch 8.

Window lengths: ``hf`` and ``marin`` take ``max_length=N`` for windows of N tokens; ``local-completions``
sends each window plus its last token and asks for one more token, so its ``max_length=N + 2`` gives the same
windows (and N + 2 must fit the served context).
"""

import os

import pytest

from tests.evaluation.lm_eval_parity_tasks import documents_followed_by_eos, write_tasks
from tests.export.tiny_model import make_tiny_export
from tests.requirements import require_module

lm_eval = require_module("lm_eval", "lm-eval (the eval extra)")
torch = require_module("torch", "CPU torch (the export-test extra)")
require_module("accelerate", "accelerate (the export-test extra: lm-eval's hf model needs it)")
require_module("tenacity", "lm-eval[api] (the eval extra: local-completions needs it)")

TASKS = ["parity_choice", "parity_rolling", "parity_generate"]
WINDOW = 126  # the tiny model's context is 128


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from lm_eval.tasks import TaskManager

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = tmp_path_factory.mktemp("parity")
    (root / "tasks").mkdir()
    make_tiny_export(str(root / "hf"), eos_scale=3.0)  # the model stops now and then, as a trained one does
    write_tasks(root / "tasks", extra_rolling=documents_followed_by_eos(str(root / "hf")))
    manager = TaskManager(include_path=str(root / "tasks"), include_defaults=False)
    reference = _run(manager, "hf", f"pretrained={root / 'hf'},dtype=float32,device=cpu,max_length={WINDOW}", 8)
    return root, manager, reference


def _run(manager, model, args, batch_size):
    import marin.evaluation.lm_eval_adapter  # noqa: F401  registers --model marin

    return lm_eval.simple_evaluate(
        model=model, model_args=args, tasks=TASKS, task_manager=manager, batch_size=batch_size, log_samples=True
    )


def _assert_same(reference, ours):
    for task in TASKS:
        want, got = reference["results"][task], ours["results"][task]
        theirs, mine = reference["samples"][task], ours["samples"][task]
        assert [s["doc_id"] for s in theirs] == [s["doc_id"] for s in mine]
        for a, b in zip(theirs, mine):
            if task == "parity_choice":
                assert [float(ll) for ll, _ in b["filtered_resps"]] == pytest.approx(
                    [float(ll) for ll, _ in a["filtered_resps"]], abs=1e-3
                )
            elif task == "parity_rolling":
                assert float(b["filtered_resps"][0]) == pytest.approx(float(a["filtered_resps"][0]), rel=1e-4)
            else:
                assert b["filtered_resps"] == a["filtered_resps"]
        if task == "parity_choice":
            assert got["acc,none"] == want["acc,none"] and got["acc_norm,none"] == want["acc_norm,none"]
        if task == "parity_rolling":
            for metric in ("word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none"):
                assert got[metric] == pytest.approx(want[metric], rel=1e-4)


def test_the_tasks_exercise_what_differed(setup):
    """Contexts ending in a newline, choices of different lengths, documents several windows long, documents
    after which the model would stop (its greedy next token is end-of-text)."""
    import json

    root, _, reference = setup
    choice = [json.loads(line) for line in (root / "tasks" / "choice.jsonl").read_text().splitlines()]
    assert all(item["context"].endswith("\n") for item in choice)
    assert any(len({len(c) for c in item["choices"]}) > 1 for item in choice)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(root / "hf"))
    rolling = [json.loads(line)["text"] for line in (root / "tasks" / "rolling.jsonl").read_text().splitlines()]
    assert max(len(tokenizer(text).input_ids) for text in rolling) > 3 * WINDOW
    assert tokenizer("the dog").input_ids[0] == tokenizer.bos_token_id  # the export adds the document start
    assert reference["results"]["parity_choice"]["sample_len"] == len(choice)


@pytest.mark.parametrize("batch_size", [1, 8])
def test_marin_model_in_process_gives_lm_evals_hf_numbers(setup, batch_size):
    root, manager, reference = setup
    _assert_same(reference, _run(manager, "marin", f"checkpoint={root / 'hf'},max_length={WINDOW}", batch_size))


def test_local_completions_against_the_server_gives_lm_evals_hf_numbers(setup):
    from marin.inference.engine import EngineConfig
    from marin.inference.serve import load_served_model
    from marin.inference.server import serve_on_loopback

    root, manager, reference = setup
    model = load_served_model(str(root / "hf"), engine_config=EngineConfig(slots=8, prefill_chunk=64))
    with serve_on_loopback(model) as (url, _):
        for batch_size in (1, 8):
            args = (
                f"model={root / 'hf'},base_url={url}/v1/completions,tokenizer_backend=huggingface,"
                f"max_length={WINDOW + 2},add_bos_token=True,num_concurrent=8,max_retries=1"
            )
            _assert_same(reference, _run(manager, "local-completions", args, batch_size))


@pytest.mark.parametrize("family", ["qwen3", "qwen2", "olmo2", "mixtral", "qwen3_moe", "olmoe", "mistral_windowed"])
def test_each_family_in_process_gives_lm_evals_hf_numbers(family, tmp_path):
    """Every family beyond Llama through lm-eval, from transformers' own random-weight model
    (tests/export/hf_families.py: Qwen3's QK-norm per head, tied embeddings and head_dim independent of width;
    Qwen2's attention biases; OLMo 2's norms after the sublayers and over all heads' queries and keys; Mixtral's,
    Qwen3-MoE's and OLMoE's experts and routers) and Mistral with a window of 8 keys (so every 126-token rolling
    window is windowed), exported with the tiny tokenizer: ``--model marin`` gives, document by document, what
    lm-eval's ``hf`` model gives on the same export."""
    from lm_eval.tasks import TaskManager

    from marin.inference import export_hf, import_hf
    from tests.export.hf_families import FAMILIES, WINDOWED, save
    from tests.export.tiny_model import write_tiny_tokenizer

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    spec = WINDOWED["mistral"][:3] if family == "mistral_windowed" else FAMILIES[family]
    save(*spec, tmp_path / "theirs", vocab_size=320, max_position_embeddings=WINDOW + 2)
    cfg, params = import_hf(str(tmp_path / "theirs"))
    assert (cfg.sliding_window is not None) == (family == "mistral_windowed")
    tokenizer, _ = write_tiny_tokenizer(str(tmp_path / "tok"))
    export = str(tmp_path / "hf")
    export_hf(cfg, params, export, tokenizer=tokenizer)
    (tmp_path / "tasks").mkdir()
    write_tasks(tmp_path / "tasks", rolling_words=(5, 60, 420))
    manager = TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False)
    reference = _run(manager, "hf", f"pretrained={export},dtype=float32,device=cpu,max_length={WINDOW}", 8)
    _assert_same(reference, _run(manager, "marin", f"checkpoint={export},max_length={WINDOW}", 8))
