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
    assert len(read_out(out)[0]["verdicts"]) == 10  # the empathy rubric's criteria


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


# --------------------------------------------------------------------------- judge errors, re-runs, same files
# Two model-judged criteria next to the rule one; tests/chat_stub.py grades a criterion `met` when its first
# 'quoted' phrase occurs in the response, and answers garbage to a criterion containing [garbage].
MIXED_RUBRIC = """
id: mixed
criteria:
  - id: sorry
    text: Says sorry.
    weight: 2
    check: {type: contains, any_of: [sorry]}
  - id: job
    text: Mentions the 'job'.
    weight: 1
  - id: ask
    text: Asks 'how are you'.
    weight: 1
"""
MIXED_ROWS = [
    {"id": "a", "prompt": "I lost my job.", "response": "I am so sorry."},
    {"id": "b", "prompt": "I lost my job.", "response": "Tell me about the job."},
    {"id": "c", "prompt": "I lost my job.", "response": "Fine.",  # its own rubric: rule criteria only
     "rubric": {"criteria": [{"id": "short", "text": "Short.", "weight": 1, "check": {"type": "length", "max": 5}}]}},
]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def grader_spec(port: int) -> str:
    return f"openai:http://127.0.0.1:{port}/v1?model=stub-grader&mode=per_criterion&max_retries=0&timeout=5"


@pytest.fixture
def mixed(tmp_path):
    rubric = tmp_path / "mixed.yaml"
    rubric.write_text(MIXED_RUBRIC)
    return write_rows(tmp_path / "rows.jsonl", MIXED_ROWS), rubric


def test_judge_down_headline_names_rule_only_score_and_exits_1(tmp_path, mixed):
    data, rubric = mixed
    out = tmp_path / "out.jsonl"
    args = ["score", "--data", str(data), "--out", str(out), "--rubric", str(rubric), "--no-cache",
            "--judge", grader_spec(free_port())]  # nothing listens there: every model verdict is a connection error
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    # a: sorry met 2 / 2 (job, ask: errors, left out) = 1.0; b: 0 / 2 = 0.0; c: short met 1 / 1 = 1.0
    assert {r["id"]: r["score"] for r in read_out(out)} == {"a": 1.0, "b": 0.0, "c": 1.0}
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert summary["score"]["mean"] == pytest.approx(2 / 3)
    assert summary["model_judged"] == {"verdicts": 4, "decided": 0, "errors": 4, "skipped": 0, "error_rate": 1.0}
    assert "model-judged verdicts" in result.output and "0 of 4 decided (4 errors)" in result.output
    assert "RULE CRITERIA" in result.output
    assert "the score rests on only 0 of 4 model-judged verdicts" in result.output
    assert "4 of 4 model-judged verdicts (100%) are judge errors, more than --max-error-rate 0.5" in result.output
    # the same run, accepted with --max-error-rate 1: written and summarised, exit 0, the kept errors named
    result = runner.invoke(app, args + ["--max-error-rate", "1"])
    assert result.exit_code == 0, result.output
    assert "wrote 0 rows" in result.output and "2 row(s) already in" in result.output
    assert "--retry-errors" in result.output and "the score rests on only 0 of 4" in result.output


def test_partial_judge_errors_pass_up_to_max_error_rate(tmp_path):
    from chat_stub import ChatStub

    rubric = tmp_path / "r.yaml"
    rubric.write_text(MIXED_RUBRIC.replace("Asks 'how are you'.", "Asks 'how are you' [garbage]."))
    data = write_rows(tmp_path / "rows.jsonl", MIXED_ROWS[:2])
    stub = ChatStub()
    try:
        base = ["score", "--data", str(data), "--rubric", str(rubric), "--no-cache", "--judge", stub.judge_spec()]
        result = runner.invoke(app, base + ["--out", str(tmp_path / "one.jsonl")])
        # 4 model-judged verdicts: job decided twice, [garbage] a parse error twice: 2 / (2 + 2) = 0.5, not above 0.5
        assert result.exit_code == 0, result.output
        summary = json.loads((tmp_path / "one.summary.json").read_text())
        assert summary["model_judged"] == {"verdicts": 4, "decided": 2, "errors": 2, "skipped": 0, "error_rate": 0.5}
        # a: sorry 2 + job unmet = 2 / 3; b: job 1 / 3 ([garbage] left out of both)
        assert {r["id"]: r["score"] for r in read_out(tmp_path / "one.jsonl")} == pytest.approx({"a": 2 / 3, "b": 1 / 3})
        assert "2 of 4 decided (2 errors)" in result.output and "PARTIAL" in result.output
        assert "the score rests on only 2 of 4 model-judged verdicts" in result.output
        result = runner.invoke(app, base + ["--out", str(tmp_path / "two.jsonl"), "--max-error-rate", "0.4"])
        assert result.exit_code == 1, result.output
        assert "2 of 4 model-judged verdicts (50%) are judge errors, more than --max-error-rate 0.4" in result.output
    finally:
        stub.close()


