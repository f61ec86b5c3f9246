"""Answer parsing and rewards on real rows: GSM8K's reference solutions and OpenAI's published model solutions
(tests/data/gsm8k_slice), the quickstart's arithmetic, and the bad inputs an RL run must not score as zero."""

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from marin.environments import (
    BadPromptRecord,
    EnvironmentConfig,
    Gsm8kConfig,
    RewardError,
    final_answer,
    get_reward,
    marked_answer,
    parse_number,
    prepare_gsm8k,
    register_reward,
)
from marin.environments.answers import boxed, last_number
from marin.environments.prompt_sets import instruction_records
from marin.environments.rewards import REWARDS

SLICE = Path(__file__).resolve().parents[1] / "data" / "gsm8k_slice"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (SLICE / name).read_text().splitlines()]


def test_numeric_reward_agrees_with_openais_labels_on_400_published_model_solutions():
    """example_model_solutions.jsonl: four models' solutions to GSM8K test problems, each labelled is_correct
    by OpenAI. Their solutions end "A: 26" (no ####): the trailing-number rule reads them."""
    reward = get_reward("numeric")
    checked = wrong = 0
    for row in _rows("example_model_solutions_100.jsonl"):
        answer = final_answer(row["ground_truth"])
        for model in ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification"):
            solution = row[model]
            got = reward({"id": "x", "prompt": row["question"], "answer": answer}, solution["solution"])
            checked += 1
            wrong += got != float(solution["is_correct"])
    assert checked == 400 and wrong == 0
    correct = sum(r["175b_verification"]["is_correct"] for r in _rows("example_model_solutions_100.jsonl"))
    assert 0 < correct < 100  # both outcomes occur, so agreement is not vacuous


def test_every_gsm8k_reference_solution_earns_the_full_reward_and_another_rows_does_not():
    rows = _rows("train_200.jsonl") + _rows("test_100.jsonl")
    summary = prepare_gsm8k(Gsm8kConfig(input_paths=(str(SLICE / "train_200.jsonl"),), output_path="memory://g"))
    assert summary == {"source": "gsm8k", "skipped": 0, "records": 200}
    numeric = get_reward("numeric")
    for i, row in enumerate(rows):
        answer = row["answer"].rsplit("####", 1)[1].strip().replace(",", "")
        record = {"id": str(i), "prompt": row["question"], "answer": answer}
        assert numeric(record, row["answer"]) == 1.0, row
        assert get_reward("format")(record, row["answer"]) == 1.0
        other = rows[(i + 1) % len(rows)]["answer"]
        assert numeric(record, other) == float(parse_number(final_answer(other)) == parse_number(answer))


@pytest.mark.parametrize(
    "text,expected",
    [
        ("so 48 + 24 = <<48+24=72>>72 clips.\n#### 72", "72"),
        ("#### 1,000\nextra words 5", "1,000"),
        ("The answer is \\boxed{\\frac{3}{4}}.", "\\frac{3}{4}"),
        ("first \\boxed{1} then \\boxed{{2}+{3}}", "{2}+{3}"),
        ("3 + 4 = 7", "7"),
        ("She makes $1,200.50 a week.", "$1,200.50"),
        ("no numbers here", None),
        ("unclosed \\boxed{12", "12"),  # no closed box: the trailing number
    ],
)
def test_final_answer_conventions(text, expected):
    assert final_answer(text) == expected


def test_parse_number_is_exact():
    assert parse_number("$1,200.50") == Fraction(2401, 2)
    assert parse_number("\\frac{3}{4}") == parse_number("0.75") == parse_number("3/4")
    assert parse_number("18.") == parse_number("18.00") == 18
    assert parse_number("50%") == 50
    assert parse_number("seven") is None and parse_number(None) is None and parse_number("1/0") is None
    assert boxed("x") is None and marked_answer("7") is None and last_number("a -3 b") == "-3"


def test_exact_and_format_rewards_on_the_quickstart_arithmetic():
    record = instruction_records(0, "addition")[0]
    sums, total = record["answer"].split(" = ")
    a, b = sums.split(" + ")
    assert int(a) + int(b) == int(total) and a in record["prompt"] and b in record["prompt"]
    assert get_reward("exact")(record, f" {record['answer']} ") == 1.0
    assert get_reward("exact")(record, total) == 0.0
    assert get_reward("numeric")(record, total) == get_reward("numeric")(record, record["answer"]) == 1.0
    assert get_reward("numeric")(record, f"{a} + {b} = {int(total) + 1}") == 0.0
    assert get_reward("format")(record, record["answer"]) == 0.0  # no #### or \boxed{}


