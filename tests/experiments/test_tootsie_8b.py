"""The Tootsie 8B DAG: structure, stable versions, phase chaining, and a dry run that works on a laptop."""

import os
import subprocess
import sys
from pathlib import Path

from experiments import tootsie_8b
from marin.execution import Executor

ROOT = Path(__file__).resolve().parents[2]


def plan():
    return Executor(prefix="gs://bucket/lab").plan([*tootsie_8b.evals, *tootsie_8b.exports])


def test_dag_structure_and_phase_chaining():
    p = plan()
    by_name = {s.name: s for s in p.steps}
    phase1, phase2, cooldown = (by_name[f"checkpoints/tootsie-8b-{n}"] for n in ("phase1", "phase2", "cooldown"))
    assert {d.name for d in phase1.deps} >= {
        "tokenized/dclm_baseline",
        "tokenized/starcoderdata",
        "tokenized/proofpile_2",
    }
    assert phase2.inputs["initialize_from"] == phase1.output_path
    assert cooldown.inputs["initialize_from"] == phase2.output_path
    assert phase1 in phase2.deps and phase2 in cooldown.deps
    assert {d.name for d in cooldown.deps} >= {"tokenized/finemath_3plus", "tokenized/dolmino_flan"}
    for name in ("phase1", "phase2", "cooldown"):
        assert by_name[f"evaluation/tootsie-8b-{name}"].deps[0].name == f"checkpoints/tootsie-8b-{name}"
        assert by_name[f"exports/tootsie-8b-{name}"].deps[0].name == f"checkpoints/tootsie-8b-{name}"
    trainer1 = phase1.version["config"]["trainer"]
    assert trainer1["batch_size"] == 1024 and phase2.version["config"]["trainer"]["batch_size"] == 3072
    assert phase1.version["config"]["optimizer"]["learning_rate"] == 1e-3
    assert phase2.version["config"]["optimizer"]["ema_decay"] is not None
    downloads = [s for s in p.steps if s.name.startswith("raw/")]
    # every download is pinned: a hub revision, or a SHA-256 for each file (the real-text evaluation sets)
    pinned = lambda c: c.get("revision") or (c.get("files") and set(c["files"]) == set(c.get("expected_sha256", {})))
    assert downloads and all(pinned(s.version["config"]) for s in downloads)
    assert {"raw/tinyshakespeare", "raw/gutenberg"} <= {s.name for s in downloads}
    assert (phase1.step.resource_config.hosts, phase1.step.resource_config.tpu.slices) == (128, 2)


def test_dpo_phase_starts_from_the_instruct_model_on_ultrafeedback():
    steps = [tootsie_8b.preference[k] for k in ("eval_sft", "eval", "export")]
    by_name = {s.name: s for s in Executor(prefix="gs://bucket/lab").plan(steps).steps}
    dpo, sft = by_name["checkpoints/tootsie-8b-dpo"], by_name["checkpoints/tootsie-8b-instruct"]
    reference = by_name["reference/tootsie-8b-dpo"]
    assert dpo.inputs["initialize_from"] == sft.output_path and reference in dpo.deps and sft in reference.deps
    config = dpo.version["config"]
    assert config["loss"]["type"] == "sigmoid" and config["loss"]["beta"] == 0.01
    assert config["trainer"]["batch_size"] == 128 and config["trainer"]["num_train_steps"] == 2150
    assert config["optimizer"]["learning_rate"] == 5e-7 and config["optimizer"]["schedule"] == "linear"
    downloads = [s for s in by_name.values() if s.name.startswith("raw/ultrafeedback")]
    assert len(downloads) == 2 and all(s.version["config"]["revision"] == "3949bf5" for s in downloads)
    evals = [by_name[f"evaluation/preference/tootsie-8b-{n}"] for n in ("instruct", "dpo")]
    assert all(e.inputs["preference_reference"] == sft.output_path for e in evals)


