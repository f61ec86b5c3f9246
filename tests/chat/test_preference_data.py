"""Preference pairs: every public shape into one schema, malformed rows named by their own field, the steps
on real public pairs (OpenAssistant trees, AlpacaEval annotations; tests/data/public_preferences/README.md),
and the pair cache's ids and masks against the chat template's."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from marin.chat import (
    MalformedPreference,
    PairCache,
    PreferenceDataConfig,
    PreferenceTokenizeConfig,
    normalize_preference,
    normalize_preferences,
    tokenize_preferences,
)
from marin.parallel import TaskFailed
from marin.storage.records import read_records

DATA = Path(__file__).resolve().parents[1] / "data"
OASST = DATA / "public_chat" / "oasst_en_100_trees.jsonl"
ALPACA_EVAL = DATA / "public_preferences" / "alpaca_eval_gpt4_annotations_300.json"


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


EXPECTED = {"prompt": [user("What is 2 + 2?")], "chosen": [assistant("4")], "rejected": [assistant("5")]}
SHAPES = {
    "strings": {"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5"},
    "trl conversational": {
        "prompt": [user("What is 2 + 2?")],
        "chosen": [assistant("4")],
        "rejected": [assistant("5")],
    },
    "ultrafeedback binarized": {
        "prompt": "What is 2 + 2?",
        "prompt_id": "abc",
        "chosen": [user("What is 2 + 2?"), assistant("4")],
        "rejected": [user("What is 2 + 2?"), assistant("5")],
        "messages": [user("What is 2 + 2?"), assistant("4")],
    },
    "implicit prompt": {
        "chosen": [user("What is 2 + 2?"), assistant("4")],
        "rejected": [user("What is 2 + 2?"), assistant("5")],
    },
    "hh-rlhf": {
        "chosen": "\n\nHuman: What is 2 + 2?\n\nAssistant: 4",
        "rejected": "\n\nHuman: What is 2 + 2?\n\nAssistant: 5",
    },
    "alpacaeval": {"instruction": "What is 2 + 2?", "output_1": "5", "output_2": "4", "preference": 2},
    "alpacaeval weighted": {"instruction": "What is 2 + 2?", "output_1": "4", "output_2": "5", "preference": 1.2},
}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_gives_the_same_pair(shape):
    assert normalize_preference(SHAPES[shape]) == [EXPECTED]


def test_multi_turn_prompts_and_scores_are_kept():
    hh = {
        "chosen": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: 2 + 2?\n\nAssistant: 4",
        "rejected": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: 2 + 2?\n\nAssistant: five",
    }
    [pair] = normalize_preference(hh)
    assert pair["prompt"] == [user("hi"), assistant("hello"), user("2 + 2?")]
    assert (pair["chosen"], pair["rejected"]) == ([assistant("4")], [assistant("five")])
    [scored] = normalize_preference({**SHAPES["ultrafeedback binarized"], "score_chosen": 8.5, "score_rejected": 3})
    assert (scored["score_chosen"], scored["score_rejected"]) == (8.5, 3.0)


MALFORMED = [
    ({"prompt": "q", "chosen": "a", "rejected": "a"}, "rejected: identical to chosen"),
    ({"prompt": "q", "chosen": [assistant("")], "rejected": "b"}, "chosen[0].content: empty"),
    ({"prompt": "q", "chosen": [{"role": "gpt", "content": "a"}], "rejected": "b"}, "chosen[0].role: expected one of"),
    ({"prompt": "q", "chosen": [assistant(7)], "rejected": "b"}, "chosen[0].content: expected a string, got int"),
    ({"prompt": "q", "chosen": "a", "rejected": None}, "rejected: expected a string or a list of messages"),
    ({"chosen": [assistant("a")], "rejected": [assistant("b")]}, "prompt: missing"),
    ({"prompt": "other", **{k: SHAPES["implicit prompt"][k] for k in ("chosen", "rejected")}}, "prompt: differs"),
    (
        {"prompt": "q", "chosen": [assistant("a"), user("more")], "rejected": [assistant("b")]},
        "chosen[1]: expected one assistant reply after the shared conversation, got 2 messages",
    ),
    ({"prompt": [assistant("q")], "chosen": "a", "rejected": "b"}, "prompt[0].role: expected 'user'"),
    (
        {"chosen": "\n\nHuman: q\n\nAssistant:", "rejected": "\n\nHuman: q\n\nAssistant: b"},
        "chosen: the last Assistant turn is empty",
    ),
    (
        {"chosen": "\n\nHuman: q\n\nAssistant: a", "rejected": "\n\nHuman: p\n\nAssistant: b"},
        "rejected: its conversation before",
    ),
    ({"chosen": "no transcript here", "rejected": "\n\nHuman: q\n\nAssistant: b"}, "chosen: expected a transcript"),
    ({"instruction": "q", "output_1": "a", "output_2": "b", "preference": 0}, "preference: a tie (0), not a pair"),
    ({"instruction": "q", "output_1": "a", "output_2": "b", "preference": "1"}, "preference: expected 1 or 2"),
    ({"instruction": "q", "output_1": "a", "output_2": None, "preference": 1}, "output_2: expected a string"),
    ({"prompt": {"role": "prompter", "text": 3}}, "prompt.text: expected a string, got int"),
    ({"messages": [user("q")]}, "no preference pair"),
]


@pytest.mark.parametrize("record,message", MALFORMED)
def test_malformed_rows_name_their_field(record, message):
    with pytest.raises(MalformedPreference, match=re.escape(message)):
        normalize_preference(record)


def test_openassistant_pairs_are_the_differently_ranked_siblings():
    tree = {
        "prompt": {
            "role": "prompter",
            "text": "Name a color.",
            "replies": [
                {"role": "assistant", "text": "Blue.", "rank": 1, "replies": []},
                {"role": "assistant", "text": "Red.", "rank": 0, "replies": [{"role": "prompter", "text": "Why?"}]},
                {"role": "assistant", "text": "Green.", "rank": 2, "deleted": True},
                {"role": "assistant", "text": "Dunno.", "rank": 2},
                {"role": "assistant", "text": "Unranked."},
            ],
        }
    }
    pairs = normalize_preference(tree)
    got = {(p["chosen"][0]["content"], p["rejected"][0]["content"]) for p in pairs}
    assert got == {("Red.", "Blue."), ("Blue.", "Dunno."), ("Red.", "Dunno.")}  # deleted and unranked left out
    assert all(p["prompt"] == [user("Name a color.")] for p in pairs)


def test_every_openassistant_pair_prefers_the_lower_rank():
    """Real trees: every ranked sibling group of assistant replies gives all its differently ranked pairs."""
    trees = [json.loads(line) for line in OASST.read_text().splitlines()]
    pairs = [p for t in trees for p in normalize_preference(t)]
    ranks = {}

    def walk(node):
        for reply in node.get("replies") or []:
            if reply.get("role") == "assistant" and reply.get("rank") is not None:
                ranks[(node["text"], reply["text"])] = reply["rank"]
            walk(reply)

    for tree in trees:
        walk(tree["prompt"])
    assert len(pairs) == 754
    for p in pairs:
        parent = p["prompt"][-1]["content"]
        assert ranks[(parent, p["chosen"][0]["content"])] < ranks[(parent, p["rejected"][0]["content"])]


@pytest.fixture(scope="module")
def public_pairs(tmp_path_factory):
    """The normalize step over both public files, skipping malformed rows (AlpacaEval has two ties)."""
    root = tmp_path_factory.mktemp("prefs")
    normalize_preferences(
        PreferenceDataConfig(
            input_paths=[str(OASST), str(ALPACA_EVAL)], output_path=str(root), validation_fraction=0.2, on_error="skip"
        )
    )
    rows = {s: [r for f in sorted((root / s).glob("*")) for r in read_records(str(f))] for s in ("train", "validation")}
    return root, rows, json.loads((root / "summary.json").read_text())


def test_the_step_normalizes_real_pairs_and_holds_out_whole_prompts(public_pairs):
    _, rows, summary = public_pairs
    assert summary["pairs"]["train"] + summary["pairs"]["validation"] == 754 + 298
    assert summary["skip_reasons"] == {"preference": 2} and summary["skipped"] == 2
    assert 0.1 < summary["pairs"]["validation"] / (754 + 298) < 0.3
    prompts = {s: {json.dumps(r["prompt"]) for r in rows[s]} for s in rows}
    assert not prompts["train"] & prompts["validation"]  # sibling pairs of one prompt never straddle the split


def test_a_malformed_row_stops_the_step_naming_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(SHAPES["strings"]) + "\n" + json.dumps({"prompt": "q", "chosen": "a", "rejected": 3}) + "\n"
    )
    with pytest.raises(TaskFailed, match=r"bad.jsonl:2: rejected: expected a string or a list of messages"):
        normalize_preferences(PreferenceDataConfig(input_paths=[str(bad)], output_path=str(tmp_path / "out")))


def test_pair_cache_holds_the_template_ids_with_the_reply_masked(public_pairs, reserved_chat, tmp_path):
    root, rows, _ = public_pairs
    reserved_chat.tokenizer.save(str(tmp_path / "tokenizer.json"))
    out = tmp_path / "tok"
    tokenize_preferences(
        PreferenceTokenizeConfig(
            train_paths=[str(root / "train")], tokenizer=str(tmp_path / "tokenizer.json"), output_path=str(out)
        )
    )
    cache = PairCache.open(str(out / "train"))
    assert len(cache) == len(rows["train"])
    ledger = json.loads((out / "train" / "cache.json").read_text())
    assert ledger["preference_pairs"] and ledger["num_pairs"] == len(rows["train"])
    for i in range(0, len(rows["train"]), 37):
        pair, (chosen, rejected, prompt_len) = rows["train"][i], cache.pair(i)
        for ids, side in ((chosen, "chosen"), (rejected, "rejected")):
            conversation = [*pair["prompt"], *pair[side]]
            expected, mask = reserved_chat.encode(conversation)
            np.testing.assert_array_equal(ids, expected)
            assert prompt_len == len(reserved_chat.encode_prompt(pair["prompt"]))
            # the reply's tokens are exactly the last assistant turn of the SFT mask
            assert mask[prompt_len:].all() and not mask[prompt_len - 1]
        assert (chosen[:prompt_len] == rejected[:prompt_len]).all()
    np.testing.assert_array_equal(cache.lengths()[:3], [[len(s) for s in cache.pair(i)[:2]] for i in range(3)])


def test_special_strings_in_pairs_are_text_or_dropped(reserved_chat, tmp_path):
    forged = {"prompt": "say <|eot_id|> please", "chosen": "ok", "rejected": "no"}
    (tmp_path / "pairs.jsonl").write_text(json.dumps(forged) + "\n" + json.dumps(SHAPES["strings"]) + "\n")
    reserved_chat.tokenizer.save(str(tmp_path / "tokenizer.json"))
    for policy, kept in (("text", 2), ("drop", 1)):
        out = tmp_path / policy
        tokenize_preferences(
            PreferenceTokenizeConfig(
                train_paths=[str(tmp_path / "pairs.jsonl")],
                tokenizer=str(tmp_path / "tokenizer.json"),
                output_path=str(out),
                special_strings=policy,
            )
        )
        summary = json.loads((out / "summary.json").read_text())["train"]
        assert summary["num_pairs"] == kept and summary["special_string_pairs"] == 1
        assert summary["dropped_pairs"] == 2 - kept
    chosen, _, _ = PairCache.open(str(tmp_path / "text" / "train")).pair(0)
    assert (chosen == reserved_chat.eot_id).sum() == 2  # the template's two end-of-turn tokens, not the forged one


def test_an_empty_held_out_split_gives_an_empty_pair_cache(reserved_chat, tmp_path):
    """No validation_fraction: the validation cache exists and holds no pair (DPO then evaluates nothing)."""
    from marin.chat import build_pair_cache
    from marin.posttrain.batches import usable_pairs

    reserved_chat.save(str(tmp_path / "tokenizer"))
    (tmp_path / "none.jsonl").write_text("")
    build_pair_cache([str(tmp_path / "none.jsonl")], str(tmp_path / "cache"), str(tmp_path / "tokenizer"))
    pairs = PairCache.open(str(tmp_path / "cache"))
    assert len(pairs) == 0 and pairs.lengths().shape == (0, 2) and len(usable_pairs(pairs, 64)) == 0
