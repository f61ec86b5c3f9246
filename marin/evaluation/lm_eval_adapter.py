"""lm-evaluation-harness on our JAX models: ``--model marin --model_args checkpoint=DIR,...``.

The harness's own Hugging Face model class needs torch; this ``LM`` subclass answers its three request
types with the lab's jitted scorer and KV-cache generator instead, so the harness's task library runs on
any checkpoint the lab can load (a training run's output directory or an HF export):

- ``loglikelihood``: (context, continuation) pairs, tokenized with lm-eval's split rule
  (``split_context_continuation``), scored by ``Scorer.loglikelihood``;
- ``loglikelihood_rolling``: whole documents, scored in windows by ``document_windows``;
- ``generate_until``: greedy (or sampled) continuations cut at the first stop string.

Install with the ``eval`` extra (lm-eval itself installs without torch). Importing this module registers
the model in-process (``lm_eval.simple_evaluate(model="marin", ...)``); lm-eval's own ``lm_eval`` command
cannot see it, so the command line is ``python -m marin.evaluation.lm_eval_cli`` (same arguments).
"""

from __future__ import annotations

import functools

import lm_eval.models  # noqa: F401  lm-eval fills its model registry lazily only while it is empty: fill it

# first, or registering "marin" would hide "hf", "dummy", ... from get_model in this process
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from marin.evaluation.perplexity import document_windows
from marin.evaluation.scoring import Scorer
from marin.evaluation.tasks import split_context_continuation


@register_model("marin")
class MarinLM(LM):
    def __init__(
        self,
        checkpoint: str,
        tokenizer: str | None = None,
        batch_size: int | str = 16,
        max_len: int | None = None,
        max_gen_toks: int = 128,
        **_ignored,
    ):
        super().__init__()
        from marin.inference import load_model, place_params
        from marin.tokenize import eos_id, load_tokenizer, text_encoder
        from marin.trainer.model.llama import forward

        self.cfg, host_params, _ = load_model(checkpoint, None)
        self.params = place_params(self.cfg, host_params)  # scoring and generation share one placement
        self.tokenizer = load_tokenizer(tokenizer or checkpoint)
        self.eos = eos_id(self.tokenizer)
        self._text_tokenizer = text_encoder(self.tokenizer)  # task text never becomes a control token
        self.max_gen_toks = int(max_gen_toks)
        cfg, params = self.cfg, self.params
        # lm-eval's "auto" batch sizing probes torch device memory: use our default instead
        batch_size = int(batch_size) if str(batch_size).isdigit() else 16
        self.scorer = Scorer(
            functools.partial(forward, cfg),
            params=params,
            batch_size=batch_size,
            max_len=int(max_len or cfg.seq_len),
            pad_id=self.eos,
        )

    def _encode(self, text: str) -> list[int]:
        return self._text_tokenizer.encode(text, add_special_tokens=False).ids

    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        pairs = []
        for request in requests:
            context, continuation = request.args
            ctx, cont = split_context_continuation(self._encode, context, continuation)
            pairs.append(([self.eos, *ctx], cont))
        return self.scorer.loglikelihood(pairs)

    def loglikelihood_rolling(self, requests) -> list[float]:
        out = []
        for request in requests:
            (text,) = request.args
            tokens = self._encode(text)
            # lm-eval's rolling loglikelihood covers the document's own tokens, not a closing EOS.
            rows = document_windows(tokens, self.eos, self.scorer.max_len, closing_eos=False)
            per_row = self.scorer.token_nll([row for row, _ in rows])
            out.append(-sum(float(nll[-new:].sum()) for (_, new), nll in zip(rows, per_row)))
        return out

    def generate_until(self, requests) -> list[str]:
        from marin.inference import GenerationConfig, decode_until, generate

        out = []
        for request in requests:
            context, kwargs = request.args
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            gen = GenerationConfig(
                max_new_tokens=int(kwargs.get("max_gen_toks", self.max_gen_toks)),
                temperature=float(kwargs.get("temperature", 0.0)),
                stop_tokens=(self.eos,),
                seed=int(kwargs.get("seed", 0)),
            )
            prompt = [self.eos, *self._encode(context)][-(self.cfg.seq_len - gen.max_new_tokens) :]
            tokens = generate(self.cfg, self.params, [prompt], gen)[0]
            text = decode_until(self.tokenizer.decode, tokens, (self.eos,), until)
            out.append(text)
        return out
