"""The eval step end to end on a tiny random model: results.json records what was evaluated and how."""

import json
import logging

import pytest

from marin.evaluation.step import EvalConfig, evaluate_model
from marin.trainer.checkpoint import CheckpointConfig, Checkpointer
from tests.export.tiny_model import TEXTS, make_tiny_export


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tiny") / "hf")
    cfg, params = make_tiny_export(path)
    return path, cfg, params


@pytest.fixture
def eval_inputs(tmp_path):
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[:3] + ["The crow ran far away."]))
    items = [
        {"context": f"The {a} said", "choices": [" moo", " caw", " woof"], "gold": i % 3}
        for i, a in enumerate(["cow", "crow", "dog", "cat", "hen", "pig", "owl", "fox"])
    ]
    (tmp_path / "sounds.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    (tmp_path / "sounds_2shot.yaml").write_text(
        "name: sounds_2shot\npath: sounds.jsonl\nnum_fewshot: 2\nfewshot_seed: 7\n"
    )
    return {
        "validation": {"held_out": str(held_out)},
        "tasks": (str(tmp_path / "sounds.jsonl"), str(tmp_path / "sounds_2shot.yaml")),
    }


def test_results_json_records_the_eval_config(export_dir, eval_inputs, tmp_path, caplog):
    path, _, _ = export_dir
    config = EvalConfig(
        checkpoint_path=path,
        tokenizer=path,
        output_path=str(tmp_path / "out"),
        validation=eval_inputs["validation"],
        tasks=eval_inputs["tasks"],
        num_fewshot=1,
        task_limit=6,
        max_documents=3,
        batch_size=4,
    )
    with caplog.at_level(logging.INFO, logger="marin.evaluation.step"):
        evaluate_model(config)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["checkpoint"] == path and results["checkpoint_step"] is None  # an HF export has no step
    assert results["config"] == {
        "checkpoint_path": path,
        "checkpoint_step": None,
        "tokenizer": path,
        "output_path": str(tmp_path / "out"),
        "validation": eval_inputs["validation"],
        "tasks": list(eval_inputs["tasks"]),
        "num_fewshot": 1,
        "max_documents": 3,
        "unigram_baseline": {},
        "task_limit": 6,
        "batch_size": 4,
        "max_len": 128,
        "lm_eval_tasks": [],
        "lm_eval_via": "engine",
        "lm_eval_include_path": None,
        "lm_eval_limit": None,
        "lm_eval_num_fewshot": None,
        "preference": {},
        "chat_tokenizer": None,
        "preference_reference": None,
        "preference_beta": 0.1,
        "max_pairs": 500,
    }
    assert results["validation"]["held_out"]["documents"] == 3
    # each task with the settings it was actually scored with: JSONL tasks take the config's k-shot,
    # YAML tasks their own k-shot and seed
    jsonl, yaml_task = results["tasks"]["sounds"], results["tasks"]["sounds_2shot"]
    assert jsonl["items"] == yaml_task["items"] == 6
    assert (jsonl["config"]["num_fewshot"], jsonl["config"]["fewshot_seed"], jsonl["config"]["limit"]) == (1, 1234, 6)
    assert (yaml_task["config"]["num_fewshot"], yaml_task["config"]["fewshot_seed"]) == (2, 7)
    assert yaml_task["config"]["path"] == str(tmp_path / "sounds.jsonl") and yaml_task["num_fewshot"] == 2
    table = caplog.text[caplog.text.index("| task | k-shot") :]
    assert "| sounds | 1 | 6 |" in table and "| sounds_2shot | 2 | 6 |" in table


def test_results_json_names_the_training_checkpoint_step(export_dir, eval_inputs, tmp_path):
    _, cfg, params = export_dir
    run = tmp_path / "run"
    checkpointer = Checkpointer(str(run / "checkpoints"), CheckpointConfig(async_save=False))
    for step in (3, 7):
        checkpointer.save({"params": params}, step, "permanent")
    checkpointer.close()
    for requested, found in ((None, 7), (3, 3)):
        out = tmp_path / f"out-{requested}"
        evaluate_model(
            EvalConfig(
                checkpoint_path=str(run),
                model=cfg,
                checkpoint_step=requested,
                tokenizer=export_dir[0],
                output_path=str(out),
                tasks=eval_inputs["tasks"][:1],
                task_limit=2,
            )
        )
        results = json.loads((out / "results.json").read_text())
        assert results["checkpoint_step"] == found and results["config"]["checkpoint_step"] == requested
        assert results["config"]["checkpoint_path"] == str(run) and results["model"]["vocab_size"] == cfg.vocab_size


