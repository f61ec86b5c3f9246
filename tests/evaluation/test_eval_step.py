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
    items = [{"context": f"The {a} said", "choices": [" moo", " caw", " woof"], "gold": i % 3}
             for i, a in enumerate(["cow", "crow", "dog", "cat", "hen", "pig", "owl", "fox"])]
    (tmp_path / "sounds.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    (tmp_path / "sounds_2shot.yaml").write_text(
        "name: sounds_2shot\npath: sounds.jsonl\nnum_fewshot: 2\nfewshot_seed: 7\n")
    return {"validation": {"held_out": str(held_out)},
            "tasks": (str(tmp_path / "sounds.jsonl"), str(tmp_path / "sounds_2shot.yaml"))}


def test_results_json_records_the_eval_config(export_dir, eval_inputs, tmp_path, caplog):
    path, _, _ = export_dir
    config = EvalConfig(checkpoint_path=path, tokenizer=path, output_path=str(tmp_path / "out"),
                        validation=eval_inputs["validation"], tasks=eval_inputs["tasks"], num_fewshot=1,
                        task_limit=6, max_documents=3, batch_size=4)
    with caplog.at_level(logging.INFO, logger="marin.evaluation.step"):
        evaluate_model(config)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["checkpoint"] == path and results["checkpoint_step"] is None  # an HF export has no step
    assert results["config"] == {
        "checkpoint_path": path, "checkpoint_step": None, "tokenizer": path, "output_path": str(tmp_path / "out"),
        "validation": eval_inputs["validation"], "tasks": list(eval_inputs["tasks"]), "num_fewshot": 1,
        "max_documents": 3, "unigram_baseline": {}, "task_limit": 6, "batch_size": 4, "max_len": 128}
    assert results["validation"]["held_out"]["documents"] == 3
    # each task with the settings it was actually scored with: JSONL tasks take the config's k-shot,
    # YAML tasks their own k-shot and seed
    jsonl, yaml_task = results["tasks"]["sounds"], results["tasks"]["sounds_2shot"]
    assert jsonl["items"] == yaml_task["items"] == 6
    assert (jsonl["config"]["num_fewshot"], jsonl["config"]["fewshot_seed"], jsonl["config"]["limit"]) == (1, 1234, 6)
    assert (yaml_task["config"]["num_fewshot"], yaml_task["config"]["fewshot_seed"]) == (2, 7)
    assert yaml_task["config"]["path"] == str(tmp_path / "sounds.jsonl") and yaml_task["num_fewshot"] == 2
    table = caplog.text[caplog.text.index("| task | k-shot"):]
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
        evaluate_model(EvalConfig(checkpoint_path=str(run), model=cfg, checkpoint_step=requested,
                                  tokenizer=export_dir[0], output_path=str(out), tasks=eval_inputs["tasks"][:1],
                                  task_limit=2))
        results = json.loads((out / "results.json").read_text())
        assert results["checkpoint_step"] == found and results["config"]["checkpoint_step"] == requested
        assert results["config"]["checkpoint_path"] == str(run) and results["model"]["vocab_size"] == cfg.vocab_size
