"""The chat template: exact text, assistant-only masks, and the same ids as transformers' apply_chat_template."""

import numpy as np
import pytest

from marin.chat import ChatTokenizer, with_chat_tokens
from tests.chat.conftest import CONVERSATIONS, train_bpe


def masked_runs(chat: ChatTokenizer, ids, mask) -> list[str]:
    """The decoded text of each maximal run of masked tokens."""
    runs, current = [], []
    for token, m in zip(ids.tolist(), mask.tolist()):
        if m:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return [chat.tokenizer.decode(run, skip_special_tokens=False) for run in runs]


def test_rendered_text_is_llama3_turn_format(reserved_chat):
    text, spans = reserved_chat.render(CONVERSATIONS[1][:3])
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant. "
        "Answer briefly.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho had a red ball?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nTom had a red ball.<|eot_id|>"
    )
    assert [text[a:b] for a, b in spans] == ["Tom had a red ball.<|eot_id|>"]
    prompt, _ = reserved_chat.render(CONVERSATIONS[1][:2], add_generation_prompt=True)
    assert prompt.endswith("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


@pytest.mark.parametrize("which", ["reserved_chat", "added_chat"])
def test_mask_covers_exactly_the_assistant_turns(request, which):
    chat = request.getfixturevalue(which)
    for conversation in CONVERSATIONS:
        ids, mask = chat.encode(conversation)
        assert ids.dtype == np.int32 and mask.dtype == bool and ids.shape == mask.shape
        expected = [m["content"].strip() + "<|eot_id|>" for m in conversation if m["role"] == "assistant"]
        assert masked_runs(chat, ids, mask) == expected
        # every end-of-turn token of an assistant turn is trained, no other special token is
        eot_positions = np.flatnonzero(ids == chat.eot_id)
        assert mask[eot_positions].tolist() == [m["role"] == "assistant" for m in conversation]
        assert not mask[0] and ids[0] == chat.bos_id


def test_hand_checked_mask(reserved_chat):
    chat = reserved_chat
    ids, mask = chat.encode(CONVERSATIONS[0])
    pieces = [chat.tokenizer.decode([t], skip_special_tokens=False) for t in ids.tolist()]
    trained = "".join(p for p, m in zip(pieces, mask) if m)
    untrained = "".join(p for p, m in zip(pieces, mask) if not m)
    assert trained == "19<|eot_id|>"
    assert untrained == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 12 plus 7?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert mask.tolist() == [False] * (len(ids) - int(mask.sum())) + [True] * int(mask.sum())


def test_with_chat_tokens_keeps_existing_ids_and_appends_missing():
    base = train_bpe(("<|endoftext|>", "<|pad|>"))
    extended = with_chat_tokens(base)
    assert extended.get_vocab_size() == base.get_vocab_size() + 4
    assert extended.token_to_id("<|eot_id|>") == base.get_vocab_size() + 3
    assert with_chat_tokens(extended).to_str() == extended.to_str()  # idempotent
    with pytest.raises(ValueError, match="no '<\\|begin_of_text\\|>' token"):
        ChatTokenizer(base)


def test_save_and_load_round_trip(tmp_path, added_chat):
    added_chat.save(str(tmp_path / "tok"), model_max_length=256)
    loaded = ChatTokenizer.load(str(tmp_path / "tok"))
    for conversation in CONVERSATIONS:
        for a, b in zip(loaded.encode(conversation), added_chat.encode(conversation)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("which", ["reserved_chat", "added_chat"])
def test_ids_and_mask_equal_transformers_apply_chat_template(tmp_path, request, which):
    transformers = pytest.importorskip("transformers", reason="needs transformers (the export-test extra)")
    chat = request.getfixturevalue(which)
    chat.save(str(tmp_path / "tok"))
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    for conversation in CONVERSATIONS:
        ids, mask = chat.encode(conversation)
        out = hf.apply_chat_template(conversation, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        assert list(out["input_ids"]) == ids.tolist()
        assert [bool(m) for m in out["assistant_masks"]] == mask.tolist()
        text = hf.apply_chat_template(conversation, tokenize=False)
        assert text == chat.render(conversation)[0]
        prompt = hf.apply_chat_template(conversation[:-1], tokenize=False, add_generation_prompt=True)
        assert prompt == chat.render(conversation[:-1], add_generation_prompt=True)[0]


@pytest.mark.parametrize("which", ["reserved_chat", "added_chat"])
def test_generation_prompt_is_the_prefix_training_saw(request, which):
    chat = request.getfixturevalue(which)
    for conversation in CONVERSATIONS:
        for j, message in enumerate(conversation):
            if message["role"] != "assistant":
                continue
            prompt = chat.encode_prompt(conversation[:j])
            ids, mask = chat.encode(conversation[: j + 1])
            assert ids[: len(prompt)].tolist() == prompt.tolist()
            assert mask[len(prompt)] and not mask[len(prompt) - 1]  # the reply starts right after the prompt


PARAGRAPHS = ["A heading about the dog\n\nThe dog ran in the park\n\n"] * 100


def chat_with(pre_tokenizer: str, reserve: bool) -> ChatTokenizer:
    """A chat tokenizer trained on text with blank lines (so "\\n\\n" is a merge, as in any real corpus)."""
    from marin.chat import CHAT_SPECIAL_TOKENS
    from marin.tokenize import TrainTokenizerConfig, build_bpe_tokenizer
    from tests.chat.conftest import TEXTS

    specials = ("<|endoftext|>", "<|pad|>", *(CHAT_SPECIAL_TOKENS if reserve else ()))
    config = TrainTokenizerConfig(
        input_paths=["-"], output_path="-", vocab_size=600, special_tokens=specials, pre_tokenizer=pre_tokenizer
    )
    tokenizer = build_bpe_tokenizer(iter(TEXTS + PARAGRAPHS), config)
    assert tokenizer.token_to_id("ĊĊ") is not None
    return ChatTokenizer(tokenizer if reserve else with_chat_tokens(tokenizer))


def prompt_parity(chat: ChatTokenizer, directory) -> list[bool]:
    """For every prefix of every conversation (ending in each role): does ``encode_prompt`` equal
    ``transformers``' ``apply_chat_template(add_generation_prompt=True)`` of the saved tokenizer?"""
    transformers = pytest.importorskip("transformers", reason="needs transformers (the export-test extra)")
    chat.save(str(directory))
    hf = transformers.AutoTokenizer.from_pretrained(str(directory))
    same = []
    for conversation in CONVERSATIONS:
        for j in range(1, len(conversation) + 1):
            prefix = conversation[:j]
            theirs = hf.apply_chat_template(prefix, add_generation_prompt=True, tokenize=True, return_dict=True)
            same.append(list(theirs["input_ids"]) == chat.encode_prompt(prefix).tolist())
    return same


@pytest.mark.parametrize("reserve", [True, False], ids=["reserved", "added"])
def test_prompt_equals_transformers_generation_prompt_with_the_labs_pre_tokenizer(tmp_path, reserve):
    roles = {m["role"] for c in CONVERSATIONS for m in c}
    assert roles == {"system", "user", "assistant"}  # prefixes end in every role
    assert all(prompt_parity(chat_with("llama3", reserve), tmp_path))


def test_gpt2_split_cannot_have_both_so_the_prompt_stays_the_training_prefix(tmp_path):
    """GPT-2's split reads the header's trailing "\\n\\n" as one piece when nothing follows, "\\n" + "\\n..."
    when the reply follows: transformers' prompt then differs from every training prefix, and the lab keeps
    the training prefix (docs/chat.md)."""
    chat = chat_with("gpt2", reserve=True)
    assert not any(prompt_parity(chat, tmp_path))
    for conversation in CONVERSATIONS:
        prompt = chat.encode_prompt(conversation[:-1])
        assert chat.encode(conversation)[0][: len(prompt)].tolist() == prompt.tolist()
