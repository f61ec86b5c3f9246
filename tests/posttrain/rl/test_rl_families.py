"""RL from a released family's checkpoint, the way users meet these families: each family's transformers
random-weight model (tests/export/hf_families.py: Qwen3, Qwen2, OLMo 2, Mixtral, Qwen3-MoE, OLMoE) exported
with the chat tokenizer, as ``initialize_from``. Rollouts run through the engine (a MoE inside continuous
batching), the update through the trainer's model: their log-probabilities of the same tokens under the same
weights agree (the first step's ratio is 1), a MoE's router losses are logged, and the policy moves. (A sliding
window's engine and trainer agree with transformers' generation and logits: tests/export/test_hf_families.py.)"""

import dataclasses
import json

import numpy as np
import pytest

from marin.inference import export_hf, import_hf, load_model
from marin.posttrain.rl.loop import train_rl
from tests.export.hf_families import FAMILIES, save
from tests.export.tiny_model import write_tiny_tokenizer
from tests.posttrain.rl.rl_setup import rl_config


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_rl_from_each_familys_checkpoint_samples_and_updates_consistently(family, tmp_path):
    save(*FAMILIES[family], tmp_path / "theirs", vocab_size=320, max_position_embeddings=128)
    cfg, params = import_hf(str(tmp_path / "theirs"))
    tokenizer, _ = write_tiny_tokenizer(str(tmp_path / "chat"), chat=True)
    policy = str(tmp_path / "policy")
    export_hf(cfg, params, policy, tokenizer=tokenizer)

    config = rl_config(tmp_path, str(tmp_path / "rl"), num_iterations=2)
    config = dataclasses.replace(config, initialize_from=policy, tokenizer=tokenizer)
    result = train_rl(config)
    assert result.iterations == 2
    metrics = [json.loads(line) for line in open(f"{config.output_path}/metrics.jsonl")]
    assert all(m["rl/first_step_ratio"] == pytest.approx(1.0, abs=1e-3) for m in metrics)
    if cfg.num_experts:
        assert all(m["train/router_aux_loss"] > 0 for m in metrics), metrics[0].keys()
    else:
        assert not any("router" in key for key in metrics[0]), metrics[0].keys()
    trained_cfg, trained, _ = load_model(config.output_path)  # the run's newest checkpoint, as serving reads it
    assert trained_cfg == dataclasses.replace(cfg, seq_len=trained_cfg.seq_len)
    moved = {k: float(np.max(np.abs(np.asarray(trained["layers"][k]) - params["layers"][k]))) for k in params["layers"]}
    assert all(v > 0 for v in moved.values()), moved  # every layer tensor (router, experts, norms) was updated
