"""Parity with TRL (pinned: the export-test extra) on the same exported weights and the same real pairs, in
fp32 on the CPU: the pair tokenization equals ``DPOTrainer``'s, and for every loss type both offer the loss,
each of TRL's metrics and the gradient of every parameter agree within 1e-4 relative.

The policy and the reference differ (the policy is the reference plus noise), so the log-ratios, rewards and
accuracies are far from their trivial values. The lab side runs the real path: the pair cache written by the
tokenize step's code, ``PairBatches`` packing both replies of 8 pairs into rows, ``dpo_loss_fn``. Gradients are
compared per tensor as ``|g_lab - g_trl| / |g_trl|`` (Frobenius norms; single entries near zero make an
entrywise ratio meaningless), and ``rewards/margins`` relative to the rewards it is the difference of. The policy
is far from the reference on purpose: near it, ``beta * (log pi - log pi_ref)`` of two ~1,000-nat fp32 sums
agrees only to ~3e-5 absolute, in TRL as here."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.chat import ChatTokenizer, PairCache, encode_pairs
from marin.inference.hf import export_hf, to_hf_tensors
from marin.posttrain.batches import PairBatches
from marin.posttrain.losses import METRICS, PreferenceLossConfig
from marin.posttrain.objective import dpo_loss_fn, sequence_logps
from marin.trainer.step import PrecisionPolicy
from tests.posttrain.conftest import TINY, random_params, write_pair_cache
from tests.requirements import require_module

torch = require_module("torch", "CPU torch (the export-test extra)")
transformers = require_module("transformers", "transformers (the export-test extra)")
trl = require_module("trl", "TRL (the export-test extra)")
datasets = require_module("datasets", "datasets")

N = 8
FP32 = PrecisionPolicy(compute_dtype="float32")
RTOL = 1e-4


@pytest.fixture(scope="module")
def setup(tmp_path_factory, pairs, chat_dir):
    chat = ChatTokenizer.load(str(chat_dir))
    batch_pairs = []
    for pair in pairs:  # real pairs whose both sides fit the tiny model's window
        chosen, rejected, _ = encode_pairs(chat, [pair])[0]
        if max(len(chosen), len(rejected)) <= TINY.seq_len:
            batch_pairs.append(pair)
        if len(batch_pairs) == N:
            break
    root = tmp_path_factory.mktemp("parity")
    reference = random_params(TINY, 0)
    noise = random_params(TINY, 1)
    policy = jax.tree.map(lambda r, n: r + n if r.ndim > 1 else r, reference, noise)
    for name, params in (("policy", policy), ("reference", reference)):
        export_hf(TINY, params, str(root / name), tokenizer=str(chat_dir))
    cache = PairCache.open(str(write_pair_cache(root / "pairs", batch_pairs, chat_dir)))
    batch = PairBatches(cache, seq_len=TINY.seq_len, pairs_per_step=N, shuffle=False).batch(0)
    assert batch["input_ids"].shape[0] < 2 * N  # packed: fewer rows than sequences
    return {
        "root": root,
        "pairs": batch_pairs,
        "cache": cache,
        "batch": jax.tree.map(jnp.asarray, batch),
        "policy": jax.tree.map(jnp.asarray, policy),
        "reference": jax.tree.map(jnp.asarray, reference),
    }


def lab(setup, loss: PreferenceLossConfig, frozen=True) -> tuple[float, dict, dict]:
    """The lab's loss, metrics and HF-named gradients on the setup's batch."""
    loss_fn = dpo_loss_fn(TINY, loss, FP32)
    reference = setup["reference"] if frozen else None

    def mean_loss(params):
        loss_sum, weight, sums = loss_fn(params, setup["batch"], reference)
        return loss_sum / weight, {k: v / weight for k, v in sums.items()}

    (value, metrics), grads = jax.value_and_grad(mean_loss, has_aux=True)(setup["policy"])
    return float(value), {k: float(v) for k, v in metrics.items()}, to_hf_tensors(TINY, jax.device_get(grads))


def _model(path):
    model = transformers.LlamaForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return model.train()


def trl_dpo(setup, tmp_path, pairs, **loss) -> tuple[float, dict, dict, object]:
    """TRL's DPOTrainer computation: its collator's batch of ``pairs``, ``compute_loss``, backward."""
    from trl import DPOConfig, DPOTrainer

    root = setup["root"]
    args = DPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=N,
        max_length=None,
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        report_to="none",
        dataloader_num_workers=0,
        **loss,
    )
    model = _model(root / "policy")
    trainer = DPOTrainer(
        model=model,
        ref_model=_model(root / "reference"),
        args=args,
        train_dataset=datasets.Dataset.from_list(pairs),
        processing_class=transformers.AutoTokenizer.from_pretrained(str(root / "policy")),
    )
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(N)])
    value = trainer.compute_loss(trainer.model, batch)
    value.backward()
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    grads = {name: p.grad.numpy() for name, p in model.named_parameters()}
    return float(value), metrics, grads, trainer


def assert_close(lab_result, trl_loss, trl_metrics, trl_grads):
    value, metrics, grads = lab_result
    np.testing.assert_allclose(value, trl_loss, rtol=RTOL)
    for name in METRICS:
        # a margin is a difference of rewards: relative to its operands (a mean margin near 0 is cancellation)
        scale = max(abs(trl_metrics["rewards/chosen"]), abs(trl_metrics["rewards/rejected"]))
        atol = RTOL * scale if name == "rewards/margins" else 0.0
        np.testing.assert_allclose(metrics[name], trl_metrics[name], rtol=RTOL, atol=atol, err_msg=name)
    assert set(grads) == set(trl_grads)
    for name, g in trl_grads.items():
        error = np.linalg.norm(grads[name] - g) / np.linalg.norm(g)
        assert error < RTOL, (name, error)


def test_pair_tokenization_equals_trl(setup, tmp_path):
    *_, trainer = trl_dpo(setup, tmp_path, setup["pairs"])
    for i in range(N):
        row = trainer.train_dataset[i]
        chosen, rejected, prompt_len = setup["cache"].pair(i)
        assert row["prompt_ids"] == chosen[:prompt_len].tolist()
        assert row["chosen_ids"] == chosen[prompt_len:].tolist()
        assert row["rejected_ids"] == rejected[prompt_len:].tolist()


@pytest.mark.parametrize(
    "loss",
    [
        dict(loss_type="sigmoid", beta=0.1),
        dict(loss_type="robust", beta=0.5, label_smoothing=0.1),
        dict(loss_type="hinge", beta=0.05),
        dict(loss_type="ipo", beta=0.1),
    ],
    ids=lambda d: d["loss_type"],
)
def test_dpo_losses_metrics_and_gradients_equal_trl(setup, tmp_path, loss):
    trl_loss, trl_metrics, trl_grads, _ = trl_dpo(setup, tmp_path, setup["pairs"], **loss)
    ours = PreferenceLossConfig(
        type=loss["loss_type"], beta=loss["beta"], label_smoothing=loss.get("label_smoothing", 0)
    )
    assert 0 < trl_metrics["rewards/accuracies"] < 1  # a batch where the metrics are not trivial
    assert_close(lab(setup, ours), trl_loss, trl_metrics, trl_grads)


def test_conservative_dpo_label_smoothing_is_trl_sigmoid_on_both_labelings(setup, tmp_path):
    """TRL 1.16's sigmoid loss has no label smoothing (it moved to 'robust'); conservative DPO's
    ``(1 - eps) * l(delta) + eps * l(-delta)`` is TRL's sigmoid loss on the pairs and on the swapped pairs,
    mixed, gradients included."""
    eps = 0.2
    swapped = [{**p, "chosen": p["rejected"], "rejected": p["chosen"]} for p in setup["pairs"]]
    straight = trl_dpo(setup, tmp_path / "a", setup["pairs"], loss_type="sigmoid", beta=0.1)
    flipped = trl_dpo(setup, tmp_path / "b", swapped, loss_type="sigmoid", beta=0.1)
    value, _, grads = lab(setup, PreferenceLossConfig(beta=0.1, label_smoothing=eps))
    np.testing.assert_allclose(value, (1 - eps) * straight[0] + eps * flipped[0], rtol=RTOL)
    for name, g in straight[2].items():
        expected = (1 - eps) * g + eps * flipped[2][name]
        assert np.linalg.norm(grads[name] - expected) / np.linalg.norm(expected) < RTOL, name


def test_simpo_equals_trl_cpo_trainer(setup, tmp_path):
    """SimPO is TRL's CPOTrainer with ``loss_type="simpo"`` and ``cpo_alpha=0`` (no NLL term), fed the same token
    ids: CPO tokenizes prompt and reply apart, so its batch is built here from the pair cache's ids."""
    from trl.experimental.cpo import CPOConfig, CPOTrainer

    root, beta, gamma, eps = setup["root"], 2.0, 0.5, 0.1
    args = CPOConfig(
        output_dir=str(tmp_path / "cpo"),
        loss_type="simpo",
        cpo_alpha=0.0,
        beta=beta,
        simpo_gamma=gamma,
        label_smoothing=eps,
        per_device_train_batch_size=N,
        bf16=False,
        use_cpu=True,
        report_to="none",
    )
    model = _model(root / "policy")
    trainer = CPOTrainer(
        model=model,
        args=args,
        train_dataset=datasets.Dataset.from_list(setup["pairs"]),
        processing_class=transformers.AutoTokenizer.from_pretrained(str(root / "policy")),
    )
    batch = {}
    for side, column in (("chosen", 0), ("rejected", 1)):
        rows = [setup["cache"].pair(i) for i in range(N)]
        width = max(len(r[column]) for r in rows)
        ids = torch.zeros((N, width), dtype=torch.long)
        labels = torch.full((N, width), -100, dtype=torch.long)
        attention = torch.zeros((N, width), dtype=torch.long)
        for i, r in enumerate(rows):
            seq, prompt_len = torch.as_tensor(r[column], dtype=torch.long), r[2]
            ids[i, : len(seq)], attention[i, : len(seq)] = seq, 1
            labels[i, prompt_len : len(seq)] = seq[prompt_len:]
        batch |= {f"{side}_input_ids": ids, f"{side}_attention_mask": attention, f"{side}_labels": labels}
    value, metrics = trainer.get_batch_loss_metrics(model, batch)
    value.backward()
    grads = {name: p.grad.numpy() for name, p in model.named_parameters()}
    ours = lab(setup, PreferenceLossConfig(type="simpo", beta=beta, simpo_gamma=gamma, label_smoothing=eps), False)
    assert_close(ours, float(value), metrics, grads)


def test_precomputed_reference_logps_give_the_on_the_fly_loss(setup):
    """The reference step's numbers in the batch (``ref_logps``) replace the frozen model exactly."""
    logps, _ = sequence_logps(TINY, setup["reference"], setup["batch"])
    batch = {**setup["batch"], "ref_logps": logps}
    loss = PreferenceLossConfig(beta=0.1)
    on_the_fly = dpo_loss_fn(TINY, loss, FP32)(setup["policy"], setup["batch"], setup["reference"])
    precomputed = dpo_loss_fn(TINY, loss, FP32)(setup["policy"], batch, None)
    for a, b in zip(jax.tree.leaves(on_the_fly), jax.tree.leaves(precomputed)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