def test_versions_are_stable_across_processes():
    here = {s.identity for s in plan().steps}
    code = (
        "from experiments import tootsie_8b; from marin.execution import Executor;"
        "print('\\n'.join(sorted(s.identity for s in Executor(prefix='gs://x').plan([*tootsie_8b.evals, "
        "*tootsie_8b.exports]).steps)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert set(out.split()) == here


def test_dry_run_on_a_laptop_prints_plan_params_and_tokens(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    out = subprocess.run(
        [sys.executable, "experiments/tootsie_8b.py", "--dry_run", "true", "--prefix", str(tmp_path / "lab")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "8.03B parameters" in out.stdout
    assert "phase1" in out.stdout and "T tokens" in out.stdout and "2 x v5litepod 16x16 (128 hosts)" in out.stdout
    assert out.stdout.count("\nrun ") >= 20 and "checkpoints/tootsie-8b-cooldown-" in out.stdout
    assert "checkpoints/tootsie-8b-dpo-" in out.stdout and "2,150 steps x 128 pairs (UltraFeedback" in out.stdout
    assert not (tmp_path / "lab").exists()


def test_running_without_tpus_fails_fast_saying_what_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    out = subprocess.run(
        [
            sys.executable,
            "experiments/tootsie_8b.py",
            "--prefix",
            str(tmp_path / "lab"),
            "--run_only",
            "checkpoints/tootsie-8b-phase1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 1
    assert "'checkpoints/tootsie-8b-phase1" in out.stderr and "TPU: needs 4, largest node has 0" in out.stderr
    assert "RAY_ADDRESS" in out.stderr and "MARIN_AUTOSCALING" in out.stderr


def test_tootsie_evaluates_multiple_choice_tasks_whose_yaml_maps_their_data_sets_rows(tmp_path):
    """The hub is not reachable here: each task YAML is loaded as written, then pointed at a Parquet file
    holding rows in its data set's published schema, through the same datasets.load_dataset path."""
    import dataclasses

    import pyarrow as pa
    import pyarrow.parquet as pq

    from marin.evaluation.tasks import load_items, load_task_yaml

    evals = {s.name: s for s in tootsie_8b.evals}
    for step in evals.values():
        assert list(step.config.tasks) and all(t.value in tootsie_8b.TASKS for t in step.config.tasks)
    arc_row = {
        "id": "Mercury_1",
        "question": "Which gas do plants take in?",
        "choices": {"text": ["oxygen", "carbon dioxide", "helium", "neon"], "label": ["A", "B", "C", "D"]},
        "answerKey": "B",
    }
    hellaswag_row = {
        "ind": 4,
        "activity_label": "Baking cookies",
        "ctx_a": "A woman mixes dough.",
        "ctx_b": "she",
        "ctx": "A woman mixes dough. she",
        "endings": ["sings.", "bakes it.", "runs.", "flies."],
        "source_id": "x",
        "split": "val",
        "split_type": "indomain",
        "label": "1",
    }
    expected = {
        "arc_easy": (arc_row, "Question: Which gas do plants take in?\nAnswer:", 1),
        "arc_challenge": (arc_row, "Question: Which gas do plants take in?\nAnswer:", 1),
        "hellaswag": (hellaswag_row, "Baking cookies: A woman mixes dough. she", 1),
    }
    for path in tootsie_8b.TASKS:
        task = load_task_yaml(str(ROOT / path))
        assert task.dataset and task.revision and task.split
        row, context, gold = expected[task.name]
        data = tmp_path / f"{task.name}.parquet"
        pq.write_table(pa.Table.from_pylist([row]), data)
        local = dataclasses.replace(
            task, dataset="parquet", subset=None, revision=None, data_files={task.split: str(data)}
        )
        [item] = load_items(local)
        assert (item["context"], item["gold"], len(item["choices"])) == (context, gold, 4)


def test_instruct_phase_fine_tunes_the_cooldown_on_pinned_chat_data():
    from marin.trainer.sft import train_sft

    p = Executor(prefix="gs://bucket/lab").plan([tootsie_8b.instruct["eval"], tootsie_8b.instruct["export"]])
    by_name = {s.name: s for s in p.steps}
    sft = by_name["checkpoints/tootsie-8b-instruct"]
    assert sft.step.fn is train_sft
    assert sft.inputs["initialize_from"] == by_name["checkpoints/tootsie-8b-cooldown"].output_path
    for name in tootsie_8b.SFT_SOURCES:
        raw, chat = by_name[f"raw/{name}"], by_name[f"chat/{name}"]
        assert raw.version["config"]["revision"] and raw in chat.deps
        tokenized = by_name[f"tokenized/{name}-sft-llama3"]
        assert chat in tokenized.deps and tokenized.version["config"]["tokenizer"] == tootsie_8b.LLAMA3_TOKENIZER
        assert tokenized in sft.deps
    config = sft.version["config"]
    assert config["trainer"]["batch_size"] == 128 and config["optimizer"]["learning_rate"] == 1e-4
    assert config["data.stages"][0]["weights"] == {name: src[3] for name, src in tootsie_8b.SFT_SOURCES.items()}
    assert by_name["exports/tootsie-8b-instruct"].deps[0] is sft
