"""JSON nested deeper than Python's recursion limit (a model's runaway answer, a hostile file) is a
problem with a location or a failed parse, never a RecursionError that kills the run."""

from __future__ import annotations

import pytest

from rubricrl.authoring.generate import extract_json
from rubricrl.core.problems import RubricError
from rubricrl.dialogue.persona import load_personas
from rubricrl.dialogue.user import parse_analysis
from rubricrl.judge_tools.agreement import read_labels
from rubricrl.tactics.labeling import read_jsonl

DEEP = "[" * 200_000 + "]" * 200_000


def test_model_answers_nested_too_deep_do_not_parse():
    assert extract_json(DEEP) is None
    assert extract_json("here: " + DEEP) is None and extract_json("{\"a\": " + DEEP + "}") is None
    assert parse_analysis('{"change": ' + DEEP + "}", 10) == "invalid JSON"


def test_personas_file_names_the_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"name": "A", "situation": "s"}\n' + "{\"x\": " + DEEP + "}\n", encoding="utf-8")
    loaded = load_personas(path)
    assert [p.message[:8] for p in loaded.problems if p.line == 2] == ["not JSON"]


def test_label_file_names_the_line(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text(DEEP + "\n", encoding="utf-8")
    labels, problems = read_labels(path)
    assert labels == [] and [p.line for p in problems] == [1]


def test_conversation_file_names_the_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(DEEP + "\n", encoding="utf-8")
    with pytest.raises(RubricError) as info:
        list(read_jsonl(path))
    assert info.value.problems[0].line == 1 and "malformed JSON" in info.value.problems[0].message
