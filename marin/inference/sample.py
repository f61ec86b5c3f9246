"""python -m marin.inference.sample --checkpoint PATH --prompt "Once upon a time" [--max_new_tokens 64]
   [--temperature 0.8] [--top_p 0.9] [--top_k 50] [--seed 0] [--tokenizer TOK] [--num_samples 1]
   [--stop "." --stop " The"] [--stop_token_id 42]

PATH is a Hugging Face directory (its own tokenizer files and end-of-text ids are used, as by the server:
``marin.inference.model_tokenizer``) or a training run's output directory (then pass --tokenizer). Samples are
generated together by the serving engine (``marin.inference.engine``), sample i with seed ``--seed + i``. The
prompt is encoded as the tokenizer encodes a text (the lab's put their end-of-document token first).
Generation stops at an end-of-text token, at a ``--stop_token_id``, at a
``--stop`` string (both repeatable) or after --max_new_tokens. Stops are not printed: the text ends right
before the first stop token or stop string (searched in the generated text only, not the prompt).
"""

import argparse
import logging

from marin.logs import configure_logging


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Sample text from a trained model with a KV cache.")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.8, help="0: greedy")
    parser.add_argument("--top_k", type=int, default=0, help="0: off")
    parser.add_argument("--top_p", type=float, default=1.0, help="1: off")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_samples", type=int, default=1)
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable), not printed")
    parser.add_argument(
        "--stop_token_id",
        type=int,
        action="append",
        default=[],
        help="stop token id (repeatable; the end-of-document token always stops), not printed",
    )
    args = parser.parse_args(argv)
    configure_logging(logging.WARNING)

    from marin.inference import load_model, place_params
    from marin.inference.engine import Engine, EngineConfig
    from marin.inference.model_tokenizer import end_token_ids, model_tokenizer
    from marin.inference.sampling_params import from_flags
    from marin.tokenize import text_encoder

    cfg, params, _ = load_model(args.checkpoint, None)
    tokenizer = model_tokenizer(args.checkpoint, args.tokenizer)
    ends = end_token_ids(args.checkpoint, tokenizer, cfg.vocab_size)
    # the lab's tokenizers put their EOS (where a training document starts) before the text
    prompt = text_encoder(tokenizer).encode(args.prompt, add_special_tokens=True).ids
    engine = Engine(cfg, place_params(cfg, params), EngineConfig(slots=args.num_samples), end_tokens=ends)
    sampling = from_flags(
        max_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        stop=tuple(args.stop),
        stop_token_ids=tuple(args.stop_token_id),
    )
    # sample i draws with seed + i: the samples differ, and each is reproducible on its own
    each = [sampling.with_seed_offset(i) for i in range(args.num_samples)]
    for result in engine.generate([prompt] * args.num_samples, each, detokenize=tokenizer.decode):
        print(args.prompt + result.text)


if __name__ == "__main__":
    main()
