"""`rubricrl score` and `rubricrl rubrics lint` end to end: outputs, resume, bad input, cache."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rubric_texts import RULES_RUBRIC

from rubricrl.cli import app

runner = CliRunner()



def write_rows(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def read_out(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def rubric_file(tmp_path):
    path = tmp_path / "rubric.yaml"
    path.write_text(RULES_RUBRIC)
    return path


ROWS = [
    {"id": "a", "prompt": "I lost my job.", "response": "I'm so sorry. That is a shock."},
    {"id": "b", "prompt": "I lost my job.", "response": "You should calm down and apply for new jobs tomorrow morning."},
    {"id": "c", "prompt": "I lost my job.", "response": "Sorry to hear it. You should rest first, then see."},
    {"id": "d", "prompt": "I lost my job.", "response": "Okay."},
]
# a: sorry(2) + short(1) + no-calm-down(1) = 4 / 4 = 1.0
# b: raw = (0 + 0 + 0 - 1) / 4 = -0.25; the hard rule failed -> min(raw, gate 0.0) = -0.25
# c: sorry(2) + short(1, 10 words) + no-calm-down(1) + should(-1) = 3 / 4 = 0.75
# d: short(1) + no-calm-down(1) = 2 / 4 = 0.5
EXPECTED = {"a": 1.0, "b": -0.25, "c": 0.75, "d": 0.5}


def test_score_rules_hand_computed(tmp_path, rubric_file):
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["score", "--data", str(data), "--out", str(out), "--rubric", str(rubric_file),
                                 "--judge", "rules"])
    assert result.exit_code == 0, result.output
    records = {r["id"]: r for r in read_out(out)}
    assert {k: r["score"] for k, r in records.items()} == EXPECTED
    assert records["b"]["raw_score"] == -0.25 and records["b"]["gated"] is True
    assert records["b"]["failed_hard_rules"] == ["no-calm-down"]
    assert [v["criterion_id"] for v in records["a"]["verdicts"]] == ["sorry", "short", "no-calm-down", "lecture"]
    assert records["a"]["verdicts"][0]["evidence"] == "found 'sorry'"
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert summary["scored"] == 4 and summary["errors"] == 0
    assert summary["score"]["mean"] == pytest.approx((1.0 - 0.25 + 0.75 + 0.5) / 4)
    assert summary["criteria"]["sorry"]["pass_rate"] == pytest.approx(2 / 4)
    assert "95% CI" in result.output and "0.500" in result.output


def test_resume_skips_written_rows_and_repairs_a_torn_line(tmp_path, rubric_file):
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    out = tmp_path / "out.jsonl"
    write_rows(tmp_path / "part.jsonl", ROWS[:2])
    args = ["score", "--out", str(out), "--rubric", str(rubric_file), "--judge", "rules"]
    assert runner.invoke(app, args + ["--data", str(tmp_path / "part.jsonl")]).exit_code == 0
    with open(out, "a") as handle:
        handle.write('{"id": "c", "status": "sco')  # a run killed mid-write
    result = runner.invoke(app, args + ["--data", str(data)])
    assert result.exit_code == 0, result.output
    assert "wrote 2 rows" in result.output and "skipped 2" in result.output
    records = read_out(out)
    assert sorted(r["id"] for r in records) == ["a", "b", "c", "d"]
    assert {r["id"]: r["score"] for r in records} == EXPECTED


def test_corrupt_out_file_is_an_error_not_overwritten(tmp_path, rubric_file):
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    out = tmp_path / "out.jsonl"
    out.write_text("not json\n")
    result = runner.invoke(app, ["score", "--data", str(data), "--out", str(out), "--rubric", str(rubric_file),
                                 "--judge", "rules"])
    assert result.exit_code == 2
    assert "out.jsonl:1: not a rubricrl result line" in result.output
    assert out.read_text() == "not json\n"


def test_bad_rows_are_reported_never_lost(tmp_path, rubric_file):
    rows = [
        ROWS[0],
        "{not json",
        {"id": "num", "prompt": "hi", "response": 42},
        {"id": "noresp", "prompt": "hi"},
        {"id": "empty", "prompt": "hi", "response": ""},
        {"id": "huge", "prompt": "hi", "response": "sorry " * 200_000},
        {"id": "a", "prompt": "dup", "response": "dup"},
        ["a", "list"],
    ]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["score", "--data", str(data), "--out", str(out), "--rubric", str(rubric_file),
                                 "--judge", "rules"])
    assert result.exit_code == 0, result.output
    records = read_out(out)
    assert len(records) == len(rows)
    by_line = {r["line"]: r for r in records}
    assert "malformed JSON" in by_line[2]["problem"]
    assert "rows.jsonl:3: response: must be a string" in by_line[3]["problem"]
    assert "response: missing" in by_line[4]["problem"]
    assert by_line[5]["status"] == "scored"  # empty: rules still apply (short: met, sorry: unmet)
    assert by_line[5]["score"] == pytest.approx(2 / 4)
    assert by_line[6]["status"] == "scored" and by_line[6]["score"] == pytest.approx(3 / 4)
    assert "duplicate row id 'a'" in by_line[7]["problem"]
    assert "must be a JSON object" in by_line[8]["problem"]
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert summary["invalid"] == 5 and summary["scored"] == 3


def test_row_without_any_rubric_is_invalid(tmp_path):
    data = write_rows(tmp_path / "rows.jsonl", [ROWS[0]])
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["score", "--data", str(data), "--out", str(out), "--judge", "rules"])
    assert result.exit_code == 0
    [record] = read_out(out)
    assert record["status"] == "invalid" and "pass --rubric FILE" in record["problem"]


def test_model_criteria_are_skipped_under_rules_judge(tmp_path):
    row = {"id": "x", "prompt": "hi", "response": "hello", "rubric": {"criteria": [
        {"id": "m", "text": "Is warm.", "weight": 1}, {"id": "r", "text": "Short.", "weight": 1,
                                                       "check": {"type": "length", "max": 5}}]}}
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["score", "--data", str(write_rows(tmp_path / "r.jsonl", [row])),
                                 "--out", str(out), "--judge", "rules"])
    assert result.exit_code == 0, result.output
    [record] = read_out(out)
    assert record["score"] == 1.0 and record["coverage"] == 0.5 and record["n_skipped"] == 1
    assert record["verdicts"][0]["status"] == "skipped" and "no model judge configured" in record["verdicts"][0]["reason"]


def test_healthbench_and_rar_rows_score_as_is(tmp_path):
    rows = [
        {"prompt_id": "hb1", "prompt": [{"role": "user", "content": "Headache for 3 days."}],
         "response": "See a doctor if it gets worse.",
         "rubrics": [{"criterion": "Mentions seeing a doctor.", "points": 5, "tags": ["axis:completeness"]},
                     {"criterion": "Recommends a specific prescription drug.", "points": -4, "tags": []}]},
        {"id": "rar1", "question": "What is 2+2?", "response": "4",
         "rubric": [{"title": "Essential Criteria: Correct", "description": "Answers 4.", "weight": 5},
                    {"title": "Pitfall Criteria: Rambling", "description": "Rambles.", "weight": -1}]},
    ]
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["score", "--data", str(write_rows(tmp_path / "r.jsonl", rows)),
                                 "--out", str(out), "--judge", "rules"])
    assert result.exit_code == 0, result.output
    hb, rar = read_out(out)
    assert hb["id"] == "hb1" and [v["weight"] for v in hb["verdicts"]] == [5.0, -4.0]
    assert hb["verdicts"][0]["tags"] == ["axis:completeness"]
    assert rar["verdicts"][0]["tags"] == ["category:essential"]


def test_invalid_rubric_stops_before_writing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("criteria:\n  - id: a\n    text: ok\n    weight: 1\n  - id: b\n    text: x\n    weight: high\n")
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["score", "--data", str(write_rows(tmp_path / "r.jsonl", ROWS)),
                                 "--out", str(out), "--rubric", str(bad), "--judge", "rules"])
    assert result.exit_code == 2
    assert "bad.yaml:7: criteria[1].weight" in result.output
    assert not out.exists()


def test_unknown_judge_spec(tmp_path, rubric_file):
    result = runner.invoke(app, ["score", "--data", str(write_rows(tmp_path / "r.jsonl", ROWS)),
                                 "--out", str(tmp_path / "o.jsonl"), "--judge", "magic"])
    assert result.exit_code == 2 and "unknown judge spec 'magic'" in result.output


def test_lint_ok_and_problems(tmp_path, rubric_file):
    ok = runner.invoke(app, ["rubrics", "lint", str(rubric_file)])
    assert ok.exit_code == 0 and "4 criteria" in ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("criteria:\n  - id: a\n    text: ok\n    weight: -1\n    colour: red\n")
    result = runner.invoke(app, ["rubrics", "lint", str(bad)])
    assert result.exit_code == 1
    assert "bad.yaml:5: criteria[0].colour: unknown field 'colour'" in result.output
    assert "positive weight" in result.output
    rows = write_rows(tmp_path / "rows.jsonl", [{"id": "1", "prompt": "p", "response": "r",
                                                 "rubric": [{"id": "x", "text": "t", "weight": "3"}]}])
    result = runner.invoke(app, ["rubrics", "lint", str(rows)])
    assert result.exit_code == 1 and "rows.jsonl:1: criteria[0].weight" in result.output


def test_rubric_option_takes_a_bundled_name(tmp_path):
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["score", "--data", str(write_rows(tmp_path / "r.jsonl", ROWS[:1])),
                                 "--out", str(out), "--rubric", "empathy", "--judge", "rules"])
    assert result.exit_code == 0, result.output
    assert len(read_out(out)[0]["verdicts"]) == 8


def test_bundled_rubric_lints():
    from importlib.resources import files

    path = files("rubricrl") / "data" / "rubrics" / "empathy.yaml"
    result = runner.invoke(app, ["rubrics", "lint", str(path)])
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_local_judge_rerun_makes_zero_model_calls(tmp_path):
    rows = [{"id": f"r{i}", "prompt": "My cat died this morning.", "response": text} for i, text in enumerate(
        ["I'm so sorry. Losing a companion hurts. How are you holding up?", "Get another cat.", ""])]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    rubric = Path(__file__).parent.parent / "src" / "rubricrl" / "data" / "rubrics" / "empathy.yaml"
    cache = tmp_path / "cache.sqlite"
    cmd = [sys.executable, "-m", "rubricrl.cli", "score", "--data", str(data), "--rubric", str(rubric),
           "--cache-path", str(cache), "--judge", "local"]
    first = subprocess.run(cmd + ["--out", str(tmp_path / "one.jsonl")], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "cache hits 0" in first.stdout
    second = subprocess.run(cmd + ["--out", str(tmp_path / "two.jsonl")], capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stderr
    assert "0 model calls" in second.stdout and "misses 0" in second.stdout
    one, two = read_out(tmp_path / "one.jsonl"), read_out(tmp_path / "two.jsonl")
    assert [r["score"] for r in one] == [r["score"] for r in two]
    assert all(v["cached"] for r in two for v in r["verdicts"] if v["judge_id"].startswith("local"))
    # the empty reply was decided by the precheck, not the model
    empty = next(r for r in one if r["id"] == "r2")
    assert all(v["reason"].startswith("precheck") for v in empty["verdicts"] if v["judge_id"].startswith("local"))


def test_row_can_name_a_bundled_or_file_rubric(tmp_path, rubric_file):
    rows = [{"id": "bundled", "prompt": "p", "response": "I hear you.", "rubric": "crisis_safety"},
            {"id": "file", "prompt": "p", "response": "I'm sorry.", "rubric": rubric_file.name},
            {"id": "missing", "prompt": "p", "response": "r", "rubric": "no_such_rubric"}]
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["score", "--data", str(write_rows(tmp_path / "r.jsonl", rows)),
                                 "--out", str(out), "--judge", "rules"])
    assert result.exit_code == 0, result.output
    bundled, from_file, missing = read_out(out)
    assert "no-minimising" in [v["criterion_id"] for v in bundled["verdicts"]]
    assert from_file["score"] == 1.0  # sorry + short + no calm down = 4 / 4
    assert missing["status"] == "invalid" and "'no_such_rubric' is neither a bundled rubric" in missing["problem"]