def test_parameters_are_arguments_of_the_scoring_program_not_constants(export_dir):
    """A closed-over array is baked into the executable as a literal (the whole model, on one device)."""
    import functools
    import re

    import numpy as np

    from marin.evaluation.scoring import Scorer
    from marin.trainer.model.llama import forward

    _, cfg, params = export_dir
    scorer = Scorer(functools.partial(forward, cfg), params=params, batch_size=2, max_len=16)
    tokens = np.zeros((2, 16), np.int32)
    closure = Scorer(lambda t: forward(cfg, params, t), batch_size=2, max_len=16)
    embed_hex_digits = 2 * params["embed"].nbytes  # how an [vocab, embed] f32 literal would be spelled

    def longest_literal(text: str) -> int:
        return max((len(m) for m in re.findall(r'dense<"0x([0-9A-F]+)">', text)), default=0)

    assert longest_literal(closure._target_logprobs.lower(None, tokens, tokens).as_text()) >= embed_hex_digits
    text = scorer._target_logprobs.lower(params, tokens, tokens).as_text()
    assert longest_literal(text) < embed_hex_digits // 10  # small tables only (rotary angles, masks)
    signature = text.split("func.func public @main", 1)[1].split("\n", 1)[0]
    assert f"tensor<{cfg.vocab_size}x{cfg.hidden_dim}xf32>" in signature  # the embedding is an argument
    assert closure.loglikelihood([([1, 2], [3, 4])]) == scorer.loglikelihood([([1, 2], [3, 4])])


def test_a_host_with_several_devices_shards_the_model_and_scores_the_same(export_dir, eval_inputs, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    path, _, _ = export_dir
    root = Path(__file__).resolve().parents[2]
    script = Path(__file__).with_name("sharded_eval_script.py")
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("XLA_FLAGS", None)
    out = subprocess.run(
        [
            sys.executable,
            str(script),
            path,
            eval_inputs["validation"]["held_out"],
            eval_inputs["tasks"][0],
            str(tmp_path / "sharded"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    sharded = json.loads(out.stdout.strip().splitlines()[-1])
    assert sharded["devices"] == 4
    assert sharded["specs"]["embed"] == ["None", "fsdp"]  # [vocab, embed]: embed over the 4 devices
    single = evaluate_model(
        EvalConfig(
            checkpoint_path=path,
            tokenizer=path,
            output_path=str(tmp_path / "single"),
            validation=eval_inputs["validation"],
            tasks=[eval_inputs["tasks"][0]],
            batch_size=4,
        )
    )
    for name in ("loss", "bits_per_byte"):
        assert abs(sharded["results"]["validation"]["held_out"][name] - single["validation"]["held_out"][name]) < 1e-5
    assert sharded["results"]["tasks"]["sounds"]["acc"] == single["tasks"]["sounds"]["acc"]


@pytest.mark.slow  # lm-eval twice, one of them through the server
def test_lm_eval_tasks_through_the_engine_and_through_the_server(export_dir, tmp_path):
    """The eval step runs lm-eval's log-likelihood, rolling and generative tasks in process (engine) and
    through the OpenAI-compatible server; both report the same numbers (rolling: documents within one
    window, where the served route's two-token-shorter windows make no difference)."""
    from tests.evaluation.lm_eval_parity_tasks import write_tasks

    path, _, _ = export_dir
    (tmp_path / "tasks").mkdir()
    write_tasks(tmp_path / "tasks", rolling_words=(5, 20))
    by_route = {}
    for via in ("engine", "server"):
        config = EvalConfig(
            checkpoint_path=path,
            tokenizer=path,
            output_path=str(tmp_path / via),
            lm_eval_tasks=("parity_choice", "parity_rolling", "parity_generate"),
            lm_eval_include_path=str(tmp_path / "tasks"),
            lm_eval_via=via,
            batch_size=8,
        )
        evaluate_model(config)
        by_route[via] = json.loads((tmp_path / via / "results.json").read_text())["lm_eval"]
    engine, server = by_route["engine"], by_route["server"]
    assert set(engine) == {"parity_choice", "parity_rolling", "parity_generate"}
    assert engine["parity_choice"]["acc,none"] == server["parity_choice"]["acc,none"]
    assert engine["parity_choice"]["acc_norm,none"] == server["parity_choice"]["acc_norm,none"]
    assert engine["parity_rolling"]["bits_per_byte,none"] == pytest.approx(
        server["parity_rolling"]["bits_per_byte,none"], rel=1e-4
    )
    assert engine["parity_generate"]["exact_match,none"] == server["parity_generate"]["exact_match,none"]
    with pytest.raises(ValueError, match="lm_eval_via"):
        EvalConfig(checkpoint_path=path, tokenizer=path, output_path="x", lm_eval_via="vllm")