def test_rerun_with_other_settings_is_refused_until_rejudge(tmp_path, rubric_file):
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    out = tmp_path / "out.jsonl"
    base = ["score", "--data", str(data), "--out", str(out)]
    assert runner.invoke(app, base + ["--rubric", str(rubric_file), "--judge", "rules"]).exit_code == 0
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert "out.settings.json" in files
    heavier = tmp_path / "heavier.yaml"
    heavier.write_text(RULES_RUBRIC.replace("weight: 2", "weight: 3"))
    refusals = {
        "rubric": (["--rubric", str(heavier), "--judge", "rules"], "rubric " + str(rubric_file.resolve())),
        "judge": (["--rubric", str(rubric_file), "--judge", "rules+defences:off"],
                  "judge spec 'rules' (now 'rules+defences:off')"),
        "threshold": (["--rubric", str(rubric_file), "--judge", "rules", "--threshold", "0.7"],
                      "--threshold 0.5 (now 0.7)"),
        "retry": (["--rubric", str(heavier), "--judge", "rules", "--retry-errors"], "heavier.yaml"),
    }
    for name, (extra, change) in refusals.items():
        result = runner.invoke(app, base + extra)
        assert result.exit_code == 2, (name, result.output)
        assert "was scored with other settings" in result.output and change in result.output, name
        assert "--rejudge" in result.output and "--retry-errors" in result.output, name
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != "heavier.yaml"} == files, name
    result = runner.invoke(app, base + ["--rubric", str(heavier), "--judge", "rules", "--rejudge"])
    assert result.exit_code == 0, result.output
    # positive weight 3 + 1 + 1 = 5: a 5/5; b (0 - 1)/5 gated; c (3 + 1 + 1 - 1)/5; d (1 + 1)/5
    assert {r["id"]: r["score"] for r in read_out(out)} == pytest.approx({"a": 1.0, "b": -0.2, "c": 0.8, "d": 0.4})
    [archive] = [p for p in tmp_path.glob("out.*.jsonl")]
    assert {r["id"]: r["score"] for r in read_out(archive)} == EXPECTED  # the old results, kept
    assert (tmp_path / (archive.stem + ".summary.json")).read_bytes() == files["out.summary.json"]
    settings = json.loads((tmp_path / "out.settings.json").read_text())
    assert settings["settings"]["rubric_path"] == str(heavier.resolve()) and settings["rejudge_pending"] is False
    assert settings["archived"][0]["files"] == [archive.name, archive.stem + ".summary.json"]
    assert settings["archived"][0]["settings"]["rubric_path"] == str(rubric_file.resolve())
    assert f"kept the previous results as {archive.name}" in result.output
    result = runner.invoke(app, base + ["--rubric", str(heavier), "--judge", "rules"])  # same settings: resume
    assert result.exit_code == 0 and "wrote 0 rows" in result.output and "skipped 4" in result.output


def test_rerun_after_a_row_rubric_changed_is_refused(tmp_path):
    rows = [dict(ROWS[0], rubric=RULES_ROW_RUBRIC), dict(ROWS[1], rubric=RULES_ROW_RUBRIC)]
    out = tmp_path / "out.jsonl"
    args = ["score", "--data", str(tmp_path / "rows.jsonl"), "--out", str(out), "--judge", "rules"]
    write_rows(tmp_path / "rows.jsonl", rows)
    assert runner.invoke(app, args).exit_code == 0
    before = out.read_bytes()
    rows[1]["rubric"] = [dict(RULES_ROW_RUBRIC[0], weight=5)]
    write_rows(tmp_path / "rows.jsonl", rows)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "the rubric of 1 row(s) (e.g. 'b'" in result.output and "--rejudge" in result.output
    assert out.read_bytes() == before


RULES_ROW_RUBRIC = [{"id": "sorry", "text": "Says sorry.", "weight": 1, "check": {"type": "contains", "any_of": ["sorry"]}}]


