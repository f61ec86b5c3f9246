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
    (moo, moo_greedy), (caw, _) = results
    assert moo > caw and moo_greedy  # the corpus teaches what cows say
    ctx, cont = lm._encode(context), lm._encode(context + " moo")[len(lm._encode(context)):]
    direct = lm.scorer.loglikelihood([([lm.eos, *ctx], cont)])[0][0]
    assert moo == pytest.approx(direct, abs=1e-5)

    text = "Once upon a time there was a little dog."
    [rolling] = lm.loglikelihood_rolling([inst("loglikelihood_rolling", (text,))])
    tokens = lm._encode(text)
    per_token = lm.scorer.token_nll([[lm.eos, *tokens]])[0]
    assert rolling == pytest.approx(-float(per_token.sum()), abs=1e-4) and math.isfinite(rolling)

    [generated] = lm.generate_until([inst("generate_until", ("Once upon a time", {"until": ["."],
                                                                                 "max_gen_toks": 30}))])
    assert generated and "." not in generated
