"""Rubric and criterion validation, rubric files, dataset-row rubrics and JSONL rows.

Errors must name the file, the 1-based line, the field path and a fix.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rubricrl.core.messages import Message
from rubricrl.core.problems import Problem, RubricError
from rubricrl.rubrics.loading import criterion_summary, load_rubric, rubric_from_data, rubric_from_row
from rubricrl.rubrics.rows import InvalidRow, ScoringRow, parse_row, read_rows
from rubricrl.rubrics.model import Criterion, LengthCheck, Rubric

RUBRIC_YAML = """\
id: empathy-v1
description: Replies to a distressed user
hard_rule_gate: 0.0
criteria:
  - id: acknowledge
    text: Acknowledges the user's feelings
    weight: 3
    tags: [axis:empathy]
  - id: advice
    text: Offers one concrete next step
    weight: 2
  - id: no_blame
    text: Blames the user
    weight: -2
    kind: hard_rule
  - id: short
    text: Stays under 120 words
    weight: 1
    check: {type: length, unit: words, max: 120}
"""

RUBRIC_DATA = {
    "id": "empathy-v1",
    "description": "Replies to a distressed user",
    "hard_rule_gate": 0.0,
    "criteria": [
        {"id": "acknowledge", "text": "Acknowledges the user's feelings", "weight": 3, "tags": ["axis:empathy"]},
        {"id": "advice", "text": "Offers one concrete next step", "weight": 2},
        {"id": "no_blame", "text": "Blames the user", "weight": -2, "kind": "hard_rule"},
        {"id": "short", "text": "Stays under 120 words", "weight": 1,
         "check": {"type": "length", "unit": "words", "max": 120}},
    ],
}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str, name: str = "r.yaml") -> tuple[RubricError, Path]:
    path = write(tmp_path, name, text)
    with pytest.raises(RubricError) as info:
        load_rubric(path)
    return info.value, path


# --------------------------------------------------------------------------- Criterion / Rubric models


def test_criterion_defaults_and_stripping():
    c = Criterion(id="c1", text="  Says hello \n")
    assert c.text == "Says hello"
    assert c.weight == 1.0 and isinstance(c.weight, float)
    assert c.kind == "principle"
    assert c.tags == () and c.check is None


@pytest.mark.parametrize("cid", ["a", "A9", "axis:accuracy.v1-2_x", "9lives", "x" * 128])
def test_criterion_ids_accepted(cid):
    assert Criterion(id=cid, text="t").id == cid


@pytest.mark.parametrize("cid", ["", "has space", "-leading", "_leading", "é", "a/b", "x" * 129])
def test_criterion_ids_rejected(cid):
    with pytest.raises(ValidationError):
        Criterion(id=cid, text="t")


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_blank_criterion_text_rejected(text):
    with pytest.raises(ValidationError):
        Criterion(id="c1", text=text)


@pytest.mark.parametrize("weight", ["3", "high", True, None, math.nan, math.inf, -math.inf, [1]])
def test_weight_must_be_a_finite_strict_number(weight):
    with pytest.raises(ValidationError):
        Criterion(id="c1", text="t", weight=weight)


def test_integer_weight_becomes_float():
    c = Criterion(id="c1", text="t", weight=-2)
    assert c.weight == -2.0 and isinstance(c.weight, float)


@pytest.mark.parametrize("extra", [{"kind": "must"}, {"foo": 1}, {"tags": "not-a-list", "weight": 1.0, "bar": 2}])
def test_criterion_rejects_unknown_kind_and_fields(extra):
    with pytest.raises(ValidationError):
        Criterion(id="c1", text="t", **extra)


def test_models_are_frozen():
    c = Criterion(id="c1", text="t")
    with pytest.raises(ValidationError):
        c.weight = 2.0  # type: ignore[misc]


def test_rubric_validation_and_helpers():
    r = Rubric(criteria=(Criterion(id="a", text="x", weight=3), Criterion(id="b", text="y", weight=-2),
                         Criterion(id="c", text="z", weight=1.5)))
    assert r.positive_weight == pytest.approx(4.5)  # 3 + 1.5, negatives left out
    assert r.criterion("b").weight == -2.0
    with pytest.raises(KeyError):
        r.criterion("nope")
    assert criterion_summary(r.criterion("b")) == "b (principle, weight -2, model)"


def test_rubric_rejects_duplicates_empty_and_no_positive_weight():
    with pytest.raises(ValidationError, match="duplicate criterion id 'a'"):
        Rubric(criteria=(Criterion(id="a", text="x"), Criterion(id="a", text="y")))
    with pytest.raises(ValidationError):
        Rubric(criteria=())
    with pytest.raises(ValidationError, match="positive weight"):
        Rubric(criteria=(Criterion(id="a", text="x", weight=0), Criterion(id="b", text="y", weight=-1)))


@pytest.mark.parametrize("gate", [math.nan, math.inf])
def test_rubric_rejects_non_finite_hard_rule_gate(gate):
    with pytest.raises(ValidationError):
        Rubric(criteria=(Criterion(id="a", text="x"),), hard_rule_gate=gate)


# --------------------------------------------------------------------------- load_rubric: good files


def test_load_yaml_rubric(tmp_path):
    r = load_rubric(write(tmp_path, "r.yaml", RUBRIC_YAML))
    assert r.id == "empathy-v1"
    assert [c.id for c in r.criteria] == ["acknowledge", "advice", "no_blame", "short"]
    assert [c.weight for c in r.criteria] == [3.0, 2.0, -2.0, 1.0]
    assert r.criterion("no_blame").kind == "hard_rule"
    assert r.criterion("acknowledge").tags == ("axis:empathy",)
    assert r.criterion("short").check == LengthCheck(type="length", unit="words", max=120)
    assert r.positive_weight == pytest.approx(6.0)  # 3 + 2 + 1


def test_load_json_rubric_equals_yaml_rubric(tmp_path):
    from_yaml = load_rubric(write(tmp_path, "r.yaml", RUBRIC_YAML))
    from_json = load_rubric(write(tmp_path, "r.json", json.dumps(RUBRIC_DATA, indent=2)))
    assert from_json.model_dump() == from_yaml.model_dump()
    assert from_json.content_hash() == from_yaml.content_hash()


def test_load_bare_list_gives_default_ids(tmp_path):
    text = "- text: First\n- id: named\n  text: Second\n  weight: -1\n- text: Third\n  weight: 2\n"
    r = load_rubric(write(tmp_path, "r.yaml", text))
    assert [c.id for c in r.criteria] == ["c1", "named", "c3"]  # ids by position
    assert r.positive_weight == pytest.approx(3.0)  # 1 + 2


def test_content_hash_stable_across_loads(tmp_path):
    path = write(tmp_path, "r.yaml", RUBRIC_YAML)
    first, second = load_rubric(path), load_rubric(path)
    assert first.content_hash() == second.content_hash()
    assert len(first.content_hash()) == 64
    assert first.content_hash() == first.content_hash()  # cached value is the same


def test_content_hash_changes_with_text_weight_and_order(tmp_path):
    base = load_rubric(write(tmp_path, "a.yaml", RUBRIC_YAML)).content_hash()
    text_changed = load_rubric(write(tmp_path, "b.yaml", RUBRIC_YAML.replace("one concrete", "two concrete")))
    weight_changed = load_rubric(write(tmp_path, "c.yaml", RUBRIC_YAML.replace("weight: 2\n", "weight: 2.5\n")))
    assert text_changed.content_hash() != base
    assert weight_changed.content_hash() != base
    data = json.loads(json.dumps(RUBRIC_DATA))
    data["criteria"].reverse()
    assert rubric_from_data(data, "x").content_hash() != base


def test_content_hash_ignores_id_and_description(tmp_path):
    base = load_rubric(write(tmp_path, "a.yaml", RUBRIC_YAML)).content_hash()
    renamed = RUBRIC_YAML.replace("id: empathy-v1", "id: empathy-v2").replace("distressed", "sad")
    assert load_rubric(write(tmp_path, "b.yaml", renamed)).content_hash() == base


def test_criterion_hash_ignores_weight_but_not_text():
    a = Criterion(id="a", text="x", weight=1)
    assert a.content_hash() == Criterion(id="a", text="x", weight=5, tags=("t",)).content_hash()
    assert a.content_hash() != Criterion(id="a", text="y", weight=1).content_hash()
    assert a.content_hash() != Criterion(id="a", text="x", kind="hard_rule").content_hash()


# --------------------------------------------------------------------------- load_rubric: bad files


def test_malformed_yaml_names_file_and_line(tmp_path):
    text = "criteria:\n  - id: a\n    text: x\n   weight: 2\n"  # line 4 is mis-indented
    err, path = load_error(tmp_path, text)
    assert str(err).startswith(f"{path}:4:")
    assert "malformed YAML" in str(err)
    assert "fix:" in str(err)


def test_malformed_json_names_file_and_line(tmp_path):
    text = '{"criteria": [\n {"id": "a", "text": "x"},\n {"id": "b" "text": "y"}\n]}'  # missing comma on line 3
    err, path = load_error(tmp_path, text, "r.json")
    assert str(err).startswith(f"{path}:3:")
    assert err.problems[0].line == 3


def test_unknown_field_names_line_field_and_fix(tmp_path):
    text = "criteria:\n  - id: a\n    text: x\n  - id: b\n    text: y\n    foo: 1\n"
    err, path = load_error(tmp_path, text)
    assert f"{path}:6: criteria[1].foo: unknown field 'foo'" in str(err)
    assert "(fix: remove it" in str(err)
    assert [p.field for p in err.problems] == ["criteria[1].foo"]


def test_unknown_top_level_field(tmp_path):
    err, path = load_error(tmp_path, "title: x\ncriteria:\n  - id: a\n    text: x\n")
    assert f"{path}:1: title: unknown field 'title'" in str(err)


@pytest.mark.parametrize("value", ["high", '"3"', "true", "[1, 2]"])
def test_non_numeric_weight_rejected(tmp_path, value):
    text = f"criteria:\n  - id: a\n    text: x\n  - id: b\n    text: y\n    weight: {value}\n"
    err, path = load_error(tmp_path, text)
    assert f"{path}:6: criteria[1].weight:" in str(err)  # the weight is on line 6
    assert "valid number" in str(err)
    assert "(fix: use a number" in str(err)


def test_non_numeric_weight_in_json_file_names_its_line(tmp_path):
    text = '{"criteria": [\n  {"id": "a", "text": "x"},\n  {"id": "b", "text": "y",\n   "weight": "3"}\n]}'
    err, path = load_error(tmp_path, text, "r.json")
    assert f"{path}:4: criteria[1].weight:" in str(err)


def test_empty_criteria_list(tmp_path):
    err, path = load_error(tmp_path, "id: r\ncriteria: []\n")
    assert f"{path}:2: criteria:" in str(err)
    assert "(fix: add at least one item)" in str(err)


def test_missing_criteria(tmp_path):
    err, path = load_error(tmp_path, "id: r\n")
    assert "criteria" in [p.field for p in err.problems]
    assert "(fix: add this field)" in str(err)


def test_missing_text_names_field(tmp_path):
    err, path = load_error(tmp_path, "criteria:\n  - id: a\n    text: x\n  - id: b\n    weight: 2\n")
    assert f"{path}:4: criteria[1].text:" in str(err)  # located at the criterion's first line
    assert "(fix: add this field)" in str(err)


def test_duplicate_criterion_ids(tmp_path):
    err, path = load_error(tmp_path, "criteria:\n  - id: a\n    text: x\n  - id: a\n    text: y\n")
    assert str(err).startswith(f"{path}:")
    assert "duplicate criterion id 'a'" in str(err)
    assert "criteria[1]" in str(err)
    assert "unique id" in str(err)


def test_no_positive_weight(tmp_path):
    text = "criteria:\n  - id: a\n    text: x\n    weight: 0\n  - id: b\n    text: y\n    weight: -1\n"
    err, path = load_error(tmp_path, text)
    assert str(err).startswith(f"{path}:")
    assert "positive weight" in str(err)
    assert "weight > 0" in str(err)  # the fix


@pytest.mark.parametrize("text, field, line", [
    ("criteria:\n  - id: a\n    text: x\n  - id: a\n    text: y\n", "criteria[1]", 4),
    ("id: r\ncriteria:\n  - id: a\n    text: x\n    weight: 0\n", "criteria", 3),
])
def test_rubric_level_errors_name_field_and_line(tmp_path, text, field, line):
    err, _ = load_error(tmp_path, text)
    assert err.problems[0].field.startswith(field)
    assert err.problems[0].line == line


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_nan_and_infinite_weight_rejected(tmp_path, value):
    text = f"criteria:\n  - id: a\n    text: x\n  - id: b\n    text: y\n    weight: {value}\n"
    err, path = load_error(tmp_path, text)
    assert f"{path}:6: criteria[1].weight: weight must be a finite number" in str(err)


def test_nan_weight_error_has_a_fix(tmp_path):
    err, _ = load_error(tmp_path, "criteria:\n  - id: a\n    text: x\n    weight: .nan\n")
    assert "(fix:" in str(err)


@pytest.mark.parametrize("criterion", ["    foo: 1", "    weight: high", "    kind: must"])
def test_single_bad_criterion_reports_one_problem(tmp_path, criterion):
    # no extra "criteria: ... at least 1 item" problem for a list that has one (invalid) item
    err, _ = load_error(tmp_path, f"criteria:\n  - id: a\n    text: x\n{criterion}\n")
    assert len(err.problems) == 1
    assert err.problems[0].field.startswith("criteria[0].")
    assert err.problems[0].line == 4


def test_bare_list_error_names_the_line(tmp_path):
    err, path = load_error(tmp_path, "- id: a\n  text: x\n- id: b\n  text: y\n  weight: high\n")
    assert f"{path}:5: criteria[1].weight:" in str(err)


def test_several_problems_are_all_reported(tmp_path):
    text = "criteria:\n  - id: a\n    text: x\n    weight: high\n  - id: b\n    text: y\n    bar: 1\n"
    err, path = load_error(tmp_path, text)
    assert {(p.line, p.field) for p in err.problems} == {(4, "criteria[0].weight"), (7, "criteria[1].bar")}
    assert len(str(err).splitlines()) == 2


def test_bad_item_and_no_positive_weight_are_both_reported(tmp_path):
    text = "criteria:\n  - id: a\n    text: x\n    weight: -1\n  - id: b\n    text: y\n    weight: 0\n    foo: 1\n"
    err, path = load_error(tmp_path, text)
    assert f"{path}:8: criteria[1].foo: unknown field 'foo'" in str(err)
    assert any(p.field == "criteria" and "positive weight" in p.message for p in err.problems)


@pytest.mark.parametrize("text, needle", [("", "got empty"), ("42\n", "got int"), ("just words\n", "got str")])
def test_file_that_is_not_a_rubric(tmp_path, text, needle):
    err, path = load_error(tmp_path, text)
    assert str(err).startswith(str(path))
    assert needle in str(err)
    assert "fix:" in str(err)


def test_unreadable_files(tmp_path):
    with pytest.raises(RubricError, match="cannot read file"):
        load_rubric(tmp_path / "missing.yaml")
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"criteria:\n  - id: a\n    text: caf\xe9\n")
    with pytest.raises(RubricError, match="cannot read file"):
        load_rubric(path)


JSON_AS_YAML_CASES = [
    pytest.param({"criteria": [{"id": "a", "text": "x", "weight": 1e-05}]}, {}, id="exponent-small"),
    pytest.param({"criteria": [{"id": "a", "text": "x", "weight": 1e16}]}, {}, id="exponent-large"),
    pytest.param({"criteria": [{"id": "a", "text": "smile \U0001F600"}]}, {}, id="surrogate-pair-escape"),
    pytest.param({"criteria": [{"id": "a", "text": "x"}]}, {"indent": "\t"}, id="tab-indent"),
    pytest.param({"criteria": [{"id": "a", "text": "a\x7fb"}]}, {"ensure_ascii": False}, id="raw-DEL-char"),
    pytest.param({"criteria": [{"id": "a", "text": "a\x85b"}]}, {"ensure_ascii": False}, id="raw-NEL-char"),
]


@pytest.mark.parametrize("data, dump_kwargs", JSON_AS_YAML_CASES)
def test_valid_json_files_load_exactly(tmp_path, data, dump_kwargs):
    path = write(tmp_path, "r.json", json.dumps(data, **dump_kwargs))
    assert load_rubric(path).model_dump() == Rubric.model_validate(data).model_dump()


# --------------------------------------------------------------------------- rubric_from_data


@pytest.mark.parametrize("data, kind", [(None, "empty"), (3, "int"), ("text", "str"), (True, "bool")])
def test_rubric_from_data_rejects_non_rubrics(data, kind):
    with pytest.raises(RubricError) as info:
        rubric_from_data(data, source="rows.jsonl", line=7)
    assert str(info.value).startswith("rows.jsonl:7:")
    assert f"got {kind}" in str(info.value)


def test_rubric_from_data_uses_given_line_for_every_problem():
    data = {"criteria": [{"id": "a", "text": "x", "weight": "3"}, {"id": "b", "text": "y", "foo": 1}]}
    with pytest.raises(RubricError) as info:
        rubric_from_data(data, source="rows.jsonl", line=12)
    assert {p.line for p in info.value.problems} == {12}
    assert {p.field for p in info.value.problems} == {"criteria[0].weight", "criteria[1].foo"}


def test_rubric_from_data_empty_list():
    with pytest.raises(RubricError, match="at least one item"):
        rubric_from_data([], source="s")


def test_problem_str_format():
    assert str(Problem("f.yaml", 3, "criteria[0].weight", "bad", "use a number")) == \
        "f.yaml:3: criteria[0].weight: bad (fix: use a number)"
    assert str(Problem("f.yaml", None, "", "bad")) == "f.yaml: bad"


# --------------------------------------------------------------------------- rubric_from_row


NATIVE = {"criteria": [{"id": "ok", "text": "Answers 4", "weight": 2}, {"id": "pit", "text": "Says 5", "weight": -1}]}


def test_row_native_mapping():
    r = rubric_from_row({"prompt": "2+2?", "rubric": NATIVE}, "rows.jsonl", 1)
    assert r is not None and [(c.id, c.weight) for c in r.criteria] == [("ok", 2.0), ("pit", -1.0)]


def test_row_native_list():
    r = rubric_from_row({"rubric": [{"text": "Answers 4", "weight": 2}, {"text": "Says 5", "weight": -1}]}, "s", 1)
    assert r is not None and [(c.id, c.weight) for c in r.criteria] == [("c1", 2.0), ("c2", -1.0)]


def test_row_json_string_rubric():
    r = rubric_from_row({"rubric": json.dumps(NATIVE)}, "s", 1)
    assert r is not None
    assert r.content_hash() == rubric_from_data(NATIVE, "x").content_hash()


def test_row_invalid_json_string_rubric():
    with pytest.raises(RubricError) as info:
        rubric_from_row({"rubric": "{not json"}, "rows.jsonl", 9)
    assert str(info.value).startswith("rows.jsonl:9: rubric: string is not valid JSON")
    assert "fix:" in str(info.value)


def test_row_without_rubric_is_none():
    assert rubric_from_row({"prompt": "x"}, "s", 1) is None
    assert rubric_from_row({"prompt": "x", "rubric": None}, "s", 1) is None


def test_row_with_both_rubric_and_rubrics():
    with pytest.raises(RubricError, match="both `rubric` and `rubrics`"):
        rubric_from_row({"rubric": NATIVE, "rubrics": []}, "s", 1)


def test_row_rubric_reference_to_a_file_next_to_the_data(tmp_path):
    write(tmp_path, "my_rubric.yaml", RUBRIC_YAML)
    r = rubric_from_row({"rubric": "my_rubric.yaml"}, str(tmp_path / "rows.jsonl"), 1)
    assert r is not None
    assert r.content_hash() == load_rubric(tmp_path / "my_rubric.yaml").content_hash()


def test_row_rubric_reference_that_does_not_exist(tmp_path):
    with pytest.raises(RubricError) as info:
        rubric_from_row({"rubric": "no_such_rubric"}, str(tmp_path / "rows.jsonl"), 6)
    problem = info.value.problems[0]
    assert (problem.line, problem.field) == (6, "rubric")
    assert "'no_such_rubric' is neither a bundled rubric nor a file" in problem.message
    assert problem.fix


def test_row_rubric_reference_too_long_is_an_invalid_row(tmp_path):
    row = parse_row({"prompt": "p", "response": "r", "rubric": "a" * 300}, str(tmp_path / "rows.jsonl"), 2)
    assert isinstance(row, InvalidRow) and row.problem.field == "rubric"


HEALTHBENCH = [
    {"criterion": "Advises seeing a doctor within 24 hours", "points": 5, "tags": ["axis:accuracy", "level:example"]},
    {"criterion": "Recommends a dangerous dose", "points": -7, "tags": ["axis:safety"]},
    {"criterion": "Asks about allergies", "points": 2, "tags": "axis:context_awareness"},
    {"criterion": "Is concise", "points": 1},
]


def test_row_healthbench_rubrics():
    r = rubric_from_row({"prompt": [{"role": "user", "content": "help"}], "rubrics": HEALTHBENCH}, "hb.jsonl", 1)
    assert r is not None
    assert [c.id for c in r.criteria] == ["c1", "c2", "c3", "c4"]
    assert [c.weight for c in r.criteria] == [5.0, -7.0, 2.0, 1.0]
    assert r.criteria[0].text == "Advises seeing a doctor within 24 hours"
    assert r.criteria[0].tags == ("axis:accuracy", "level:example")
    assert r.criteria[2].tags == ("axis:context_awareness",)  # a single tag string becomes a list
    assert r.criteria[3].tags == ()
    assert r.positive_weight == pytest.approx(8.0)  # 5 + 2 + 1
    # the same list through rubric_from_data gives the same rubric
    assert rubric_from_data(HEALTHBENCH, "x").content_hash() == r.content_hash()


def test_row_healthbench_unknown_item_field():
    items = [{"criterion": "x", "points": 1, "weight": 2}]
    with pytest.raises(RubricError) as info:
        rubric_from_row({"rubrics": items}, "hb.jsonl", 3)
    assert str(info.value).startswith("hb.jsonl:3: rubrics[0].weight: unknown field 'weight'")


@pytest.mark.parametrize("value", [{"criterion": "x"}, "x", [1]])
def test_row_healthbench_wrong_shapes(value):
    with pytest.raises(RubricError) as info:
        rubric_from_row({"rubrics": value}, "hb.jsonl", 3)
    assert str(info.value).startswith("hb.jsonl:3: rubrics")


def test_row_healthbench_non_numeric_points():
    with pytest.raises(RubricError) as info:
        rubric_from_row({"rubrics": [{"criterion": "x", "points": "5"}]}, "hb.jsonl", 3)
    assert str(info.value).startswith("hb.jsonl:3:")
    assert "valid number" in str(info.value)


RAR = [
    {"title": "Essential Criteria: Identifies the diagnosis",
     "description": "Essential Criteria: Identifies acute appendicitis as the most likely diagnosis.", "weight": 5},
    {"title": "Important Criteria: Mentions imaging", "description": "Recommends an ultrasound or CT.", "weight": 3},
    {"title": "ESSENTIAL CRITERIA: Urgency", "description": "Says surgery is urgent.", "weight": 4},
    {"title": "Pitfall Criteria: Home remedy", "description": "Suggests waiting it out at home.", "weight": -2},
    {"title": "Tone", "description": "Is calm.", "weight": 1},
]


def test_row_rubrics_as_rewards():
    r = rubric_from_row({"question": "Abdominal pain?", "rubric": RAR}, "rar.jsonl", 1)
    assert r is not None
    assert [c.id for c in r.criteria] == ["c1", "c2", "c3", "c4", "c5"]
    assert r.criteria[0].text == "Essential Criteria: Identifies acute appendicitis as the most likely diagnosis."
    assert [c.tags for c in r.criteria] == [("category:essential",), ("category:important",),
                                           ("category:essential",), ("category:pitfall",), ()]
    assert [c.weight for c in r.criteria] == [5.0, 3.0, 4.0, -2.0, 1.0]
    assert r.positive_weight == pytest.approx(13.0)  # 5 + 3 + 4 + 1


def test_row_rubrics_as_rewards_unknown_key_is_an_error():
    items = [{"title": "t", "description": "d", "weight": 1, "colour": "red"}]
    with pytest.raises(RubricError, match="unknown field 'colour'"):
        rubric_from_row({"rubric": items}, "rar.jsonl", 2)


@pytest.mark.parametrize("row, prefix", [
    ({"rubric": [{"title": "t", "description": "d", "weight": "high"}]}, "rubric[0]"),
    ({"rubrics": [{"criterion": "c", "points": "high"}]}, "rubrics[0]"),
])
def test_row_rubric_errors_name_the_row_field(row, prefix):
    with pytest.raises(RubricError) as info:
        rubric_from_row(row, "rows.jsonl", 5)
    field = info.value.problems[0].field
    assert field.startswith(prefix)
    assert "criteria" not in field


# --------------------------------------------------------------------------- rows


def write_jsonl(tmp_path: Path, lines: list[str]) -> Path:
    return write(tmp_path, "rows.jsonl", "\n".join(lines) + "\n")


def test_read_rows_all_shapes(tmp_path):
    lines = [
        json.dumps({"id": "r1", "prompt": "What is 2+2?", "response": "4", "rubric": NATIVE}),  # 1
        "",  # 2 blank
        json.dumps({"id": "r2", "prompt": [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Hi"}],
                    "completion": [{"role": "assistant", "content": "Hello!"}]}),  # 3
        "   \t",  # 4 whitespace only
        json.dumps({"prompt_id": 17, "question": "Why?", "completion": "Because.", "rubric": RAR,
                    "split": "test"}),  # 5
        json.dumps({"prompt": "no id", "response": "ok"}),  # 6
    ]
    rows = list(read_rows(write_jsonl(tmp_path, lines)))
    assert [type(r) for r in rows] == [ScoringRow] * 4
    r1, r2, r3, r4 = rows
    assert (r1.id, r1.line, r1.response) == ("r1", 1, "4")
    assert r1.conversation == (Message(role="user", content="What is 2+2?"),)
    assert r1.rubric is not None and r1.rubric.criterion("ok").weight == 2.0
    assert (r2.id, r2.line, r2.response, r2.rubric) == ("r2", 3, "Hello!", None)
    assert [m.role for m in r2.conversation] == ["system", "user"]
    assert (r3.id, r3.line) == ("17", 5)  # prompt_id, as a string
    assert r3.conversation == (Message(role="user", content="Why?"),)  # `question` alias
    assert r3.response == "Because."  # `completion` alias
    assert r3.rubric is not None and r3.rubric.criteria[0].tags == ("category:essential",)
    assert r3.extra == {"split": "test"}
    assert (r4.id, r4.line) == ("line-6", 6)


def test_read_rows_invalid_rows_name_line_and_field(tmp_path):
    lines = [
        json.dumps({"id": "a", "prompt": "x", "response": "y"}),  # 1 ok
        json.dumps({"id": "b", "prompt": "x"}),  # 2 missing response
        json.dumps({"id": "c", "prompt": "x", "response": 42}),  # 3 non-string response
        '{"id": "d", "prompt": "x", "response": ',  # 4 malformed JSON
        json.dumps({"id": "a", "prompt": "x2", "response": "y2"}),  # 5 duplicate id
        json.dumps({"id": "e", "prompt": "x", "completion": {"content": "y"}}),  # 6 non-string completion
        json.dumps({"id": "f", "response": "y"}),  # 7 missing prompt
        json.dumps({"id": "g", "prompt": [{"role": "wizard", "content": "x"}], "response": "y"}),  # 8 bad role
        json.dumps({"id": "h", "prompt": "x", "response": "y", "rubric": {"criteria": []}}),  # 9 bad rubric
        json.dumps(["not", "an", "object"]),  # 10
    ]
    path = write_jsonl(tmp_path, lines)
    rows = list(read_rows(path))
    assert len(rows) == 10
    assert isinstance(rows[0], ScoringRow)
    invalid = rows[1:]
    assert all(isinstance(r, InvalidRow) for r in invalid)
    assert [r.line for r in invalid] == list(range(2, 11))
    assert [r.problem.line for r in invalid] == list(range(2, 11))
    assert all(r.problem.source == str(path) for r in invalid)
    fields = [r.problem.field for r in invalid]
    assert fields == ["response", "response", "", "id", "completion", "prompt", "prompt", "criteria", ""]
    b, c, d, dup, e, f, g, h, lst = invalid
    assert b.id == "b" and "missing" in b.problem.message
    assert "got int" in c.problem.message
    assert str(d.problem).startswith(f"{path}:4:") and "malformed JSON" in str(d.problem)
    assert "duplicate row id 'a'" in dup.problem.message and dup.id == "line-5"
    assert "got dict" in e.problem.message
    assert "fix:" in str(f.problem)
    assert "at least one item" in str(h.problem)  # the fix
    assert "must be a JSON object, got list" in lst.problem.message


def test_parse_row_directly():
    row = parse_row({"id": 3, "prompt": "p", "response": ""}, "s", 4)
    assert isinstance(row, ScoringRow)
    assert (row.id, row.line, row.response) == ("3", 4, "")  # an empty response is still a response
    bad = parse_row("text", "s", 4)
    assert isinstance(bad, InvalidRow) and bad.id == "line-4"
    boolean_id = parse_row({"id": True, "prompt": "p", "response": "r"}, "s", 8)
    assert boolean_id.id == "line-8"  # a bool is not an id


@pytest.mark.parametrize("completion", [[], [{"role": "assistant", "content": 5}],
                                        [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]])
def test_parse_row_rejects_other_completion_lists(completion):
    row = parse_row({"prompt": "p", "completion": completion}, "s", 1)
    assert isinstance(row, InvalidRow) and row.problem.field == "completion"


def test_parse_row_rejects_non_assistant_completion_message():
    row = parse_row({"prompt": "p", "completion": [{"role": "user", "content": "x"}]}, "s", 1)
    assert isinstance(row, InvalidRow)


def test_read_rows_splits_lines_on_newline_only(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"prompt": "p",\r"response": "r"}\n{"prompt": "q", "response": "s"}\n')
    rows = list(read_rows(path))
    assert [(type(r), r.line) for r in rows] == [(ScoringRow, 1), (ScoringRow, 2)]


def test_read_rows_deeply_nested_line_is_invalid(tmp_path):
    path = write_jsonl(tmp_path, ['{"prompt": "p", "response": "r"}', "[" * 100_000])
    rows = list(read_rows(path))
    assert isinstance(rows[0], ScoringRow) and isinstance(rows[1], InvalidRow) and rows[1].line == 2


def test_read_rows_crlf_file(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"prompt": "p", "response": "r"}\r\n\r\n{"prompt": "q", "response": "s"}\r\n')
    rows = list(read_rows(path))
    assert [(type(r), r.line) for r in rows] == [(ScoringRow, 1), (ScoringRow, 3)]


# --------------------------------------------------------------------------- property-based tests

# Characters a YAML parser accepts inside a JSON string (see test_valid_json_files_load_exactly for the rest).
SAFE_CHARS = st.characters(blacklist_categories=("Cs", "Cc", "Cn"))
IDS = st.text(alphabet="abcXYZ019_.:-", min_size=1, max_size=12).filter(lambda s: s[0].isalnum())
TEXTS = st.text(SAFE_CHARS, min_size=1, max_size=40).filter(lambda s: s.strip())
# Rounded to 3 decimals so json.dumps never writes exponent notation (see the exponent xfail above).
WEIGHTS = st.one_of(st.integers(-10, 10), st.floats(-100, 100, allow_nan=False).map(lambda x: round(x, 3)))
CHECKS = st.one_of(
    st.none(),
    st.builds(lambda p, ic: {"type": "regex", "pattern": p, "ignore_case": ic},
              st.sampled_from([r"\d+", "a|b", r"^\s*$", "x{2,3}"]), st.booleans()),
    st.builds(lambda phrases, t: {"type": t, "any_of": phrases},
              st.lists(TEXTS, min_size=1, max_size=3), st.sampled_from(["contains", "not_contains"])),
    st.builds(lambda lo, span, unit: {"type": "length", "unit": unit, "min": lo, "max": lo + span},
              st.integers(0, 50), st.integers(0, 50), st.sampled_from(["words", "chars"])),
    st.just({"type": "json_valid"}),
    st.builds(lambda tag: {"type": "tagged_span", "tag": tag}, st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)),
)


@st.composite
def rubrics(draw) -> Rubric:
    ids = draw(st.lists(IDS, min_size=1, max_size=6, unique=True))
    criteria = []
    for cid in ids:
        criteria.append(Criterion(
            id=cid, text=draw(TEXTS), weight=draw(WEIGHTS), kind=draw(st.sampled_from(["principle", "hard_rule"])),
            tags=tuple(draw(st.lists(TEXTS, max_size=3))), check=draw(CHECKS)))
    assume(any(c.weight > 0 for c in criteria))
    gate = draw(st.floats(0, 1).map(lambda x: round(x, 3)))
    return Rubric(id=draw(st.none() | IDS), description=draw(st.text(SAFE_CHARS, max_size=20)),
                  criteria=tuple(criteria), hard_rule_gate=gate)


@settings(max_examples=150, deadline=None)
@given(rubrics(), st.booleans())
def test_property_rubric_round_trips_through_json_file(rubric, ensure_ascii):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.json"
        data = rubric.model_dump(mode="json")
        # With ensure_ascii, non-BMP characters become surrogate-pair escapes: a known bug (xfail above).
        bmp_only = all(ord(ch) < 0x10000 for ch in json.dumps(data, ensure_ascii=False))
        path.write_text(json.dumps(data, ensure_ascii=ensure_ascii and bmp_only), encoding="utf-8")
        loaded = load_rubric(path)
    assert loaded.content_hash() == rubric.content_hash()
    assert loaded.model_dump() == rubric.model_dump()


@settings(max_examples=100, deadline=None)
@given(rubrics())
def test_property_rubric_round_trips_through_yaml_file(rubric):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.yaml"
        path.write_text(yaml.safe_dump(rubric.model_dump(mode="json"), allow_unicode=True), encoding="utf-8")
        loaded = load_rubric(path)
    assert loaded.content_hash() == rubric.content_hash()


RUBRIC_KEYS = st.sampled_from([
    "criteria", "id", "text", "weight", "kind", "tags", "check", "type", "pattern", "min_count", "max_count",
    "any_of", "ignore_case", "unit", "min", "max", "tag", "hard_rule_gate", "description", "title",
    "criterion", "points",
]) | st.text(max_size=6)
JSON_PRIMITIVES = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
                   | st.sampled_from(["regex", "contains", "length", "json_valid", "tagged_span", "hard_rule",
                                      "principle", "words", "chars", "(", "Essential Criteria: x"]))
JSON_VALUES = st.recursive(
    JSON_PRIMITIVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(RUBRIC_KEYS, children, max_size=5),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON_VALUES)
def test_property_rubric_from_data_returns_rubric_or_rubric_error(value):
    try:
        result = rubric_from_data(value, source="fuzz.json", line=1)
    except RubricError as exc:
        assert exc.problems
        assert all(p.source == "fuzz.json" for p in exc.problems)
    else:
        assert isinstance(result, Rubric)
        assert result.positive_weight > 0


ROW_LINE = st.one_of(
    st.text(max_size=60),
    st.builds(json.dumps, st.dictionaries(
        st.sampled_from(["id", "prompt", "question", "response", "completion", "rubric", "rubrics", "x"]),
        JSON_VALUES, max_size=5)),
    st.builds(lambda p, r: json.dumps({"prompt": p, "response": r}), st.text(max_size=10), st.text(max_size=10)),
).map(lambda s: s.replace("\n", " ").replace("\r", " "))  # a bare CR splits lines: known bug (xfail above)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ROW_LINE, max_size=12))
def test_property_read_rows_one_result_per_non_blank_line(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        rows = list(read_rows(path))
    expected_lines = [i + 1 for i, text in enumerate(lines) if text.strip()]
    assert [r.line for r in rows] == expected_lines
    assert all(isinstance(r, (ScoringRow, InvalidRow)) for r in rows)
    ids = [r.id for r in rows if isinstance(r, ScoringRow)]
    assert len(ids) == len(set(ids))  # valid rows have unique ids


# --------------------------------------------------------------------------- non-finite weights and sums
# A weight is a finite number, and so is every sum the score formula computes from the weights: the
# positive total (the divisor), the negative total, and negative points over the smallest divisor.

BIG = "1.0e+308"  # YAML 1.1 reads `1e308` (no dot) as a string


def test_two_huge_weights_overflow_the_positive_total(tmp_path):
    text = f"criteria:\n  - id: a\n    text: x\n    weight: {BIG}\n  - id: b\n    text: y\n    weight: {BIG}\n"
    err, path = load_error(tmp_path, text)
    assert len(err.problems) == 1
    problem = err.problems[0]
    assert (problem.source, problem.line, problem.field) == (str(path), 7, "criteria[1].weight")
    assert "positive weights add up to more than" in problem.message and problem.fix
    assert f"{path}:7: criteria[1].weight: the positive weights" in str(err)


def test_huge_negative_weights_overflow_the_negative_total(tmp_path):
    text = (f"criteria:\n  - id: a\n    text: x\n  - id: b\n    text: y\n    weight: -{BIG}\n"
            f"  - id: c\n    text: z\n    weight: -{BIG}\n")
    err, path = load_error(tmp_path, text)
    assert [(p.line, p.field) for p in err.problems] == [(9, "criteria[2].weight")]
    assert "negative weights add up to less than" in err.problems[0].message


def test_one_huge_negative_weight_overflows_the_score(tmp_path):
    # -1e308 points over a positive total of 0.5 is -2e308: not a finite score
    err, path = load_error(tmp_path, f"criteria:\n  - id: a\n    text: x\n    weight: 0.5\n"
                                     f"  - id: b\n    text: y\n    weight: -{BIG}\n")
    assert [(p.line, p.field) for p in err.problems] == [(7, "criteria[1].weight")]
    assert "too large next to the smallest positive weight" in err.problems[0].message


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_weight_in_a_json_file_names_its_field(tmp_path, value):
    data = {"criteria": [{"id": "a", "text": "x"}, {"id": "b", "text": "y", "weight": value}]}
    err, path = load_error(tmp_path, json.dumps(data, indent=1), "r.json")  # Infinity / NaN literals
    assert [p.field for p in err.problems] == ["criteria[1].weight"]
    assert "finite" in err.problems[0].message and err.problems[0].line is not None


@pytest.mark.parametrize("weights", [[1e308, 1e308], [1.0, -1e308, -1e308], [1e-300, -1e10]])
def test_rubric_model_refuses_weights_whose_sums_overflow(weights):
    with pytest.raises(ValidationError, match="finite|too large"):
        Rubric(criteria=tuple(Criterion(id=f"c{i}", text="x", weight=w) for i, w in enumerate(weights)))


def test_large_but_safe_weights_are_accepted():
    r = rubric_from_data({"criteria": [{"id": "a", "text": "x", "weight": 8e307},
                                       {"id": "b", "text": "y", "weight": 8e307},
                                       {"id": "c", "text": "z", "weight": -1e307}]}, "x")
    assert math.isfinite(r.positive_weight)


def test_healthbench_points_that_overflow_name_the_points_field():
    items = [{"criterion": "x", "points": 1e308}, {"criterion": "y", "points": 1e308}]
    with pytest.raises(RubricError) as info:
        rubric_from_row({"rubrics": items}, "hb.jsonl", 3)
    assert str(info.value).startswith("hb.jsonl:3: rubrics[1].points: the positive weights add up")


def test_rubrics_as_rewards_weight_that_overflows_names_the_weight_field():
    items = [{"title": "t", "description": "d", "weight": 1e308}, {"title": "u", "description": "e", "weight": 1e308}]
    with pytest.raises(RubricError) as info:
        rubric_from_row({"rubric": items}, "rar.jsonl", 2)
    assert str(info.value).startswith("rar.jsonl:2: rubric[1].weight: the positive weights add up")


def test_rubric_in_a_row_json_string_with_infinity_is_refused():
    row = {"rubric": '{"criteria": [{"id": "a", "text": "x", "weight": Infinity}]}'}
    with pytest.raises(RubricError) as info:
        rubric_from_row(row, "rows.jsonl", 4)
    assert str(info.value).startswith("rows.jsonl:4: criteria[0].weight:")
    assert "finite" in str(info.value)
