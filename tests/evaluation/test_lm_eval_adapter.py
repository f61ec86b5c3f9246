"""lm-evaluation-harness's request types answered by our JAX model (the trained quickstart export)."""

import math

import pytest

from tests.requirements import require_module

lm_eval = require_module("lm_eval", "lm-eval (the eval extra, installed by make test)")


@pytest.mark.slow
def test_harness_requests_on_the_quickstart_model(quickstart_run):
    from lm_eval.api.instance import Instance
    from lm_eval.api.registry import get_model

    from marin.evaluation.lm_eval_adapter import MarinLM

    assert get_model("marin") is MarinLM
    lm = MarinLM(checkpoint=quickstart_run["paths"]["export"], batch_size=8)
    quoted = "a page quoting <|endoftext|> mid-sentence"  # task text never becomes a control token
    assert lm.eos not in lm._encode(quoted) and lm.tokenizer.decode(lm._encode(quoted)) == quoted

    def inst(kind, args):
        return Instance(request_type=kind, doc={}, arguments=args, idx=0)

    context = "Maya and Leo visited the farm on Monday. There they met a happy cow, and the cow said"
    results = lm.loglikelihood([inst("loglikelihood", (context, " moo")), inst("loglikelihood", (context, " caw"))])
    (moo, moo_greedy), (caw, caw_greedy) = results
    assert moo > caw  # the corpus teaches what cows say
    ctx, cont = lm._encode(context), lm._encode(context + " moo")[len(lm._encode(context)) :]
    direct = lm.scorer.loglikelihood([([lm.eos, *ctx], cont)])[0][0]
    assert moo == pytest.approx(direct, abs=1e-5)
    # is_greedy means: every continuation token is the model's argmax given what precedes it
    import numpy as np

    from marin.trainer.model.llama import forward

    for word, flag in ((" moo", moo_greedy), (" caw", caw_greedy)):
        cont = lm._encode(context + word)[len(ctx) :]
        row = np.asarray([[lm.eos, *ctx, *cont]], np.int32)
        predicted = np.argmax(np.asarray(forward(lm.cfg, lm.params, row[:, :-1]))[0, -len(cont) :], axis=-1)
        assert flag == bool(np.all(predicted == np.asarray(cont))), word

    text = "Once upon a time there was a little dog."
    [rolling] = lm.loglikelihood_rolling([inst("loglikelihood_rolling", (text,))])
    # lm-eval's rule on a tokenizer that adds a start token: the encoded document (start token included) is
    # predicted after the prefix token, so the start token itself is scored too, as for Llama 3
    tokens = lm.tok_encode(text)
    assert tokens == [lm.eos, *lm._encode(text)]
    per_token = lm.scorer.token_nll([[lm.eos, *tokens]])[0]
    assert rolling == pytest.approx(-float(per_token.sum()), abs=1e-4) and math.isfinite(rolling)

    [generated] = lm.generate_until(
        [inst("generate_until", ("Once upon a time", {"until": ["."], "max_gen_toks": 30}))]
    )
    assert generated and "." not in generated
    # A task's generation_kwargs may say `seed: null`: the adapter's default seed, not a crash.
    [same] = lm.generate_until(
        [inst("generate_until", ("Once upon a time", {"until": ["."], "max_gen_toks": 30, "seed": None}))]
    )
    assert same == generated


def test_registering_marin_keeps_lm_evals_own_models():
    """lm-eval fills its registry lazily only while it is empty: ours must not hide "hf", "dummy", ..."""
    from lm_eval.api.registry import get_model

    import marin.evaluation.lm_eval_adapter  # noqa: F401

    assert get_model("marin").__name__ == "MarinLM"
    assert get_model("dummy").__name__ == "DummyLM"


LM_EVAL_TASK = """\
task: marin_sounds
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: context
doc_to_choice: choices
doc_to_target: gold
target_delimiter: ""
metric_list:
  - metric: acc
  - metric: acc_norm
"""


@pytest.mark.slow  # ~30 s: lm-eval indexes its whole task library at start-up
def test_lm_eval_command_line_runs_the_marin_model(tmp_path):
    """`python -m marin.evaluation.lm_eval_cli --model marin ...` through lm-eval's own CLI, on a task
    defined with lm-eval's YAML over a local JSONL file: lm-eval's per-choice log-likelihoods and accuracy
    are those of our scorer and our task scoring on the same items."""
    import glob
    import json
    import os
    import subprocess
    import sys

    from marin.evaluation import MultipleChoiceTask, Scorer, score_task
    from marin.evaluation.tasks import split_context_continuation
    from marin.tokenize import eos_id, load_tokenizer
    from marin.trainer.model.llama import forward
    from tests.export.tiny_model import make_tiny_export

    checkpoint = str(tmp_path / "hf")
    cfg, params = make_tiny_export(checkpoint)
    items = [
        {"context": f"The {a} said", "choices": [" moo", " caw", " woof", " oink"], "gold": i % 4}
        for i, a in enumerate(["cow", "crow", "dog", "cat", "hen", "pig", "owl", "fox", "duck", "bee"])
    ]
    data = tmp_path / "sounds.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in items))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "marin_sounds.yaml").write_text(LM_EVAL_TASK.format(data=data))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets-cache"),
        "JAX_PLATFORMS": "cpu",
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "marin.evaluation.lm_eval_cli",
            "--model",
            "marin",
            "--model_args",
            f"checkpoint={checkpoint}",
            "--tasks",
            "marin_sounds",
            "--include_path",
            str(tmp_path / "tasks"),
            "--batch_size",
            "4",
            "--output_path",
            str(tmp_path / "out"),
            "--log_samples",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    [results_file] = glob.glob(str(tmp_path / "out" / "*" / "results_*.json"))
    [samples_file] = glob.glob(str(tmp_path / "out" / "*" / "samples_marin_sounds_*.jsonl"))
    lm_eval_results = json.loads(open(results_file).read())["results"]["marin_sounds"]
    samples = sorted((json.loads(line) for line in open(samples_file)), key=lambda s: s["doc_id"])

    tokenizer = load_tokenizer(checkpoint)
    eos = eos_id(tokenizer)

    def encode(text):
        return tokenizer.encode(text, add_special_tokens=False).ids

    scorer = Scorer(lambda tokens: forward(cfg, params, tokens), batch_size=4, max_len=cfg.seq_len, pad_id=eos)
    for sample, item in zip(samples, items):
        requests = [split_context_continuation(encode, item["context"], c) for c in item["choices"]]
        ours = scorer.loglikelihood([([eos, *ctx], cont) for ctx, cont in requests])
        theirs = [float(ll) for ll, _ in sample["filtered_resps"]]
        assert theirs == pytest.approx([ll for ll, _ in ours], abs=1e-4)
    ours = score_task(MultipleChoiceTask(name="sounds", path=str(data)), scorer, encode, eos)
    assert lm_eval_results["acc,none"] == pytest.approx(ours["acc"]["value"])
    assert lm_eval_results["acc_norm,none"] == pytest.approx(ours["acc_norm"]["value"])
    assert "|marin_sounds|" in out.stdout  # lm-eval's own table