def test_retry_errors_rejudges_only_the_rows_with_judge_errors(tmp_path, mixed):
    import threading
    from http.server import ThreadingHTTPServer

    from chat_stub import ChatStub

    data, rubric = mixed
    out = tmp_path / "out.jsonl"
    port = free_port()
    args = ["score", "--data", str(data), "--out", str(out), "--rubric", str(rubric), "--no-cache",
            "--judge", grader_spec(port)]
    assert runner.invoke(app, args).exit_code == 1  # the judge is down: a and b get 2 errors each
    outage = read_out(out)
    stub = ChatStub()  # the judge is back, at the same address
    server = ThreadingHTTPServer(("127.0.0.1", port), stub.server.RequestHandlerClass)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = runner.invoke(app, args)  # a plain re-run keeps the errors, says so, and still fails
        assert result.exit_code == 1 and stub.judge_calls == 0
        assert "2 row(s) already in" in result.output and "--retry-errors" in result.output
        result = runner.invoke(app, args + ["--retry-errors"])
        assert result.exit_code == 0, result.output
        assert stub.judge_calls == 4  # rows a and b, two model-judged criteria each; c had no error
    finally:
        server.shutdown()
        server.server_close()
        stub.close()
    records = read_out(out)
    assert [r["id"] for r in records] == ["a", "b", "c"]  # in place, in order
    # a: sorry 2, job unmet, ask unmet = 2/4; b: job 1 / 4; c unchanged
    assert {r["id"]: r["score"] for r in records} == {"a": 0.5, "b": 0.25, "c": 1.0}
    assert records[2] == outage[2]
    assert "re-judged 2 row(s) with judge errors (0 still have errors)" in result.output
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert summary["model_judged"] == {"verdicts": 4, "decided": 4, "errors": 0, "skipped": 0, "error_rate": 0.0}
    assert summary["score"]["mean"] == pytest.approx((0.5 + 0.25 + 1.0) / 3)
    assert not (tmp_path / "out.retry.jsonl").exists()


def test_retry_results_left_by_a_killed_run_are_merged_first(tmp_path, rubric_file):
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    out = tmp_path / "out.jsonl"
    args = ["score", "--data", str(data), "--out", str(out), "--rubric", str(rubric_file), "--judge", "rules"]
    assert runner.invoke(app, args).exit_code == 0
    records = read_out(out)
    new_b = dict(records[1], score=0.125)  # as if a --retry-errors run wrote b's new result, then was killed
    (tmp_path / "out.retry.jsonl").write_text(json.dumps(new_b) + "\n")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert read_out(out) == [records[0], new_b, records[2], records[3]]
    assert not (tmp_path / "out.retry.jsonl").exists()


def test_out_that_is_the_data_file_is_refused(tmp_path, rubric_file, monkeypatch):
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    before = data.read_bytes()
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.jsonl").symlink_to(data)
    (tmp_path / "hard.jsonl").hardlink_to(data)
    monkeypatch.chdir(tmp_path)
    base = ["score", "--data", "rows.jsonl", "--rubric", str(rubric_file), "--judge", "rules"]
    for extra in (["--out", "rows.jsonl"], ["--out", "sub/../rows.jsonl"], ["--out", str(data)],
                  ["--out", "link.jsonl"], ["--out", "hard.jsonl"],
                  ["--out", "o.jsonl", "--summary-json", "rows.jsonl"],
                  ["--out", "o.jsonl", "--summary-json", "o.jsonl"]):
        result = runner.invoke(app, base + extra)
        assert result.exit_code == 2, (extra, result.output)
        assert "is the same file as" in result.output and "Nothing was written" in result.output, extra
        assert data.read_bytes() == before, extra
        assert not (tmp_path / "o.jsonl").exists() and not list(tmp_path.glob("*.settings.json")), extra


@pytest.mark.parametrize("case", ["rubrics generate", "rubrics refine", "judge fit", "judge agree", "judge calibrate",
                                  "judge audit", "tactics classify", "tactics fit", "simulate"])