def test_arithmetic_prompts_are_never_phrased_as_the_held_out_instructions():
    from marin.corpus.instruct import InstructionsConfig, generate_instructions
    from marin.storage.records import read_records

    generate_instructions(InstructionsConfig(output_path="memory://instr"))
    held = {r["messages"][0]["content"]: r for r in read_records("memory://instr/validation/instructions.jsonl")}
    for kind, count in (("addition", 300), ("counting", 156)):
        records = instruction_records(0, kind)
        prompts = [r["prompt"] for r in records]
        assert len(prompts) == len(set(prompts)) == count and not set(held) & set(prompts)
        # the same facts and reply form as the held-out items of that kind: only the phrasing differs
        replies = {r["answer"] for r in records}
        assert {h["messages"][1]["content"] for h in held.values() if h["kind"] == kind} <= replies
    counting = instruction_records(0, "counting")[0]
    assert get_reward("exact")(counting, counting["answer"]) == 1.0 and counting["prompt"].startswith("Count")


def _prompt_file(tmp_path, rows) -> str:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_prompt_set_without_a_verifiable_answer_is_refused_naming_environment_record_and_field(tmp_path):
    rows = [{"id": "q0", "prompt": "2+2?", "answer": "4"}, {"id": "q1", "prompt": "3+3?", "solution": "6"}]
    with pytest.raises(BadPromptRecord, match=r"environment 'math', record 'q1' .*row 1.*no field 'answer'"):
        EnvironmentConfig(prompts=_prompt_file(tmp_path, rows)).build("math")
    # the format reward reads no field: the same set loads for it
    env = EnvironmentConfig(prompts=_prompt_file(tmp_path, rows), rewards=(("format", 1.0),)).build("math")
    assert len(env.records) == 2
    dup = [{"id": "q0", "prompt": "a", "answer": "1"}, {"id": "q0", "prompt": "b", "answer": "2"}]
    with pytest.raises(BadPromptRecord, match="field 'id' repeats"):
        EnvironmentConfig(prompts=_prompt_file(tmp_path, dup)).build("math")


def test_gsm8k_rows_without_a_marked_answer_are_named_or_counted(tmp_path):
    rows = _rows("test_100.jsonl")[:3]
    rows[1] = {"question": rows[1]["question"], "answer": "no marker here"}
    path = _prompt_file(tmp_path, rows)
    with pytest.raises(ValueError, match=r"row 1: field 'answer' has no '#### <number>' line"):
        prepare_gsm8k(Gsm8kConfig(input_paths=(path,), output_path=str(tmp_path / "out")))
    summary = prepare_gsm8k(Gsm8kConfig(input_paths=(path,), output_path=str(tmp_path / "out"), on_error="skip"))
    assert summary["records"] == 2 and summary["skipped"] == 1


def test_a_reward_that_raises_or_returns_nan_is_an_error_naming_environment_record_and_reward(tmp_path):
    @register_reward("test_nan_reward", fields=("answer",))
    def nan_reward(record, completion):
        return math.nan

    @register_reward("test_raising_reward", fields=("answer",))
    def raising_reward(record, completion):
        return int(record["answer"]) / 0

    try:
        rows = [{"id": "q7", "prompt": "2+2?", "answer": "4"}]
        for name, message in (("test_nan_reward", "returned nan"), ("test_raising_reward", "raised ZeroDivisionError")):
            env = EnvironmentConfig(prompts=_prompt_file(tmp_path, rows), rewards=((name, 1.0),)).build("toy")
            with pytest.raises(
                RewardError, match=rf"environment 'toy', record 'q7': reward '{name}' {message}.*answer='4'"
            ):
                env.score(env.records[0], "4")
    finally:
        REWARDS.pop("test_nan_reward"), REWARDS.pop("test_raising_reward")


def test_environment_config_validates_names_and_policies():
    with pytest.raises(KeyError, match="unknown reward 'nope'"):
        EnvironmentConfig(prompts="x", rewards=(("nope", 1.0),))
    with pytest.raises(ValueError, match="on_empty_completion"):
        EnvironmentConfig(prompts="x", on_empty_completion="zero")
    env_cfg = EnvironmentConfig(prompts="x", rewards=(("numeric", 1.0), ("format", 0.5)))
    assert env_cfg.required_fields == ("answer", "id", "prompt")
