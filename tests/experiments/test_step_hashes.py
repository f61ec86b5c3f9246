"""Every step of the lab's experiments keeps its output path: the step builders (``experiments.defaults``)
may be reorganised, but a step declared the same way must land where it always did, or a store's finished
outputs are silently recomputed under new names.

The quickstart's and Tootsie's steps are pinned one by one (a failure names the step that moved); the other
experiments by a digest of their sorted ``name-hash`` identities and their step count. The plan is made in a
fresh interpreter with the bundled texts selected (``MARIN_TEXT_SOURCE`` and ``MARIN_TEXT_MIRROR`` unset), as
``tootsie_8b`` builds its evaluation sets when imported. A change that moves a step on purpose updates the
table here, and says so in its commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

PREFIX = "gs://pinned-bucket/lab"
ROOT = Path(__file__).resolve().parents[2]

QUICKSTART = {
    "attributes/bundled-web-lang": "31ee35e4",
    "attributes/bundled-web-quality": "5f9176ad",
    "chat/bundled-instructions": "0cc3e015",
    "checkpoints/quickstart-nano": "f0b69e70",
    "checkpoints/quickstart-nano-dpo": "0d5e1bac",
    "checkpoints/quickstart-nano-instruct": "224f4ba8",
    "checkpoints/quickstart-nano-rl": "928de50b",
    "classifiers/bundled-lid": "a714c5dc",
    "classifiers/bundled-quality": "76b5355b",
    "corpus/bundled": "05372b94",
    "corpus/instruction-pairs": "b7c366f1",
    "corpus/instructions": "d84fd85b",
    "documents/bundled": "cede3b49",
    "documents/bundled-web": "49b58039",
    "environments/addition-practice": "381943f3",
    "environments/animal_sound-practice": "f4970cb9",
    "environments/counting-practice": "e65a8cba",
    "environments/opposite-practice": "76cb4a0f",
    "evaluation/instruct/quickstart-nano": "69151973",
    "evaluation/instruct/quickstart-nano-instruct": "d7516ac5",
    "evaluation/instruct/quickstart-nano-rl": "ecce5955",
    "evaluation/preference/quickstart-nano-dpo": "a7afc25c",
    "evaluation/preference/quickstart-nano-instruct": "8530333f",
    "evaluation/quickstart-nano": "b5ce98c2",
    "exports/quickstart-nano": "03095a66",
    "exports/quickstart-nano-instruct": "cdd201ab",
    "extracted/bundled-web": "e527ccff",
    "filtered/bundled-web": "5ccf4f5b",
    "preferences/bundled-instruction-pairs": "8cbbc857",
    "raw/bundled": "55caa28d",
    "reference/quickstart-nano-dpo": "ce7679e0",
    "tokenized/arithmetic": "d003a506",
    "tokenized/bundled-instruction-pairs-dpo": "54b697dc",
    "tokenized/bundled-instructions-sft": "809f001b",
    "tokenized/stories": "45c01bf3",
    "tokenizers/bundled-bpe2k": "ac5ee077",
}

TOOTSIE_8B = {
    "chat/bespoke_stratos_17k": "eb7a1714",
    "chat/openthoughts_114k_math": "47f0438f",
    "chat/smoltalk": "7b55f5b5",
    "chat/tulu_3_sft_mixture": "996cced0",
    "checkpoints/tootsie-8b-cooldown": "de66f0e2",
    "checkpoints/tootsie-8b-dpo": "60008539",
    "checkpoints/tootsie-8b-instruct": "49348f96",
    "checkpoints/tootsie-8b-phase1": "fa611d6f",
    "checkpoints/tootsie-8b-phase2": "217867d5",
    "checkpoints/tootsie-8b-rl": "33f5f3f6",
    "documents/dclm_baseline": "215b58e9",
    "documents/dolmino_flan": "ffd27336",
    "documents/dolmino_pes2o": "7d323466",
    "documents/dolmino_stackexchange": "a5cdc998",
    "documents/dolmino_wiki": "248f2ab8",
    "documents/finemath_3plus": "e0bc21ef",
    "documents/gutenberg": "1903a2f4",
    "documents/proofpile_2": "93d33cde",
    "documents/starcoderdata": "2167b623",
    "documents/tinyshakespeare": "0ff2540c",
    "environments/gsm8k-train": "ae5846a9",
    "evaluation/instruct/tootsie-8b-instruct": "24f16080",
    "evaluation/preference/tootsie-8b-dpo": "e457b719",
    "evaluation/preference/tootsie-8b-instruct": "7e78574d",
    "evaluation/tootsie-8b-cooldown": "b9a4e151",
    "evaluation/tootsie-8b-phase1": "90dc811b",
    "evaluation/tootsie-8b-phase2": "cd7fde8f",
    "exports/tootsie-8b-cooldown": "c14640cd",
    "exports/tootsie-8b-dpo": "0d3e5369",
    "exports/tootsie-8b-instruct": "fa632235",
    "exports/tootsie-8b-phase1": "509a2f7a",
    "exports/tootsie-8b-phase2": "aa7bde9a",
    "exports/tootsie-8b-rl": "3bb5dd7f",
    "preferences/ultrafeedback_binarized": "512536a1",
    "raw/bespoke_stratos_17k": "603cc8ec",
    "raw/dclm_baseline": "9795558a",
    "raw/dolmino_flan": "0dac22ca",
    "raw/dolmino_pes2o": "b2dffa4f",
    "raw/dolmino_stackexchange": "ac4db2e2",
    "raw/dolmino_wiki": "d13f3e4b",
    "raw/finemath_3plus": "52d5c29a",
    "raw/gsm8k-train": "2bbe28fc",
    "raw/gutenberg": "d434b529",
    "raw/openthoughts_114k_math": "082ec2cc",
    "raw/paloma": "1dccde96",
    "raw/proofpile_2": "78ed02f1",
    "raw/smoltalk": "cde5a641",
    "raw/starcoderdata": "c0a939a0",
    "raw/tinyshakespeare": "1bb44ee4",
    "raw/tulu_3_sft_mixture": "79aa928d",
    "raw/ultrafeedback_binarized-test": "bbb60d15",
    "raw/ultrafeedback_binarized-train": "8b886abf",
    "reference/tootsie-8b-dpo": "80be3c34",
    "tokenized/bespoke_stratos_17k-sft-llama3": "ff4c257a",
    "tokenized/dclm_baseline": "5506b8cd",
    "tokenized/dolmino_flan": "a81412b5",
    "tokenized/dolmino_pes2o": "a5da4b9f",
    "tokenized/dolmino_stackexchange": "9537830e",
    "tokenized/dolmino_wiki": "3f26f6dc",
    "tokenized/finemath_3plus": "ec19feb5",
    "tokenized/openthoughts_114k_math-sft-llama3": "90c5f5b5",
    "tokenized/paloma": "9288c519",
    "tokenized/proofpile_2": "f0a0d07d",
    "tokenized/smoltalk-sft-llama3": "b06ee76a",
    "tokenized/starcoderdata": "d469c2a6",
    "tokenized/tulu_3_sft_mixture-sft-llama3": "c60b301c",
    "tokenized/ultrafeedback_binarized-llama3": "7d46f2b8",
}

# experiment -> (number of steps, digest of its sorted identities): see ``digest``.
DIGESTS = {
    "exp11_mixture_shift": (17, "924828ed9b080a38"),
    "exp16_dclm_filtering": (9, "c22e59bac78b5302"),
    "exp27_nano_ladder": (45, "b710a5e62c2e5c96"),
    "exp43_books_ladder": (35, "d2cecfe889466323"),
    "exp43_books_ladder_deep": (39, "4c98eb18ede1d4c5"),
    "exp44_muon_ns_dtype": (8, "1e16f136266cee6e"),
    "exp47_quickstart_seeds": (54, "e8cbfdbe089dd192"),
    "exp_dense_vs_moe": (17, "d68b2bbb5d1335ef"),
    "exp_optimizers": (365, "3bc3820d280a3d08"),
    "hello_world": (2, "ca9696835cf03cb8"),
    "shakespeare_char": (7, "1eea9208b061e02c"),
    "tootsie_families": (13, "1562e37376dc9ae3"),
}


def experiment_steps() -> dict[str, list]:
    """The steps each experiment declares (its targets and everything they depend on)."""
    from experiments import (
        exp11_mixture_shift,
        exp16_dclm_filtering,
        exp27_nano_ladder,
        exp43_books_ladder,
        exp44_muon_ns_dtype,
        exp47_quickstart_seeds,
        exp_dense_vs_moe,
        exp_optimizers,
        hello_world,
        quickstart,
        shakespeare_char,
        tootsie_8b,
        tootsie_families,
    )

    return {
        "quickstart": quickstart.STEPS,
        "tootsie_8b": [tootsie_8b.evals, tootsie_8b.exports, tootsie_8b.instruct, tootsie_8b.preference, tootsie_8b.rl],
        "exp11_mixture_shift": [exp11_mixture_shift.shifted_eval, exp11_mixture_shift.constant_eval],
        "exp16_dclm_filtering": [exp16_dclm_filtering.documents],
        "exp27_nano_ladder": exp27_nano_ladder.build().steps,
        "exp43_books_ladder": exp43_books_ladder.build(bundled=True).steps,
        "exp43_books_ladder_deep": exp43_books_ladder.build(bundled=True, family="deep").steps,
        "exp44_muon_ns_dtype": exp44_muon_ns_dtype.build(bundled=True),
        "exp47_quickstart_seeds": exp47_quickstart_seeds.build(),
        "exp_dense_vs_moe": [exp_dense_vs_moe.build(bundled=True)["comparison"]],
        "exp_optimizers": [exp_optimizers.build(bundled=True)["analysis"]],
        "hello_world": [hello_world.stats],
        "shakespeare_char": shakespeare_char.build(),
        "tootsie_families": tootsie_families.runs,
    }


def _flatten(value) -> list:
    from marin.execution import ExecutorStep

    if isinstance(value, ExecutorStep):
        return [value]
    values = value.values() if isinstance(value, dict) else value
    return [step for v in values for step in _flatten(v)]


def planned_paths() -> dict[str, dict[str, str]]:
    """experiment -> {step name: output path} under ``PREFIX``, every step planned once per experiment."""
    from marin.execution import Executor

    return {
        experiment: {p.name: p.output_path for p in Executor(prefix=PREFIX).plan(_flatten(steps)).steps}
        for experiment, steps in experiment_steps().items()
    }


def digest(paths: dict[str, str]) -> tuple[int, str]:
    identities = sorted(path.removeprefix(PREFIX + "/") for path in paths.values())
    return len(identities), hashlib.sha256("\n".join(identities).encode()).hexdigest()[:16]


def _plan_in_fresh_interpreter() -> dict[str, dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_TEXT_SOURCE", "MARIN_TEXT_MIRROR")}
    done = subprocess.run([sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_experiment_step_keeps_its_output_path():
    planned = _plan_in_fresh_interpreter()
    for experiment, pinned in (("quickstart", QUICKSTART), ("tootsie_8b", TOOTSIE_8B)):
        paths = planned[experiment]
        assert set(paths) == set(pinned), f"{experiment}: steps added or removed"
        moved = {name: path for name, path in paths.items() if path != f"{PREFIX}/{name}-{pinned[name]}"}
        assert not moved, f"{experiment}: these steps moved (pinned: { ({n: pinned[n] for n in moved}) }): {moved}"
    got = {experiment: digest(planned[experiment]) for experiment in DIGESTS}
    assert got == DIGESTS, "steps moved in: " + ", ".join(e for e in DIGESTS if got[e] != DIGESTS[e])
    # the digest is over identities, which are the paths less the prefix
    assert all(path.startswith(PREFIX + "/") for paths in planned.values() for path in paths.values())


if __name__ == "__main__":
    print(json.dumps(planned_paths()))