def test_other_commands_refuse_an_output_that_is_an_input(tmp_path, rubric_file, case):
    rows = write_rows(tmp_path / "rows.jsonl", [{"id": "p1", "prompt": "I lost my job.", "response": "I'm sorry."}])
    labels = tmp_path / "agree" / "verdicts.jsonl"
    labels.parent.mkdir()
    write_rows(labels, [{"prompt": "p", "response": "I'm sorry.", "criterion": "Says sorry.", "label": "met"}])
    chats = write_rows(tmp_path / "chats.jsonl", [{"id": "c1", "messages": [{"role": "user", "content": "hi"},
                                                                           {"role": "assistant", "content": "hello"}]}])
    down = "openai:http://127.0.0.1:9/v1?model=x&max_retries=0&timeout=1"
    args, victim = {
        "rubrics generate": (["--data", rows, "--out", rows, "--generator", down], rows),
        "rubrics refine": ([rubric_file, "--out", rubric_file], rubric_file),
        "judge fit": (["--rubric", rubric_file, "--out", rubric_file], rubric_file),
        "judge agree": (["--labels", labels, "--out", labels.parent, "--judge", "rules"], labels),
        "judge calibrate": (["--labels", labels, "--out", labels, "--judge", "rules"], labels),
        "judge audit": (["--judge", "rules", "--rubric", rubric_file, "--data", rows, "--json", rows], rows),
        "tactics classify": (["--in", chats, "--out", chats], chats),
        "tactics fit": (["--data", chats, "--out", chats], chats),
        "simulate": (["--personas", rows, "--out", rows, "--policy", down, "--user-model", down], rows),
    }[case]
    before = victim.read_bytes()
    result = runner.invoke(app, case.split() + [str(a) for a in args])
    assert result.exit_code == 2, result.output
    assert "is the same file as" in result.output and "Nothing was written" in result.output
    assert victim.read_bytes() == before


# -- result records --------------------------------------------------------------------------------

def test_result_records_round_trip_a_real_score_output_byte_for_byte(tmp_path, rubric_file):
    from rubricrl.scoring.records import read_records, record_line

    rows = ROWS + [
        {"id": "sep", "prompt": "hi", "response": "Sorry,\u2028 separators\u00a0and \u00e9\u00e8 stay as written."},
        {"id": "empty", "prompt": "hi", "response": ""},
        "{not json",
        {"id": "own", "prompt": "hi", "response": "hello", "rubric": {"criteria": [
            {"id": "m", "text": "Is warm.", "weight": 1, "tags": ["axis:warmth"]},
            {"id": "r", "text": "Long.", "weight": -2, "check": {"type": "length", "min": 3}}]}},
        {"id": "bad", "prompt": "x", "response": "y", "rubric": "no_such_rubric"},
    ]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["score", "--data", str(data), "--out", str(out), "--rubric", str(rubric_file),
                                 "--judge", "rules"])
    assert result.exit_code == 0, result.output
    records = read_records(out)
    assert {r.status for r in records} == {"scored", "unscored", "invalid"}
    assert b"".join(record_line(r).encode() + b"\n" for r in records) == out.read_bytes()
    by_id = {r.id: r for r in records}
    assert by_id["b"].gated and by_id["b"].failed_hard_rules == ("no-calm-down",) and by_id["b"].score == -0.25
    assert by_id["own"].status == "unscored" and by_id["own"].rubric_source == "row"  # no positive criterion decided
    assert [v.weight for v in by_id["own"].verdicts] == [1.0, -2.0]
    assert by_id["own"].verdicts[0].tags == ("axis:warmth",)
    assert by_id["line-7"].problem.startswith(f"{data}:7: malformed JSON") and by_id["line-7"].verdicts == ()


@pytest.mark.parametrize("line, problem", [
    ('{"id": "x", "line": 1, "status": "scored"', "malformed JSON"),
    ('{"id": "x", "line": 1, "status": "scored", "score": 1.0}', "a scored record needs raw_score, gated"),
    ('{"id": "x", "line": 1, "status": "invalid", "score": null, "problem": "p", "colour": "red"}', "colour: Extra"),
    ('{"id": "x", "line": 1, "status": "done", "score": null, "problem": "p"}', "status: Input should be"),
])
def test_a_bad_result_line_names_the_file_and_line(tmp_path, rubric_file, line, problem):
    from rubricrl.scoring.records import RecordError, read_records

    out = tmp_path / "out.jsonl"
    runner.invoke(app, ["score", "--data", str(write_rows(tmp_path / "rows.jsonl", ROWS[:2])), "--out", str(out),
                        "--rubric", str(rubric_file), "--judge", "rules"])
    assert len(read_records(out)) == 2
    out.write_bytes(out.read_bytes() + line.encode() + b"\n")
    with pytest.raises(RecordError, match=f"^{out}:3: not a rubricrl result line \\(.*{problem}"):
        read_records(out)
