"""`rubricrl simulate summarize FILE...`: SAGE's released result files and rubricrl's own transcripts,
detected per file and summarized Sentient-style (dialogue/summary.py). The fixtures are hand-written
rows in each format; the expected numbers are computed by hand in the comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rubricrl.cli import app
from rubricrl.cli.simulate import tenth
from rubricrl.dialogue.transcripts import FORMATS, TranscriptFileError, read_transcript_file

DATA = Path(__file__).parent / "data"
SAGE = DATA / "sage" / "model_result.jsonl"
OURS = DATA / "simulate_transcripts.jsonl"
EXPECTED = f"{FORMATS['rubricrl']} or {FORMATS['sage']}"
runner = CliRunner()


def test_both_formats_by_hand(tmp_path):
    out = tmp_path / "summary.json"
    result = runner.invoke(app, ["simulate", "summarize", str(SAGE), str(OURS), "--json", str(out)])
    assert result.exit_code == 0, result.output
    sage, ours = json.loads(out.read_text())["files"]
    # SAGE: final emo_point 100, 5, 55, 45, 10 -> mean 215 / 5 = 43.0; success >= 100: one; failure < 10: one
    # (exactly 10 is not a failure); supporter turns 2, 2, 2, 3, 2 -> 11 / 5 = 2.2
    assert (sage["file"], sage["format"]) == (str(SAGE), "sage")
    assert (sage["conversations"], sage["scored"], sage["errors"]) == (5, 5, 0)
    assert sage["score"]["mean"] == pytest.approx(43.0) and sage["score"]["n"] == 5
    assert (sage["successes"], sage["failures"], sage["mean_turns"]) == (1, 1, pytest.approx(2.2))
    # the user spoke last in 1-3: success, failure, goodbye; the supporter spoke last in 4 and 5: max_turns
    assert sage["end_reasons"] == {"success": 1, "failure": 1, "goodbye": 1, "max_turns": 2}
    assert sage["per_persona"] == {"sage-1": 100, "sage-2": 5, "sage-3": 55, "sage-4": 45, "sage-5": 10}
    # rubricrl: finals 60 (goodbye) and 5 (failure) -> 32.5; the third ended in an error: counted, not scored
    assert (ours["format"], ours["conversations"], ours["scored"], ours["errors"]) == ("rubricrl", 3, 2, 1)
    assert ours["score"]["mean"] == pytest.approx(32.5)
    assert (ours["successes"], ours["failures"], ours["mean_turns"]) == (0, 1, pytest.approx(3.0))  # (2 + 4) / 2
    assert ours["end_reasons"] == {"goodbye": 1, "failure": 1, "error": 1} and ours["error_reasons"] == {"user": 1}
    assert ours["empty_supporter_replies"] == 1
    assert "43.0" in result.output and "32.5" in result.output
    assert "success: final emotion >= 100; failure: below 10" in result.output


def test_thresholds(tmp_path):
    out = tmp_path / "summary.json"
    result = runner.invoke(app, ["simulate", "summarize", str(SAGE), "--success-at", "50", "--failure-below", "15",
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    [sage] = json.loads(out.read_text())["files"]
    # finals 100, 5, 55, 45, 10: >= 50 -> 100 and 55; < 15 -> 5 and 10
    assert (sage["successes"], sage["failures"]) == (2, 2)
    assert sage["end_reasons"] == {"success": 2, "failure": 2, "max_turns": 1}


def test_a_sage_row_read_turn_by_turn():
    fmt, transcripts = read_transcript_file(SAGE)
    assert fmt == "sage" and [t.trajectory_id for t in transcripts] == [f"sage-{i}" for i in range(1, 6)]
    success = transcripts[0]
    assert (success.start_emotion, success.final_emotion, success.end_reason) == (40, 100, "success")
    assert [t.role for t in success.turns] == ["user", "supporter", "user", "supporter", "user"]
    assert success.emotions == [40, 70, 100] and success.changes == [30, 30]
    assert success.turns[2].reasons == "被理解了" and success.turns[1].text == "听起来你真的撑了很久。"


def test_a_file_of_neither_format_names_the_file_line_and_formats(tmp_path):
    scored = tmp_path / "results.jsonl"
    scored.write_text('{"id": "p1", "score": 0.5, "verdicts": []}\n')
    with pytest.raises(TranscriptFileError) as caught:
        read_transcript_file(scored)
    assert str(caught.value) == (f"{scored}:1: neither a rubricrl transcript nor a SAGE result row (keys ['id', "
                                 f"'score', 'verdicts']); expected {EXPECTED}")
    result = runner.invoke(app, ["simulate", "summarize", str(SAGE), str(scored)])
    assert result.exit_code == 2 and f"{scored}:1: neither a rubricrl transcript" in result.output


@pytest.mark.parametrize("text, where, message", [
    ("", "", "no rows; expected lines of " + EXPECTED),
    ("[1, 2]\n", ":1", "neither a rubricrl transcript nor a SAGE result row (a JSON list); expected " + EXPECTED),
    ("\n{oops\n", ":2", "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); "
                        "expected " + EXPECTED),
])
def test_empty_and_unreadable_files(tmp_path, text, where, message):
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(TranscriptFileError) as caught:
        read_transcript_file(path)
    assert str(caught.value) == f"{path}{where}: {message}"


def test_one_format_per_file_and_every_row_checked(tmp_path):
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(OURS.read_text().splitlines()[0] + "\n" + SAGE.read_text(encoding="utf-8").splitlines()[0] + "\n",
                     encoding="utf-8")
    with pytest.raises(TranscriptFileError) as caught:
        read_transcript_file(mixed)
    assert str(caught.value) == (f"{mixed}:2: a SAGE result row in a file whose line 1 is a rubricrl transcript; "
                                 f"expected {FORMATS['rubricrl']} (fix: keep one format per file)")
    rows = [json.loads(line) for line in SAGE.read_text(encoding="utf-8").splitlines()]
    rows[3]["emo_point"] = "high"
    bad = tmp_path / "bad_result.jsonl"
    bad.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(TranscriptFileError) as caught:
        read_transcript_file(bad)
    assert str(caught.value) == (f"{bad}:4: emo_point: Input should be a valid number, unable to parse string as a "
                                 f"number; expected {FORMATS['sage']}")


def test_leaderboard_rounding():
    # SAGE's leaderboard rounds halves up: 68.15 -> 68.2, 31.75 -> 31.8, 28.95 -> 29.0
    assert [tenth(x) for x in (6815 / 100, 3175 / 100, 2895 / 100, 43.0, 19.1)] == ["68.2", "31.8", "29.0", "43.0",
                                                                                    "19.1"]


def test_simulate_without_out_or_a_command_says_what_to_do():
    result = runner.invoke(app, ["simulate"])
    assert result.exit_code == 2
    assert "missing option --out" in result.output and "rubricrl simulate summarize FILE..." in result.output


def test_the_json_output_must_not_be_an_input(tmp_path):
    copy = tmp_path / "r.jsonl"
    copy.write_bytes(SAGE.read_bytes())
    result = runner.invoke(app, ["simulate", "summarize", str(copy), "--json", str(copy)])
    assert result.exit_code == 2 and "is the same file as" in result.output
    assert copy.read_bytes() == SAGE.read_bytes()
