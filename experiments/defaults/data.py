"""Data steps: raw data in, token caches out. Download → (extract → classify → filter) → dedupe → tokenize.

    raw = default_download("fineweb-edu", "hf://datasets/HuggingFaceFW/fineweb-edu", revision="87f0914")
    docs = default_dedupe("fineweb-edu", raw, eval_sets=[...])
    tok = default_tokenize("fineweb-edu", train=[docs / "documents"], tokenizer="meta-llama/Meta-Llama-3.1-8B")

Each builder names its step where a user browses for it (``raw/…``, ``extracted/…``, ``classifiers/…``,
``attributes/…``, ``filtered/…``, ``documents/…``, ``tokenizers/…``, ``tokenized/…``) and runs it on one CPU
worker (``CPU_DATA``); worker counts never enter a step's identity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from experiments.defaults.inputs import CPU_DATA, Input, step_input, step_inputs
from marin.dedupe import DedupeConfig, dedupe_documents
from marin.dedupe.config import DecontaminationConfig, ExactDedupeConfig, MinHashConfig, ParagraphDedupeConfig
from marin.download import DownloadConfig, download_dataset
from marin.execution import ExecutorStep, this_output_path, versioned
from marin.extract import ExtractConfig, ExtractorConfig, extract_pages
from marin.quality import (
    AttributeRule,
    ClassifyConfig,
    FastTextConfig,
    FilterConfig,
    TrainClassifierConfig,
    classify_documents,
    filter_documents,
    train_classifier,
)
from marin.tokenize import TokenizeConfig, TrainTokenizerConfig, tokenize_corpus, train_tokenizer
from marin.tokenize.special import SpecialStringPolicy
from marin.tokenize.tokenizer import DEFAULT_SPECIAL_TOKENS


def default_download(
    name: str, source: Input, *, revision: str | None = None, patterns: Sequence[str] = (), files: Sequence[str] = ()
) -> ExecutorStep:
    """``raw/<name>``: a hub data set pinned to ``revision``, or any URL (or another step's output)."""
    return ExecutorStep(
        name=f"raw/{name}",
        fn=download_dataset,
        config=DownloadConfig(
            source=step_input(source),
            revision=versioned(revision),
            patterns=versioned(tuple(patterns)),
            files=versioned(tuple(files)),
            output_path=this_output_path(),
        ),
        description=f"download {source}",
        resources=CPU_DATA,
    )


def default_extract(
    name: str,
    pages: Input,
    *,
    extractor: str = ExtractorConfig().name,
    markdown: bool = ExtractorConfig().markdown,
    min_chars: int = 50,
    max_workers: int | None = None,
) -> ExecutorStep:
    """``extracted/<name>``: HTML pages (WARC, records with an ``html`` field, .html files) to text documents."""
    return ExecutorStep(
        name=f"extracted/{name}",
        fn=extract_pages,
        config=ExtractConfig(
            input_path=step_input(pages),
            output_path=this_output_path(),
            extractor=versioned(ExtractorConfig(name=extractor, markdown=markdown)),
            min_chars=versioned(min_chars),
            max_workers=max_workers,
        ),
        description=f"extract text from {name} pages with {extractor}",
        resources=CPU_DATA,
    )


def default_train_classifier(
    name: str,
    datasets: Mapping[str, Sequence[Input]],
    *,
    fasttext: FastTextConfig = FastTextConfig(),
    max_docs_per_label: int | None = 20_000,
    max_chars: int = 5_000,
) -> ExecutorStep:
    """``classifiers/<name>``: a fastText classifier on labelled document sets, held-out P/R in metrics.json."""
    return ExecutorStep(
        name=f"classifiers/{name}",
        fn=train_classifier,
        config=TrainClassifierConfig(
            datasets={label: step_inputs(paths) for label, paths in datasets.items()},
            output_path=this_output_path(),
            fasttext=versioned(fasttext),
            max_docs_per_label=versioned(max_docs_per_label),
            max_chars=versioned(max_chars),
        ),
        description=f"train the {name} classifier on {', '.join(datasets)}",
        resources=CPU_DATA,
    )


def default_classify(
    name: str, documents: Input, classifier: Input, *, attribute: str, max_chars: int = 5_000
) -> ExecutorStep:
    """``attributes/<name>``: a score per label of ``classifier`` for every document, beside each shard."""
    return ExecutorStep(
        name=f"attributes/{name}",
        fn=classify_documents,
        config=ClassifyConfig(
            input_path=step_input(documents),
            model_path=step_input(classifier),
            output_path=this_output_path(),
            attribute=versioned(attribute),
            max_chars=versioned(max_chars),
        ),
        description=f"score {attribute} of every document",
        resources=CPU_DATA,
    )


def default_filter(
    name: str, documents: Input, attributes: Sequence[Input], rules: Sequence[AttributeRule]
) -> ExecutorStep:
    """``filtered/<name>``: the documents whose attributes pass every rule (thresholds or top-k percent)."""
    return ExecutorStep(
        name=f"filtered/{name}",
        fn=filter_documents,
        config=FilterConfig(
            input_path=step_input(documents),
            attribute_paths=step_inputs(attributes),
            output_path=this_output_path(),
            rules=versioned(tuple(rules)),
        ),
        description=f"keep documents passing {', '.join(r.name for r in rules)}",
        resources=CPU_DATA,
    )


def default_dedupe(
    name: str,
    documents: Input,
    *,
    eval_sets: Sequence[Input] = (),
    fuzzy_threshold: float = 0.8,
    paragraph: bool = False,
) -> ExecutorStep:
    """``documents/<name>``: exact + MinHash dedupe, optionally paragraph dedupe and decontamination."""
    decontaminate = None
    if eval_sets:
        decontaminate = DecontaminationConfig(
            eval_paths=step_inputs(eval_sets), ngram=versioned(13), min_matches=versioned(1)
        )
    return ExecutorStep(
        name=f"documents/{name}",
        fn=dedupe_documents,
        config=DedupeConfig(
            input_path=step_input(documents),
            output_path=this_output_path(),
            exact=versioned(ExactDedupeConfig()),
            fuzzy=versioned(MinHashConfig(threshold=fuzzy_threshold)),
            paragraph=versioned(ParagraphDedupeConfig() if paragraph else None),
            decontaminate=decontaminate,
        ),
        description=f"dedupe {name}",
        resources=CPU_DATA,
    )


def default_train_tokenizer(
    name: str,
    documents: Sequence[Input],
    *,
    vocab_size: int = 8192,
    max_documents: int | None = 50_000,
    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
    pre_tokenizer: str = "llama3",
    kind: str = "bpe",
) -> ExecutorStep:
    """``tokenizers/<name>``: a byte-level BPE trained on ``documents``; ``special_tokens`` may reserve more
    than end-of-document and padding (``(*DEFAULT_SPECIAL_TOKENS, *CHAT_SPECIAL_TOKENS)`` for a later
    instruct phase: the model then has their embeddings from the start). ``pre_tokenizer`` "llama3" (the
    default, versioned: tokenizers trained with GPT-2's split before it are never reused as its output)
    keeps chat prompts a prefix of the training ids and equal to ``transformers``' own. ``kind="char"`` derives a
    character vocabulary instead (``marin.tokenize.chars``; ``vocab_size`` then caps it)."""
    # The default set is left out of the identity, so tokenizers declared before the field existed keep theirs.
    specials = tuple(special_tokens)
    return ExecutorStep(
        name=f"tokenizers/{name}",
        fn=train_tokenizer,
        config=TrainTokenizerConfig(
            input_paths=step_inputs(documents),
            output_path=this_output_path(),
            vocab_size=versioned(vocab_size),
            max_documents=versioned(max_documents),
            special_tokens=specials if specials == DEFAULT_SPECIAL_TOKENS else versioned(specials),
            pre_tokenizer=versioned(pre_tokenizer),
            # like the default specials: BPE tokenizers declared before the field existed keep their identity
            kind=kind if kind == "bpe" else versioned(kind),
        ),
        resources=CPU_DATA,
    )


def default_tokenize(
    name: str,
    *,
    train: Sequence[Input],
    validation: Sequence[Input] = (),
    tokenizer: Input,
    num_workers: int = 1,
    special_strings: SpecialStringPolicy = "text",
) -> ExecutorStep:
    """``tokenized/<name>``: token caches ``train/`` and ``validation/``. A special token's string in a
    document is encoded as text (``special_strings="drop"`` leaves such documents out); versioned, so caches
    built before special strings were kept as text (whose ids may differ) are never reused."""
    return ExecutorStep(
        name=f"tokenized/{name}",
        fn=tokenize_corpus,
        config=TokenizeConfig(
            train_paths=step_inputs(train),
            validation_paths=step_inputs(validation),
            tokenizer=step_input(tokenizer),
            output_path=this_output_path(),
            num_workers=num_workers,
            special_strings=versioned(special_strings),
        ),
        resources=CPU_DATA,
    )
