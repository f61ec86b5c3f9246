"""The lab's GRPO loss and its gradient equal TRL's ``GRPOTrainer._compute_loss`` (TRL 1.16, pinned in the
export-test extra) on the same exported weights (torch CPU, fp32), prompts, completions, advantages and old
and reference log-probabilities, within 1e-4 relative: for every loss aggregation, with and without KL.

Option mapping (docs/rl.md): TRL's ``loss_type`` ("grpo", "bnpo", "dr_grpo"), ``epsilon``, ``epsilon_high``,
``beta``, ``use_bias_correction_kl`` and ``max_completion_length`` are ``LossConfig``'s ``loss_type``, ``epsilon``,
``epsilon_high``, ``beta``, ``bias_correction_kl`` and ``max_completion_tokens``; ``scale_rewards``,
``num_generations`` and ``num_iterations`` are ``GrpoConfig``'s ``scale_rewards``, ``num_generations`` and
``ppo_epochs``; ``temperature`` is 1.0 (the engine's log-probabilities are the model's at temperature 1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.inference.hf import import_hf, to_hf_tensors
from marin.posttrain.rl.loss import LossConfig, group_advantages, grpo_loss, token_logprobs
from tests.export.tiny_model import make_tiny_export
from tests.requirements import require_module

torch = require_module("torch", "CPU torch (the export-test extra)")
trl = require_module("trl", "TRL (the export-test extra)")

PROMPTS, G, PROMPT_LEN, COMPLETION_LEN = 2, 4, 6, 10


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    path = tmp_path_factory.mktemp("grpo-parity") / "hf"
    make_tiny_export(str(path), chat=True)
    return str(path)


@pytest.fixture(scope="module")
def inputs(export):
    """Fixed prompts, completions of varied lengths (right-padded), rewards -> group advantages, and old /
    reference log-probabilities that differ from the policy's (so ratios leave the clip range both ways)."""
    rng = np.random.default_rng(0)
    cfg, params = import_hf(export)
    rows = PROMPTS * G
    prompt = np.repeat(rng.integers(5, 300, size=(PROMPTS, PROMPT_LEN)), G, axis=0)
    completion = rng.integers(5, 300, size=(rows, COMPLETION_LEN))
    lengths = rng.integers(3, COMPLETION_LEN + 1, size=rows)
    completion_mask = (np.arange(COMPLETION_LEN)[None, :] < lengths[:, None]).astype(np.float32)
    rewards = rng.integers(0, 2, size=(PROMPTS, G)).astype(np.float32)
    rewards[0] = [1, 0, 0, 1]
    advantages, _ = group_advantages(rewards, "group")
    sequence = np.concatenate([prompt, completion], axis=1)
    batch = {"input_ids": sequence, "targets": np.concatenate([sequence[:, 1:], sequence[:, :1] * 0], axis=1)}
    logp, _ = token_logprobs(cfg, params, jax.tree.map(jnp.asarray, batch))
    logp = np.asarray(logp)[:, PROMPT_LEN - 1 : PROMPT_LEN - 1 + COMPLETION_LEN]  # the completion's targets
    old = logp + rng.normal(scale=0.3, size=logp.shape).astype(np.float32)
    ref = logp + rng.normal(scale=0.5, size=logp.shape).astype(np.float32)
    return {
        "cfg": cfg,
        "params": params,
        "prompt": prompt,
        "completion": completion,
        "completion_mask": completion_mask,
        "advantages": advantages.reshape(-1),
        "old": old,
        "ref": ref,
    }


