"""lm-eval-harness's command line with our model registered:

    python -m marin.evaluation.lm_eval_cli --model marin --model_args checkpoint=DIR[,tokenizer=TOK,max_len=N] \\
        --tasks hellaswag,arc_easy --num_fewshot 0 --batch_size 16 --output_path OUT [--include_path MY_TASKS]

Every argument is lm-eval's own (``lm-eval run --help``). The wrapper exists because lm-eval 0.4 finds
models only in its own registry, filled by its own package (no plugin entry point), so the plain
``lm_eval --model marin`` answers "no model for this name found"; here the adapter is imported, and so
registered, before lm-eval's CLI parses the arguments.
"""

import sys


def main(argv=None) -> None:
    from lm_eval.__main__ import cli_evaluate

    import marin.evaluation.lm_eval_adapter  # noqa: F401  registers --model marin

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]  # lm-eval's CLI reads sys.argv itself
    cli_evaluate()


if __name__ == "__main__":
    main()
