"""What an RL loop needs from the engine: new weights served in place (no reload, no recompilation), and the
log-probability of the end token that finished a request (the policy chose to stop; the update trains on it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.inference.engine import Engine, EngineConfig, SamplingParams, compilations
from marin.trainer.model.llama import forward
from tests.export.tiny_model import make_tiny_export


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_export(str(tmp_path_factory.mktemp("refresh") / "hf"))


def test_updated_params_are_served_without_recompiling(tiny):
    cfg, params = tiny
    prompt = [5, 17, 42, 9]
    greedy = SamplingParams(max_tokens=6, temperature=0)
    engine = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=16, mixed_chunk=0))
    before = engine.generate([prompt], greedy)[0].tokens
    compiled = compilations()
    other = jax.tree.map(lambda x: x * 1.5 if x.ndim > 1 else x, params)
    engine.update_params(other)
    after = engine.generate([prompt], greedy)[0].tokens
    fresh = Engine(cfg, other, EngineConfig(slots=2, prefill_chunk=16, mixed_chunk=0)).generate([prompt], greedy)
    assert after == fresh[0].tokens and after != before
    assert compilations() == compiled  # the same programs served the new weights (and the fresh engine)
    with pytest.raises(ValueError, match="shapes or dtypes differ"):
        engine.update_params(jax.tree.map(lambda x: x.astype(jnp.bfloat16), params))
    engine.submit(prompt, greedy)
    with pytest.raises(RuntimeError, match="idle engine"):
        engine.update_params(params)


def test_the_end_token_that_finished_a_request_comes_with_its_logprob(tiny):
    cfg, params = tiny
    prompt = [5, 17, 42, 9]
    sampled = SamplingParams(max_tokens=8, temperature=0, logprobs=0)
    first = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=16)).generate([prompt], sampled)[0]
    end = first.tokens[2]  # make the third greedy token an end token
    engine = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=16), end_tokens=(end,))
    result = engine.generate([prompt], sampled)[0]
    assert result.finish_reason == "stop" and result.tokens == first.tokens[:3]  # the end token included
    assert len(result.logprobs) == 3 and result.logprobs[-1].token == end
    logits = forward(cfg, params, jnp.asarray([prompt + first.tokens[:2]]))[0, -1]
    want = float(jax.nn.log_softmax(logits)[end])
    np.testing.assert_allclose(result.logprobs[-1].logprob, want, rtol=1e-5, atol=1e-5)
    assert first.finish_reason == "length" and len(first.tokens) == len(first.logprobs) == 8
