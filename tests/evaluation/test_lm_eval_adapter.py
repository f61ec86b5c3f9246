"""lm-evaluation-harness's request types answered by our JAX model (the trained quickstart export)."""

import math

import pytest

lm_eval = pytest.importorskip("lm_eval", reason="needs lm-eval (the eval extra, installed by make test)")


@pytest.mark.slow
def test_harness_requests_on_the_quickstart_model(quickstart_run):
    from lm_eval.api.instance import Instance
    from lm_eval.api.registry import get_model

    from marin.evaluation.lm_eval_adapter import MarinLM

    assert get_model("marin") is MarinLM
    lm = MarinLM(checkpoint=quickstart_run["paths"]["export"], batch_size=8)

    def inst(kind, args):
        return Instance(request_type=kind, doc={}, arguments=args, idx=0)

    context = "Maya and Leo visited the farm on Monday. There they met a happy cow, and the cow said"
    results = lm.loglikelihood([inst("loglikelihood", (context, " moo")), inst("loglikelihood", (context, " caw"))])
    (moo, moo_greedy), (caw, caw_greedy) = results
    assert moo > caw  # the corpus teaches what cows say
    ctx, cont = lm._encode(context), lm._encode(context + " moo")[len(lm._encode(context)):]
    direct = lm.scorer.loglikelihood([([lm.eos, *ctx], cont)])[0][0]
    assert moo == pytest.approx(direct, abs=1e-5)
    # is_greedy means: every continuation token is the model's argmax given what precedes it
    import numpy as np

    from marin.trainer.model.llama import forward

    for word, flag in ((" moo", moo_greedy), (" caw", caw_greedy)):
        cont = lm._encode(context + word)[len(ctx):]
        row = np.asarray([[lm.eos, *ctx, *cont]], np.int32)
        predicted = np.argmax(np.asarray(forward(lm.cfg, lm.params, row[:, :-1]))[0, -len(cont):], axis=-1)
        assert flag == bool(np.all(predicted == np.asarray(cont))), word

    text = "Once upon a time there was a little dog."
    [rolling] = lm.loglikelihood_rolling([inst("loglikelihood_rolling", (text,))])
    tokens = lm._encode(text)
    per_token = lm.scorer.token_nll([[lm.eos, *tokens]])[0]
    assert rolling == pytest.approx(-float(per_token.sum()), abs=1e-4) and math.isfinite(rolling)

    [generated] = lm.generate_until([inst("generate_until", ("Once upon a time", {"until": ["."],
                                                                                 "max_gen_toks": 30}))])
    assert generated and "." not in generated
