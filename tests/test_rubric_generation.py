"""`rubricrl rubrics generate`: category weights, validation with retries fed back, error reports,
the consistency filter, resume, and output rows that the scorer and the trainer read."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rubricrl.cli import app
from rubricrl.llm.endpoint import ChatResult
from rubricrl.rubrics.loading import rubric_from_row
from rubricrl.rubrics.rows import InvalidRow, ScoringRow, read_rows
from rubricrl.authoring.generate import (
    CATEGORY_WEIGHTS,
    GenerationProblem,
    consistency,
    criteria_from_answer,
    default_judge_spec,
    generate_file,
    generate_rubric,
    parse_generation_row,
)
from rubricrl.core.verdicts import Status, Verdict

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "generate"


def answer(*items: tuple[str, str]) -> str:
    """A generator answer: items as (description, category)."""
    return json.dumps({"items": [{"title": d[:20], "description": d, "category": c} for d, c in items]})


GOOD = answer(("The reply names the feeling.", "Essential"), ("The reply asks an open question.", "Important"),
              ("The reply stays short.", "Optional"), ("The reply blames the person.", "Pitfall"))


class FakeChat:
    """A scripted chat model: each call pops the next answer and records the messages it was sent."""

    name = "fake"

    def __init__(self, answers: list[str | ChatResult]):
        self.answers, self.calls = list(answers), []

    async def chat(self, messages, *, max_tokens=256, temperature=0.0, seed=None, json_schema=None) -> ChatResult:
        self.calls.append({"messages": messages, "temperature": temperature, "schema": json_schema})
        item = self.answers.pop(0) if self.answers else "{}"
        return item if isinstance(item, ChatResult) else ChatResult(text=item, finish_reason="stop")


class StubJudge:
    """Met/unmet by keyword: a criterion is met when the response contains the criterion's keyword."""

    judge_id = "stub"

    def __init__(self, keywords: dict[str, str]):
        self.keywords, self.requests = keywords, []

    async def judge(self, requests):
        self.requests += list(requests)
        return [[Verdict(criterion_id=c.id, judge_id="stub",
                         status=Status.MET if self.keywords.get(c.text, "\0") in r.response else Status.UNMET)
                 for c in r.criteria] for r in requests]


def row(**fields):
    parsed = parse_generation_row({"id": "r1", "prompt": "I lost my job.", **fields}, "data.jsonl", 1)
    assert not isinstance(parsed, InvalidRow), parsed
    return parsed


def test_category_weights_kind_and_tags():
    criteria = criteria_from_answer(GOOD, pair=False)
    assert [c["weight"] for c in criteria] == [5.0, 3.0, 1.0, -2.0]
    assert CATEGORY_WEIGHTS == {"Essential": 5.0, "Important": 3.0, "Optional": 1.0, "Pitfall": -2.0}
    assert [c["tags"] for c in criteria] == [["category:essential"], ["category:important"], ["category:optional"],
                                             ["category:pitfall"]]
    assert {c["kind"] for c in criteria} == {"principle"}  # prompt mode never makes hard rules
    assert criteria[0]["id"] == "the-reply-names-the"  # slug of the title ("The reply names the ")
    pair = json.dumps({"items": [{"title": "French", "description": "The reply is written in French.",
                                  "category": "essential", "kind": "hard_rule"}]})
    [c] = criteria_from_answer(pair, pair=True)
    assert (c["kind"], c["weight"]) == ("hard_rule", 5.0)  # category case-insensitive


def test_answers_in_fences_or_bare_lists_are_read():
    fenced = "Sure! Here it is:\n```json\n" + GOOD + "\n```"
    assert len(criteria_from_answer(fenced, pair=False)) == 4
    bare = json.dumps([{"title": "t", "description": "The reply is kind.", "category": "Essential"}])
    assert len(criteria_from_answer(bare, pair=False)) == 1


@pytest.mark.parametrize("text, expected", [
    ("not json at all", "the answer is not JSON"),
    ('{"items": []}', "no items"),
    (answer(("The reply is kind.", "Crucial")), "items[0].category: 'Crucial' is not one of"),
    (answer(("The reply is kind.", "Essential"), ("the reply  is KIND.", "Optional")), "items[1].description: repeats"),
    (json.dumps({"items": [{"title": "x", "category": "Essential"}]}), "items[0].description: missing or blank"),
])
def test_malformed_answers_name_the_problem(text, expected):
    with pytest.raises(GenerationProblem) as exc:
        criteria_from_answer(text, pair=False)
    assert expected in str(exc.value)


