"""The preference builders of experiments/defaults/posttrain.py: the DAG default_dpo declares (the reference step
and what it depends on), which fields move a DPO step's output path and which do not."""

import dataclasses

from experiments.defaults import (
    default_chat_data,
    default_dpo,
    default_preference_data,
    default_preference_eval,
    default_preference_tokenize,
    default_sft,
    default_sft_tokenize,
)
from experiments.models import SimpleTrainConfig, llama_nano
from marin.execution import Executor
from marin.posttrain import PreferenceLossConfig

MODEL = llama_nano()
TRAIN = SimpleTrainConfig(num_train_steps=40, batch_size=16, learning_rate=1e-3)


def dag(**dpo_overrides):
    chat = default_chat_data("chat", ["gs://b/chat.jsonl"])
    sft_data = default_sft_tokenize("chat-sft", chat, tokenizer="gs://b/tokenizer.json")
    sft = default_sft("nano-instruct", {"chat": sft_data}, MODEL, TRAIN, initialize_from=chat)
    prefs = default_preference_data("prefs", ["gs://b/pairs.jsonl"], validation_fraction=0.1)
    pairs = default_preference_tokenize("prefs-dpo", prefs, tokenizer=sft_data / "tokenizer")
    dpo = default_dpo("nano-dpo", pairs, MODEL, dpo_overrides.pop("train", TRAIN), initialize_from=sft, **dpo_overrides)
    evaluation = default_preference_eval(
        "nano-dpo", dpo, chat_tokenizer=sft_data / "tokenizer", pairs={"held_out": prefs / "validation"}, reference=sft
    )
    return {"sft": sft, "pairs": pairs, "dpo": dpo, "eval": evaluation}


def planned(steps: dict) -> dict:
    return {p.name: p for p in Executor(prefix="/lab").plan([steps["eval"]]).steps}


def test_dpo_precomputes_the_reference_on_the_sft_checkpoint():
    plan = planned(dag())
    reference, dpo = plan["reference/nano-dpo"], plan["checkpoints/nano-dpo"]
    assert {d.name for d in reference.deps} == {"checkpoints/nano-instruct", "tokenized/prefs-dpo"}
    assert reference in dpo.deps and plan["checkpoints/nano-instruct"] in dpo.deps
    assert dpo.inputs["initialize_from"] == plan["checkpoints/nano-instruct"].output_path
    assert dpo.inputs["reference_logps"] == reference.output_path
    assert plan["evaluation/preference/nano-dpo"].inputs["preference_reference"] == dpo.inputs["initialize_from"]
    on_the_fly = planned(dag(precompute_reference=False))
    assert "reference/nano-dpo" not in on_the_fly
    assert on_the_fly["checkpoints/nano-dpo"].output_path != dpo.output_path
    simpo = planned(dag(loss=PreferenceLossConfig(type="simpo", beta=2.0)))
    assert "reference/nano-dpo" not in simpo  # SimPO has no reference


def test_loss_and_data_fields_move_the_output_path_and_packing_does_not():
    base = planned(dag())["checkpoints/nano-dpo"].output_path
    for overrides in (
        {"loss": PreferenceLossConfig(beta=0.5)},
        {"loss": PreferenceLossConfig(label_smoothing=0.1)},
        {"num_epochs": 2.0},
        {"train": dataclasses.replace(TRAIN, seed=1)},
        {"train": dataclasses.replace(TRAIN, learning_rate=5e-7)},
    ):
        assert planned(dag(**overrides))["checkpoints/nano-dpo"].output_path != base, overrides
    step = dag()["dpo"]
    unpacked = dataclasses.replace(step, config=dataclasses.replace(step.config, packing=False))
    [moved] = [p for p in Executor(prefix="/lab").plan([unpacked]).steps if p.name == "checkpoints/nano-dpo"]
    assert moved.output_path == base  # how pairs are laid out in rows never changes what the run computes
