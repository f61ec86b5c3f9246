"""lm-evaluation-harness on our JAX models: ``--model marin --model_args checkpoint=DIR,...``.

The harness's own Hugging Face model class needs torch; this ``LM`` answers its three request types with
the lab's jitted scorer and the serving engine instead, and gives, request by request, what lm-eval's own
``hf`` model gives on the exported checkpoint with its defaults, because it follows the same rules with the
harness's own functions:

- text is encoded as the exported tokenizer encodes it by default: the document-start token (the lab's
  EOS, ``marin.inference.hf.document_start_tokenizer``) and then the text, special-token strings as
  ordinary text; ``add_bos_token=False`` drops the start token, as it does for ``hf``;
- ``loglikelihood``: lm-eval's ``TemplateLM`` split (all trailing whitespace of the context moves to the
  continuation; an empty context is the prefix token), inputs cut to the last ``max_length + 1`` tokens;
- ``loglikelihood_rolling``: lm-eval's disjoint windows (``get_rolling_token_windows`` then
  ``make_disjoint_window``, context 1, prefix token first) over the encoded document;
- ``generate_until``: lm-eval's ``normalize_gen_kwargs`` (``do_sample: false`` or no temperature: greedy),
  the EOS string added to ``until``, the context left-truncated to ``max_length - max_gen_toks``, all
  requests of a call batched through the engine, the text cut by ``postprocess_generated_text``.

``max_length`` defaults to the model's ``seq_len`` (``hf``'s default too: the export's
``max_position_embeddings``). Install with the ``eval`` extra (lm-eval itself installs without torch).
Importing this module registers the model in-process (``lm_eval.simple_evaluate(model="marin", ...)``);
lm-eval's own ``lm_eval`` command cannot see it, so the command line is
``python -m marin.evaluation.lm_eval_cli`` (same arguments).
"""

from __future__ import annotations

import functools

import lm_eval.models  # noqa: F401  lm-eval fills its model registry lazily only while it is empty: fill it

# first, or registering "marin" would hide "hf", "dummy", ... from get_model in this process
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text

from marin.evaluation.scoring import Scorer


def _flag(value) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    return str(value).lower() in ("1", "true", "yes")


@register_model("marin")
class MarinLM(TemplateLM):
    def __init__(
        self,
        checkpoint: str,
        tokenizer: str | None = None,
        batch_size: int | str = 16,
        max_length: int | None = None,
        max_len: int | None = None,  # the older name of max_length
        max_gen_toks: int = 256,
        add_bos_token: bool | str | None = None,
        slots: int | None = None,
        **_ignored,
    ):
        super().__init__()
        from marin.inference import load_model, place_params
        from marin.inference.engine import Engine, EngineConfig
        from marin.inference.hf import document_start_tokenizer
        from marin.tokenize import eos_id, load_tokenizer, text_encoder
        from marin.trainer.model.llama import forward

        self.cfg, host_params, _ = load_model(checkpoint, None)
        self.params = place_params(self.cfg, host_params)  # scoring and generation share one placement
        self.tokenizer = document_start_tokenizer(load_tokenizer(tokenizer or checkpoint))
        self.eos = eos_id(self.tokenizer)
        self._text_tokenizer = text_encoder(self.tokenizer)  # task text never becomes a control token
        self.add_bos_token = _flag(add_bos_token)
        self.max_gen_toks = int(max_gen_toks)
        self.max_length = int(max_length or max_len or self.cfg.seq_len)
        # lm-eval's "auto" batch sizing probes torch device memory: use our default instead
        self.batch_size = int(batch_size) if str(batch_size).isdigit() else 16
        self.scorer = Scorer(
            functools.partial(forward, self.cfg),
            params=self.params,
            batch_size=self.batch_size,
            max_len=self.max_length,
            pad_id=self.eos,
        )
        engine_config = EngineConfig(slots=int(slots or min(self.batch_size, 64)), max_waiting=1 << 20)
        self.engine = Engine(self.cfg, self.params, engine_config, end_tokens=(self.eos,))

    @property
    def eot_token_id(self) -> int:
        return self.eos

    @property
    def prefix_token_id(self) -> int:
        return self.eos  # the export's BOS and EOS are the same token

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        """What ``hf``'s ``tok_encode`` gives on the export: its defaults add the document-start token."""
        if add_special_tokens is None:
            add_special_tokens = self.add_bos_token if self.add_bos_token is not None else True
        return self._text_tokenizer.encode(string, add_special_tokens=add_special_tokens).ids

    def _encode(self, text: str) -> list[int]:
        """The text's own tokens (no start token)."""
        return self.tok_encode(text, add_special_tokens=False)

    def _loglikelihood_tokens(self, requests, **kwargs) -> list[tuple[float, bool]]:
        return self.scorer.loglikelihood([(context, continuation) for _, context, continuation in requests])

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows, owners = [], []
        for index, request in enumerate(requests):
            (text,) = request.args
            for context, predicted in map(
                lm_utils.make_disjoint_window,
                lm_utils.get_rolling_token_windows(
                    token_list=self.tok_encode(text),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, context, predicted))
                owners.append(index)
        totals = [0.0] * len(requests)
        for owner, (logprob, _) in zip(owners, self._loglikelihood_tokens(windows)):
            totals[owner] += logprob
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        from marin.inference.sampling_params import SamplingParams

        eos_text = self.tokenizer.decode([self.eos], skip_special_tokens=False)
        submitted = []
        for request in requests:
            context, gen_kwargs = request.args
            kwargs = normalize_gen_kwargs(dict(gen_kwargs), self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
            max_gen = int(kwargs.pop("max_gen_toks"))
            if max_gen >= self.max_length:
                raise ValueError(f"max_gen_toks {max_gen} must be less than max_length {self.max_length}")
            sampled = bool(kwargs.get("do_sample")) and float(kwargs.get("temperature", 0.0) or 0.0) > 0
            params = SamplingParams(
                max_tokens=max_gen,
                temperature=float(kwargs.get("temperature", 0.0)) if sampled else 0.0,
                top_p=float(kwargs.get("top_p") or 1.0) if sampled else 1.0,
                top_k=int(kwargs.get("top_k") or 0) if sampled else 0,
                seed=1234 if kwargs.get("seed") is None else int(kwargs["seed"]),  # tasks may pass seed: null
                stop=tuple(until),
            )
            prompt = self.tok_encode(context)[-(min(self.max_length, self.cfg.seq_len) - max_gen) :]
            decode = functools.partial(self.tokenizer.decode, skip_special_tokens=True)
            submitted.append((self.engine.submit(prompt, params, detokenize=decode), until))
        self.engine.run_until_idle()
        out = []
        for request, until in submitted:
            text = self.tokenizer.decode(request.result().tokens, skip_special_tokens=True)
            out.append(postprocess_generated_text(generation=text, stop=until, think_end_token=None))
        return out