def test_retry_feeds_the_problem_back_then_succeeds():
    only_pitfalls = answer(("The reply blames the person.", "Pitfall"), ("The reply lectures.", "Pitfall"))
    model = FakeChat(["{not json", only_pitfalls, GOOD])
    got = asyncio.run(generate_rubric(model, row(), source="data.jsonl", retries=2))
    assert got.rubric is not None and got.attempts == 3
    assert len(got.rubric.criteria) == 4
    second, third = model.calls[1]["messages"], model.calls[2]["messages"]
    assert second[-2] == {"role": "assistant", "content": "{not json"}
    assert "the answer is not JSON" in second[-1]["content"]
    # the rubric-level validation (the same as for hand-written rubrics) is fed back in the generator's terms
    assert "items: the rubric has no criterion with a positive weight" in third[-1]["content"]
    assert [c["temperature"] for c in model.calls] == [0.0, 0.7, 0.7]
    assert model.calls[0]["schema"]["properties"]["items"]["minItems"] == 5


def test_retries_exhausted_reports_every_attempt():
    model = FakeChat(["nope", ChatResult(error="timeout: no answer in 60s"), '{"items": []}'])
    got = asyncio.run(generate_rubric(model, row(), source="data.jsonl", retries=2))
    assert got.rubric is None and got.attempts == 3
    assert got.problems == ["attempt 1: the answer is not JSON",
                            "attempt 2: generator call failed: timeout: no answer in 60s",
                            'attempt 3: no items: return {"items": [...]} with 5 to 10 items']
    assert model.calls[2]["messages"] == model.calls[0]["messages"]  # nothing to feed back after a failed call


def test_cut_off_answer_says_so():
    model = FakeChat([ChatResult(text='{"items": [{"title": "a"', finish_reason="length")])
    got = asyncio.run(generate_rubric(model, row(), source="data.jsonl", retries=0, max_tokens=32))
    assert "cut off at 32 tokens" in got.problems[0]


def test_pair_prompt_shows_both_answers_and_asks_for_kinds():
    pair = row(chosen="That sounds hard.", rejected="Calm down.")
    model = FakeChat([GOOD])
    asyncio.run(generate_rubric(model, pair, source="data.jsonl"))
    text = model.calls[0]["messages"][-1]["content"]
    assert "That sounds hard." in text and "Calm down." in text and '"hard_rule"' in text
    assert "kind" in model.calls[0]["schema"]["properties"]["items"]["items"]["properties"]


def test_consistency_arithmetic():
    criteria = criteria_from_answer(GOOD, pair=False)
    from rubricrl.rubrics.loading import rubric_from_data

    rubric = rubric_from_data({"criteria": criteria}, "x", 1)
    judge = StubJudge({"The reply names the feeling.": "sad", "The reply asks an open question.": "?",
                       "The reply stays short.": "short", "The reply blames the person.": "fault"})
    # chosen meets names(5) + asks(3) = 8 / 9; rejected meets stays-short(1) and the pitfall(-2) = -1 / 9
    pair = row(chosen="You sound sad. What happened?", rejected="short answer: your fault")
    check = asyncio.run(consistency(judge, rubric, pair, margin=0.0))
    assert check["chosen"] == round(8 / 9, 4) and check["rejected"] == round(-1 / 9, 4) and check["kept"]
    assert not asyncio.run(consistency(judge, rubric, pair, margin=1.0))["kept"]  # 1.0 is not > 1.0
    same = row(chosen="short", rejected="short")
    assert not asyncio.run(consistency(judge, rubric, same, margin=0.0))["kept"]  # a tie is dropped