def _lab(inputs, config: LossConfig):
    """Loss and gradient (in HF layout) through the lab's loss on its own batch layout."""
    rows, total = PROMPTS * G, PROMPT_LEN + COMPLETION_LEN
    sequence = np.concatenate([inputs["prompt"], inputs["completion"]], axis=1)
    place = np.s_[:, PROMPT_LEN - 1 : total - 1]
    mask, old, ref = (np.zeros((rows, total), np.float32) for _ in range(3))
    mask[place], old[place], ref[place] = inputs["completion_mask"], inputs["old"], inputs["ref"]
    batch = {
        "input_ids": sequence,
        "targets": np.concatenate([sequence[:, 1:], np.zeros((rows, 1), sequence.dtype)], axis=1),
        "mask": mask,
        "old_logp": old,
        "ref_logp": ref,
        "advantages": inputs["advantages"],
        "rows": np.ones(rows, np.float32),
    }
    batch = jax.tree.map(jnp.asarray, batch)

    def loss(params):
        logp, entropy = token_logprobs(inputs["cfg"], params, batch)
        loss_sum, weight, stats = grpo_loss(logp, entropy, batch, config)
        return loss_sum / weight, stats

    (value, stats), grads = jax.value_and_grad(loss, has_aux=True)(jax.tree.map(jnp.asarray, inputs["params"]))
    # the inputs exercise both sides of the clip (else the min() would be tested on one branch only)
    assert float(stats["clipped_low"]) > 0 and float(stats["clipped_high"]) > 0
    return float(value), to_hf_tensors(inputs["cfg"], jax.tree.map(np.asarray, grads))


def _trl(export, inputs, config: LossConfig, tmp_path):
    import datasets
    import transformers

    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        loss_type=config.loss_type,
        beta=config.beta,
        use_bias_correction_kl=config.bias_correction_kl,
        epsilon=config.epsilon,
        epsilon_high=config.epsilon_high,
        max_completion_length=config.max_completion_tokens,
        num_generations=G,
        per_device_train_batch_size=G,
        temperature=1.0,
        use_cpu=True,
        report_to=[],
        bf16=False,
    )
    model = transformers.LlamaForCausalLM.from_pretrained(export, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(export)
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        args=args,
        train_dataset=datasets.Dataset.from_list([{"prompt": "x"}] * G),
        processing_class=tokenizer,
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # what train() sets with gradient_accumulation_steps=1
    tensors = {
        "prompt_ids": torch.tensor(inputs["prompt"]),
        "prompt_mask": torch.ones(inputs["prompt"].shape, dtype=torch.long),
        "completion_ids": torch.tensor(inputs["completion"]),
        "completion_mask": torch.tensor(inputs["completion_mask"], dtype=torch.long),
        "advantages": torch.tensor(inputs["advantages"]),
        "old_per_token_logps": torch.tensor(inputs["old"]),
        "ref_per_token_logps": torch.tensor(inputs["ref"]),
    }
    loss = trainer._compute_loss(trainer.model, tensors)
    loss.backward()
    grads = {name: p.grad.detach().numpy() for name, p in trainer.model.named_parameters()}
    return float(loss.detach()), grads


@pytest.mark.timeout(600)
@pytest.mark.parametrize("beta,correction", [(0.0, True), (0.04, True), (0.04, False)])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_loss_and_gradient_equal_trls(export, inputs, loss_type, beta, correction, tmp_path):
    config = LossConfig(
        loss_type=loss_type,
        beta=beta,
        bias_correction_kl=correction,
        epsilon=0.2,
        epsilon_high=0.28,
        max_completion_tokens=16,
    )
    lab_loss, lab_grads = _lab(inputs, config)
    trl_loss, trl_grads = _trl(export, inputs, config, tmp_path)
    assert lab_loss == pytest.approx(trl_loss, rel=1e-4)
    assert abs(lab_loss) > 1e-3  # a loss of zero would make the comparison vacuous
    assert set(lab_grads) <= set(trl_grads)
    for name, grad in lab_grads.items():
        want = trl_grads[name]
        scale = np.abs(want).max()
        assert scale > 0, name
        np.testing.assert_allclose(grad, want, rtol=1e-4, atol=1e-4 * scale, err_msg=name)
