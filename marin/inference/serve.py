"""python -m marin.inference.serve --checkpoint PATH [--tokenizer DIR] [--host 127.0.0.1] [--port 8000]
   [--model_name NAME] [--slots 16] [--prefill_chunk 256] [--mixed_chunk 64] [--max_waiting 256] [--api_key KEY]
   [--dtype auto|float32|bfloat16] [--max_model_len N]

Serve a model with an OpenAI-compatible API (``marin.inference.server``). PATH is a Hugging Face directory
(an export, or any model of a family ``import_hf`` reads: its own tokenizer files and, for an instruct model,
its chat template are used, and generation ends at the ``eos_token_id`` its ``generation_config.json`` or
``config.json`` declares; ``marin.inference.model_tokenizer``) or a training or SFT run's output directory
(then ``--tokenizer`` names the tokenizer, or the SFT run's recorded chat tokenizer is found).

The server listens on loopback unless ``--host`` says otherwise; ``--api_key`` (or ``MARIN_API_KEY``)
makes ``/v1/*`` require ``Authorization: Bearer KEY``. The model is called by ``--model_name`` (default:
the checkpoint directory's name) or by PATH itself, which lets lm-eval's ``local-completions`` load the
tokenizer from PATH with ``model=PATH``. Before it listens, the server compiles every program a request can
need (prefill chunk sizes and attention spans; ``--no_warmup`` skips it). On Ctrl-C or SIGTERM the server
stops taking requests, lets the running ones finish for ``--graceful_seconds``, then cancels the rest: each
of their clients gets its answer so far with ``finish_reason: "cancelled"`` (a stream ends with ``[DONE]``),
and the process exits. ``--dtype auto`` (the default) serves bf16 weights and KV cache on a GPU or TPU, as
vLLM does with an fp32 checkpoint, and the weights' own precision on a CPU; ``--max_model_len`` caps prompt +
generated tokens below the model's context, for a smaller cache and fewer programs to compile.
See docs/serving.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import time

from marin.logs import configure_logging

logger = logging.getLogger(__name__)


def load_served_model(
    checkpoint: str, tokenizer: str | None = None, name: str | None = None, engine_config=None, warmup: bool = False
):
    """Load, place and wrap a checkpoint for serving (the engine is started; ``warmup`` compiles every
    program first, so no request waits for a compilation)."""
    from marin.chat.template import ChatTokenizer
    from marin.inference import load_model, place_params
    from marin.inference.chat import find_chat_tokenizer
    from marin.inference.engine import Engine, EngineConfig
    from marin.inference.model_tokenizer import end_token_ids, model_tokenizer
    from marin.inference.server import ServedModel
    from marin.tokenize import text_encoder

    cfg, params, _ = load_model(checkpoint)
    chat_dir = find_chat_tokenizer(checkpoint, tokenizer)
    chat = ChatTokenizer.load(chat_dir) if chat_dir else None
    base = chat.tokenizer if chat else model_tokenizer(checkpoint, tokenizer)
    ends = end_token_ids(checkpoint, base, cfg.vocab_size)
    end_tokens = tuple(dict.fromkeys((chat.eot_id, *ends))) if chat else ends
    encoder = text_encoder(base)
    with_prefix = encoder.encode("a", add_special_tokens=True).ids
    prefix = tuple(with_prefix[: len(with_prefix) - len(encoder.encode("a", add_special_tokens=False).ids)])
    engine = Engine(cfg, place_params(cfg, params), engine_config or EngineConfig(), end_tokens=end_tokens)
    if warmup:
        started = time.perf_counter()
        programs = engine.warmup()
        logger.info("compiled %d programs in %.1f s", programs, time.perf_counter() - started)
    engine.start()
    return ServedModel(
        name=name or os.path.basename(checkpoint.rstrip("/")),
        aliases=(checkpoint,),
        engine=engine,
        encode_text=lambda text: encoder.encode(text, add_special_tokens=False).ids,
        decode=lambda ids: base.decode(ids, skip_special_tokens=True),
        token_text=lambda token: base.decode([token], skip_special_tokens=False),
        prefix=prefix,
        chat=chat,
    )


def engine_config(args: argparse.Namespace, platform: str):
    """The engine's settings from the command line; ``--dtype auto`` is bf16 on an accelerator (``platform``
    is ``jax.default_backend()``) and the weights' own precision on a CPU."""
    from marin.inference.engine import EngineConfig

    dtype = args.dtype
    if dtype == "auto":
        dtype = "bfloat16" if platform in ("gpu", "cuda", "rocm", "tpu") else None
    return EngineConfig(
        slots=args.slots,
        prefill_chunk=args.prefill_chunk,
        mixed_chunk=args.mixed_chunk,
        max_waiting=args.max_waiting,
        max_model_len=args.max_model_len,
        dtype=dtype,
    )


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Serve a model with an OpenAI-compatible API.")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--host", default="127.0.0.1", help="default: loopback only")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model_name", default=None)
    parser.add_argument("--slots", type=int, default=16, help="requests decoded together")
    parser.add_argument("--prefill_chunk", type=int, default=256, help="most prompt tokens fed per step")
    parser.add_argument(
        "--mixed_chunk",
        type=int,
        default=64,
        help="prompt tokens fed in a step that also decodes (one program for both); 0: separate programs",
    )
    parser.add_argument("--max_waiting", type=int, default=256, help="queued requests beyond the slots (then 429)")
    parser.add_argument("--api_key", default=os.environ.get("MARIN_API_KEY"))
    parser.add_argument(
        "--graceful_seconds", type=float, default=30, help="on SIGTERM, how long running requests may finish"
    )
    parser.add_argument(
        "--dtype",
        choices=["auto", "float32", "bfloat16"],
        default="auto",
        help="weights and KV cache; auto: bfloat16 on a GPU or TPU, the weights' own on a CPU",
    )
    parser.add_argument(
        "--max_model_len", type=int, default=None, help="longest prompt + output served (default: the model's)"
    )
    parser.add_argument(
        "--no_warmup", action="store_true", help="skip compiling every program at start (first requests wait)"
    )
    return parser


def main(argv=None) -> None:
    args = argument_parser().parse_args(argv)
    configure_logging(logging.INFO)

    import jax

    from marin.inference.server import make_server

    config = engine_config(args, jax.default_backend())
    model = load_served_model(args.checkpoint, args.tokenizer, args.model_name, config, warmup=not args.no_warmup)
    server = make_server(
        model, host=args.host, port=args.port, api_key=args.api_key, graceful_seconds=args.graceful_seconds
    )
    logger.info("serving %s on http://%s:%d/v1", model.name, args.host, args.port)
    server.run()


if __name__ == "__main__":
    main()