def write_rows(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_generate_file_writes_rubrics_reports_failures_and_resumes(tmp_path):
    data = write_rows(tmp_path / "in.jsonl", [
        {"id": "p1", "prompt": "I lost my job.", "response": "I'm sorry. What happened?", "split": "train"},
        {"id": "p2", "messages": [{"role": "user", "content": "I feel alone."}]},
        {"id": "bad", "prompt": 5},
        "{broken json",
        {"id": "pair-keep", "prompt": "I failed.", "chosen": "You sound sad. What happened?", "rejected": "your fault"},
        {"id": "pair-drop", "prompt": "I failed.", "chosen": "your fault", "rejected": "You sound sad. What now?"},
    ])
    out = tmp_path / "rubrics.jsonl"
    model = FakeChat([GOOD, "garbage", "garbage", "garbage", GOOD, GOOD])  # p2 fails all 3 attempts
    judge = StubJudge({"The reply names the feeling.": "sad", "The reply asks an open question.": "?",
                       "The reply blames the person.": "fault"})
    summary = generate_file(data, out, model, lambda: judge, retries=2, concurrency=1)
    assert (summary.rows, summary.written, summary.errors, summary.invalid, summary.kept, summary.dropped) == \
        (6, 2, 1, 2, 1, 1)
    written = {r["id"]: r for r in read_jsonl(out)}
    assert set(written) == {"p1", "pair-keep"}
    assert written["p1"]["source"] == "prompt" and written["p1"]["attempts"] == 1 and written["p1"]["split"] == "train"
    assert written["p1"]["generator"] == "fake" and "consistency" not in written["p1"]
    assert written["pair-keep"]["consistency"]["kept"] is True and written["pair-keep"]["source"] == "pair"
    report = {r["id"]: r for r in read_jsonl(summary.errors_path)}
    assert summary.errors_path.name == "rubrics.errors.jsonl"
    assert report["p2"]["status"] == "error" and len(report["p2"]["problems"]) == 3
    assert "in.jsonl:2: row 'p2': no valid rubric after 3 attempt(s)" in report["p2"]["reason"]
    assert report["bad"]["status"] == "invalid" and "in.jsonl:3: prompt:" in report["bad"]["reason"]
    assert report["line-4"]["status"] == "invalid" and "malformed JSON" in report["line-4"]["reason"]
    assert report["pair-drop"]["status"] == "dropped" and report["pair-drop"]["rubric"]
    assert "is not above the margin 0" in report["pair-drop"]["reason"]
    assert set(written) | set(report) == {"p1", "p2", "bad", "line-4", "pair-keep", "pair-drop"}  # no row lost

    # resume: rows in --out are skipped; the others are retried and the report is rewritten
    again = FakeChat([GOOD] * 3)
    summary2 = generate_file(data, out, again, lambda: judge, retries=0)
    assert summary2.skipped_existing == 2 and summary2.written == 1 and summary2.dropped == 1
    assert len(again.calls) == 2  # p2 and pair-drop only
    assert [r["id"] for r in read_jsonl(out)] == ["p1", "pair-keep", "p2"]
    assert {r["id"] for r in read_jsonl(summary2.errors_path)} == {"bad", "line-4", "pair-drop"}


def test_prompt_only_data_never_builds_a_judge(tmp_path):
    data = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "hi"}])

    def no_judge():
        raise AssertionError("judge built for prompt-only data")

    assert generate_file(data, tmp_path / "o.jsonl", FakeChat([GOOD]), no_judge).written == 1


def test_output_rows_load_like_hand_written_ones(tmp_path):
    data = write_rows(tmp_path / "in.jsonl", [
        {"id": "p1", "prompt": "I lost my job.", "response": "I'm sorry. What happened?"},
        {"id": "p2", "messages": [{"role": "user", "content": "I feel alone."}]},
    ])
    out = tmp_path / "rubrics.jsonl"
    generate_file(data, out, FakeChat([GOOD, GOOD]), lambda: None)
    rows = list(read_rows(out))  # what `rubricrl score` reads
    scored = next(r for r in rows if r.id == "p1")
    assert isinstance(scored, ScoringRow) and scored.rubric is not None
    assert [c.weight for c in scored.rubric.criteria] == [5.0, 3.0, 1.0, -2.0]
    # a row without a response still carries a valid rubric (for `rubricrl train`, or once responses are added)
    p2 = read_jsonl(out)[1]
    assert p2["prompt"] == [{"role": "user", "content": "I feel alone."}]
    assert len(rubric_from_row(p2, str(out), 2).criteria) == 4
    from rubricrl.train.data import load_prompt_data

    prompts = load_prompt_data(str(out), None, None)
    assert len(prompts.train) + len(prompts.heldout) == 2 and len(prompts.rubrics) == 1


