"""``python -m marin.corpus --output DIR [--seed N] [--train_docs_per_domain N]``: write the bundled corpus."""

import argparse
import dataclasses
import json

from marin.corpus.build import CorpusConfig, generate_corpus
from marin.logs import configure_logging


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the bundled corpus (see marin.corpus.build).")
    parser.add_argument("--output", required=True, help="directory or fsspec URL to write to")
    for field in dataclasses.fields(CorpusConfig):
        if field.name != "output_path":
            parser.add_argument(f"--{field.name}", type=type(field.default), default=field.default)
    args = vars(parser.parse_args(argv))
    configure_logging()
    manifest = generate_corpus(CorpusConfig(output_path=args.pop("output"), **args))
    print(json.dumps(manifest["planted"]))


if __name__ == "__main__":
    main()
