"""Local lm-eval tasks for the parity tests: multiple-choice contexts that end in a newline, choices of
different lengths, documents several windows long, greedy generation with stop strings."""

import json
import random

ANIMALS = ["cow", "crow", "dog", "cat", "hen", "pig", "owl", "fox", "duck", "bee", "sheep", "horse"]
SOUNDS = ["moo", "caw", "woof woof", "meow", "cluck", "oink oink oink", "hoot", "yip", "quack", "buzz"]

CHOICE_TASK = """task: parity_choice
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: choices
doc_to_target: gold
target_delimiter: ""
metric_list:
  - metric: acc
  - metric: acc_norm
"""

ROLLING_TASK = """task: parity_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
"""

GENERATE_TASK = """task: parity_generate
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["."]
  do_sample: false
  max_gen_toks: 24
metric_list:
  - metric: exact_match
"""


def write_tasks(directory, rolling_words=(5, 60, 250, 420), extra_rolling=()) -> None:
    """Three task YAMLs and their JSONL data in ``directory`` (a pathlib.Path); the rolling task's documents
    have ``rolling_words`` words each, then the texts ``extra_rolling``."""
    rng = random.Random(0)
    choice = []
    for i, animal in enumerate(ANIMALS):
        choices = rng.sample(SOUNDS, 4)
        context = f"Question: what does the {animal} say?\nAnswer:\n" if i % 2 else f"The {animal} said:\n"
        choice.append({"context": context, "choices": choices, "gold": i % 4})
    words = "once upon a time there was a little dog the cow said moo and the crow said caw then they slept".split()
    rolling = [{"text": " ".join(rng.choice(words) for _ in range(n)).capitalize() + "."} for n in rolling_words]
    rolling += [{"text": text} for text in extra_rolling]
    generate = [{"context": f"The {a} said", "answer": ""} for a in ANIMALS[:8]]
    for name, rows, template in (
        ("choice", choice, CHOICE_TASK),
        ("rolling", rolling, ROLLING_TASK),
        ("generate", generate, GENERATE_TASK),
    ):
        data = directory / f"{name}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        (directory / f"parity_{name}.yaml").write_text(template.format(data=data))


def documents_followed_by_eos(export_dir: str, count: int = 3, candidates: int = 256) -> list[str]:
    """Short documents after which the exported model's greedy next token is end-of-text: served with echo
    and one generated token (what local-completions sends), generation stops there, and the generated entry
    must still come back (lm-eval drops the last entry as the generated one)."""
    import jax
    import numpy as np
    from tokenizers import Tokenizer

    from marin.inference import load_model
    from marin.trainer.model.llama import forward

    cfg, params, _ = load_model(export_dir)
    tokenizer = Tokenizer.from_file(f"{export_dir}/tokenizer.json")
    eos = tokenizer.encode("x").ids[0]  # the export puts its document-start (= end-of-text) token first
    rng = random.Random(1)
    words = "once upon a time there was a little dog the cow said moo and the crow said caw".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 12))).capitalize() for _ in range(candidates)]
    rows = [[eos, *tokenizer.encode(text).ids] for text in texts]  # lm-eval's rolling prefix, then the document
    batch = np.zeros((len(rows), max(map(len, rows))), np.int32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    greedy = np.asarray(jax.jit(forward, static_argnums=0)(cfg, params, batch)).argmax(-1)
    found = [text for text, row, g in zip(texts, rows, greedy) if g[len(row) - 1] == eos]
    assert len(found) >= count, f"only {len(found)} of {candidates} candidate documents end where EOS is greedy"
    return found[:count]