def test_input_row_problems_name_field_and_fix():
    bad = parse_generation_row({"id": "x", "prompt": "hi", "chosen": "a"}, "d.jsonl", 7)
    assert isinstance(bad, InvalidRow) and str(bad.problem).startswith("d.jsonl:7: rejected: missing")
    bad = parse_generation_row({"id": "x", "prompt": "hi", "chosen": 3, "rejected": "b"}, "d.jsonl", 8)
    assert "chosen: must be a string" in str(bad.problem)
    assert str(parse_generation_row({"messages": []}, "d.jsonl", 3).problem) == \
        "d.jsonl:3: messages: is empty (fix: give the prompt some text)"
    ok = parse_generation_row({"prompt_id": 4, "question": "hi", "chosen": [{"role": "user", "content": "q"},
                              {"role": "assistant", "content": "a"}], "rejected": "b"}, "d.jsonl", 9)
    assert ok.id == "4" and ok.chosen == "a" and ok.is_pair


def test_default_judge_is_the_generators_model():
    class Server:
        url = "http://127.0.0.1:1234/v1"

    class Model:
        server = Server()

    assert default_judge_spec("llamacpp", Model()) == "openai:http://127.0.0.1:1234/v1?mode=logprob"
    assert default_judge_spec("openai:http://h:8000/v1?model=Q", Model()) == "openai:http://h:8000/v1?model=Q"
    assert default_judge_spec("local:Qwen/Qwen2.5-0.5B-Instruct", Model()) == "local:Qwen/Qwen2.5-0.5B-Instruct"


def test_cli_reports_missing_data(tmp_path):
    result = runner.invoke(app, ["rubrics", "generate", "--data", str(tmp_path / "nope.jsonl"),
                                 "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2 and "file not found" in result.output


def examples_copy(tmp_path: Path) -> Path:
    data = tmp_path / "rows.jsonl"  # 2 prompts + 1 pair from the examples keep the slow runs short
    lines = (EXAMPLES / "prompts.jsonl").read_text().splitlines()[:2] + \
        (EXAMPLES / "pairs.jsonl").read_text().splitlines()[:1]
    data.write_text("\n".join(lines) + "\n")
    return data


@pytest.mark.slow
@pytest.mark.parametrize("generator, max_tokens", [("llamacpp?timeout=600", "400"), ("local", "48")])
def test_cli_generate_end_to_end_on_the_embedded_model(tmp_path, generator, max_tokens):
    data = examples_copy(tmp_path)
    out = tmp_path / "rubrics.jsonl"
    args = ["rubrics", "generate", "--data", str(data), "--out", str(out), "--generator", generator,
            "--retries", "1", "--max-tokens", max_tokens]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    written = read_jsonl(out)  # created even when no rubric is written
    report = read_jsonl(tmp_path / "rubrics.errors.jsonl")
    ids = [r["id"] for r in written] + [r["id"] for r in report]
    assert sorted(ids) == ["exam-1", "move-1", "pair-job"]  # every row is in exactly one of the two files
    assert all(r["reason"] for r in report)
    for record in written:
        assert rubric_from_row(record, str(out), 1) is not None
    assert "rubrics written" in result.output
    # resume: rows already in --out are skipped
    again = runner.invoke(app, args[:-4] + ["--retries", "0", "--max-tokens", "16"], env={"COLUMNS": "200"})
    assert again.exit_code == 0 and f"{len(written)} already in" in again.output
    ids = [r["id"] for r in read_jsonl(out)] + [r["id"] for r in read_jsonl(tmp_path / "rubrics.errors.jsonl")]
    assert sorted(ids) == ["exam-1", "move-1", "pair-job"]


@pytest.mark.slow
def test_consistency_with_the_default_judge_on_the_generators_llamacpp_server():
    from rubricrl.llm.chat import make_chat_model
    from rubricrl.judges import make_judge
    from rubricrl.rubrics.loading import rubric_from_data

    model = make_chat_model("llamacpp")
    spec = default_judge_spec("llamacpp", model)
    assert spec.startswith(f"openai:{model.server.url}")  # no second server
    judge = make_judge(spec, cache=False)
    rubric = rubric_from_data({"criteria": criteria_from_answer(GOOD, pair=False)}, "x", 1)
    pair = row(chosen="That sounds so hard. How are you feeling?", rejected="Whatever, it's your fault.")
    check = asyncio.run(consistency(judge, rubric, pair, margin=0.0))
    assert isinstance(check["kept"], bool) and check["judge_errors"] == 0
    assert 0 <= check["chosen"] <= 1 and -1 <= check["rejected"] <= 1  # P(yes) verdicts: decided, not errors
