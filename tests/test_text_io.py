"""Text files in and out (issue 16): a UTF-8 BOM is accepted wherever rubricrl reads a user file,
and every JSONL file rubricrl writes keeps one record per line even when its text holds Unicode
line separators (U+2028, U+0085, ...), so a resume reads it back.

Unit tests of `rubricrl.core.jsonl`, then the CLI end to end (`score` and `eval` twice), then one user
file of each kind with a BOM.
"""

import json
import tempfile
from pathlib import Path

import pytest
from chat_stub import ChatStub
from hypothesis import given, settings
from hypothesis import strategies as st
from rubric_texts import RULES_RUBRIC
from typer.testing import CliRunner

from rubricrl.cli import app
from rubricrl.core.jsonl import LINE_SEPARATORS, append_lines, dumps_line, iter_jsonl, read_jsonl, read_text, write_jsonl

runner = CliRunner()
BOM = "\ufeff"
# every character str.splitlines() splits on, plus CR LF
SEPARATORS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
NASTY = "a\u2028b\x85c\u2029d\re\x0bf\x0cg\x1ch\x1di\x1ej\r\nk\nl"


def test_separators_are_the_ones_splitlines_uses():
    assert set(LINE_SEPARATORS) == {c for c in map(chr, range(0x3000)) if len(("x" + c + "x").splitlines()) == 2}


@pytest.mark.parametrize("sep", list(SEPARATORS))
def test_dumps_line_escapes_every_line_separator(sep):
    obj = {f"k{sep}": [f"a{sep}b", sep]}
    line = dumps_line(obj)
    assert not set(line) & set(SEPARATORS)
    assert line.splitlines() == [line]
    assert json.loads(line) == obj


def test_dumps_line_is_json_dumps_otherwise():
    obj = {"id": "r1", "text": "héllo ✓ 日本", "score": 0.5, "none": None, "list": [1, 2]}
    assert dumps_line(obj) == json.dumps(obj, ensure_ascii=False)


def test_dumps_line_refuses_nan_unless_asked():
    with pytest.raises(ValueError):
        dumps_line({"loss": float("nan")})
    assert json.loads(dumps_line({"loss": float("inf")}, allow_nan=True))["loss"] == float("inf")


def test_lone_surrogates_are_escaped_so_the_line_is_valid_utf8(tmp_path):
    obj = {"text": "bad \ud800 half \udfff"}
    line = dumps_line(obj)
    line.encode("utf-8")  # would raise on a raw lone surrogate
    path = write_jsonl(tmp_path / "s.jsonl", [obj])
    assert read_jsonl(path) == [obj]


def test_iter_jsonl_bom_crlf_blank_lines_and_raw_separators(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes((BOM + '{"a": 1}\r\n\n  \r\n{"b": "x\u2028y\x85z",\r"w": 2}\n{"c": 3}').encode("utf-8"))
    lines = list(iter_jsonl(path))
    assert [n for n, _ in lines] == [1, 4, 5]  # a bare \r (whitespace between JSON tokens) ends no line
    assert [json.loads(t) for _, t in lines] == [{"a": 1}, {"b": "x\u2028y\x85z", "w": 2}, {"c": 3}]
    assert lines[0][1] == '{"a": 1}'  # no BOM, no CR


def test_iter_jsonl_names_file_and_line_of_bad_utf8(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": "\xff"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid UTF-8"):
        list(iter_jsonl(path))


def test_read_jsonl_names_file_and_line_of_bad_json(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n\n{"a": \n')
    with pytest.raises(ValueError, match=r"r.jsonl:3: malformed JSON"):
        read_jsonl(path)


def test_read_text_drops_a_bom(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_bytes((BOM + "a: 1\n").encode("utf-8"))
    assert read_text(path) == "a: 1\n"


def test_append_lines_and_write_jsonl(tmp_path):
    path = tmp_path / "o.jsonl"
    append_lines(path, [{"t": NASTY}])
    append_lines(path, [{"t": 2}, {"t": 3}])
    assert read_jsonl(path) == [{"t": NASTY}, {"t": 2}, {"t": 3}]
    assert len(path.read_text(encoding="utf-8").splitlines()) == 3
    write_jsonl(path, [{"t": 4}])
    assert read_jsonl(path) == [{"t": 4}]


TEXT = st.text(st.one_of(st.characters(), st.sampled_from(SEPARATORS + BOM + "\udc80")))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_any_json_value_round_trips_as_exactly_one_line(value):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "one.jsonl"
        path.write_bytes((dumps_line(value) + "\n").encode("utf-8"))
        lines = list(iter_jsonl(path))
        assert len(lines) == 1 and lines[0][0] == 1
        assert json.loads(lines[0][1]) == value
        assert len(path.read_text(encoding="utf-8").splitlines()) == 1  # other tools see one line too


# -- end to end -----------------------------------------------------------------------------------

TAGGED = [{"id": "sorry", "text": "Says sorry.", "weight": 1, "tags": ["care\u2028tag"],
           "check": {"type": "contains", "any_of": ["sorry"]}}]
# the separators reach the output through the ids (and a tag): the text itself is not copied there
ROWS = [
    {"id": "a\u20281", "prompt": "I lost my job.\u2028Today.", "response": "I'm so sorry.\u2028That is a shock."},
    {"id": "b\x851", "prompt": "Next\x85line", "response": "Sorry\x85to hear it.", "rubric": TAGGED},
    {"id": "c\u20291", "prompt": "Para\u2029graph", "response": "Okay.\u2029"},
]


def jsonl_bytes(rows: list, bom: bool = False) -> bytes:
    # written as other tools do: non-ASCII raw, U+2028/U+0085/U+2029 not escaped
    return ((BOM if bom else "") + "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)).encode("utf-8")


@pytest.fixture
def rubric_file(tmp_path):
    path = tmp_path / "rubric.yaml"
    path.write_text(RULES_RUBRIC, encoding="utf-8")
    return path


def test_score_with_line_separators_in_text_resumes_cleanly(tmp_path, rubric_file):
    data = tmp_path / "rows.jsonl"
    data.write_bytes(jsonl_bytes(ROWS))
    out = tmp_path / "out.jsonl"
    args = ["score", "--data", str(data), "--out", str(out), "--rubric", str(rubric_file), "--judge", "rules"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3
    records = read_jsonl(out)
    assert [(r["id"], r["status"]) for r in records] == [(row["id"], "scored") for row in ROWS]
    assert records[0]["score"] == 1.0  # sorry + short + no calm down: the separators did not split the text
    assert records[1]["tag_scores"] == {"care\u2028tag": 1.0}
    before = out.read_bytes()
    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.output
    assert "not a rubricrl result line" not in second.output
    assert "skipped 3" in second.output and out.read_bytes() == before


def test_eval_with_line_separators_in_prompts_and_replies_resumes_cleanly(tmp_path, rubric_file):
    stub = ChatStub({"r2:": "Sorry\u2028about\x85that\u2029."})  # r1 is echoed: its prompt's separators come back
    try:
        data = tmp_path / "rows.jsonl"
        data.write_bytes(jsonl_bytes([{"id": "r1", "prompt": "r1: one\u2028two\x85three\u2029four"},
                                      {"id": "r2", "prompt": "r2: I lost my job."}]))
        out = tmp_path / "ev"
        args = ["eval", "--policy", stub.policy_spec(), "--data", str(data), "--out", str(out), "--rubric",
                str(rubric_file), "--judge", "rules"]
        first = runner.invoke(app, args)
        assert first.exit_code == 0, first.output
        for name in ("generations.jsonl", "results.jsonl"):
            assert len((out / name).read_text(encoding="utf-8").splitlines()) == 2, name
        gens = {g["id"]: g["text"] for g in read_jsonl(out / "generations.jsonl")}
        assert gens == {"r1": "Echo: r1: one\u2028two\x85three\u2029four", "r2": "Sorry\u2028about\x85that\u2029."}
        calls = stub.policy_calls
        second = runner.invoke(app, args)
        assert second.exit_code == 0, second.output
        assert "generated 0 now (2 saved before), judged 0 now (2 saved before)" in second.output
        assert stub.policy_calls == calls
    finally:
        stub.close()


# -- a BOM at the start of a user file -------------------------------------------------------------


def test_jsonl_data_with_a_bom_scores_row_one(tmp_path, rubric_file):
    data = tmp_path / "rows.jsonl"
    data.write_bytes(jsonl_bytes(ROWS, bom=True))
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["score", "--data", str(data), "--out", str(out), "--rubric", str(rubric_file),
                                 "--judge", "rules"])
    assert result.exit_code == 0, result.output
    records = read_jsonl(out)
    assert [(r["id"], r["status"]) for r in records] == [(row["id"], "scored") for row in ROWS]
    lint = runner.invoke(app, ["rubrics", "lint", str(data)])
    assert lint.exit_code == 0 and "ok" in lint.output, lint.output


def test_json_and_yaml_rubrics_with_a_bom_pass_lint(tmp_path):
    import yaml

    data = yaml.safe_load(RULES_RUBRIC)
    as_json, as_yaml = tmp_path / "r.json", tmp_path / "r.yaml"
    as_json.write_bytes((BOM + json.dumps(data, indent=1)).encode("utf-8"))
    as_yaml.write_bytes((BOM + RULES_RUBRIC).encode("utf-8"))
    result = runner.invoke(app, ["rubrics", "lint", str(as_json), str(as_yaml)])
    assert result.exit_code == 0, result.output
    assert result.output.count("ok ") == 2


def test_persona_jsonl_with_a_bom_loads(tmp_path):
    from rubricrl.dialogue.persona import load_personas

    row = {"id": "p1", "name": "Sam", "background": "teacher", "situation": "lost a job\u2028yesterday",
           "hidden_need": "to be heard", "first_message": "Hi.\u2029I feel bad."}
    path = tmp_path / "personas.jsonl"
    path.write_bytes(jsonl_bytes([row, {**row, "id": "p2"}], bom=True))
    loaded = load_personas(path)
    assert loaded.problems == []
    assert [p.id for p in loaded.personas] == ["p1", "p2"] and loaded.personas[0].situation == row["situation"]


def test_yaml_config_persona_and_taxonomy_with_a_bom_load(tmp_path):
    """PyYAML already skipped a leading BOM: a guard that it stays so through `read_text`."""
    from rubricrl.dialogue.persona import load_personas
    from rubricrl.tactics.taxonomy import load_taxonomy
    from rubricrl.train.config import load_config

    config = tmp_path / "train.yaml"
    config.write_bytes((BOM + "model: tiny\noutput_dir: runs/bom\n").encode("utf-8"))
    assert load_config(config).output_dir == "runs/bom"
    personas = tmp_path / "p.yaml"
    personas.write_bytes((BOM + "- id: p1\n  name: Sam\n  background: b\n  situation: s\n  hidden_need: h\n"
                          "  first_message: Hi.\n").encode("utf-8"))
    loaded = load_personas(personas)
    assert [p.id for p in loaded.personas] == ["p1"] and loaded.problems[:1] == []
    taxonomy = tmp_path / "t.yaml"
    taxonomy.write_bytes((BOM + "name: two\ntactics:\n  - name: a\n  - name: b\n").encode("utf-8"))
    assert load_taxonomy(taxonomy).names == ["a", "b"]


def _labels(path: Path) -> object:
    from rubricrl.judge_tools.agreement import read_labels

    labels, problems = read_labels(path)
    assert problems == []
    return [lab.id for lab in labels]


def _probes(path: Path) -> object:
    from rubricrl.judge_tools.probes import file_items
    from rubricrl.rubrics.loading import rubric_from_data

    items, problems = file_items(path, rubric=rubric_from_data([{"id": "x", "text": "Kind.", "weight": 1}], "t"))
    assert problems == []
    return [i.id for i in items]


def _exemplar_labels(path: Path) -> object:
    from rubricrl.judge_tools.fit import collect_examples
    from rubricrl.rubrics.loading import rubric_from_data

    examples, _ = collect_examples(rubric_from_data([{"id": "x", "text": "Kind.", "weight": 1}], "t"), path)
    return [(e.response, e.label) for e in examples["x"]]


def _tactic_conversations(path: Path) -> object:
    from rubricrl.tactics.labeling import conversation_tactics

    return conversation_tactics(path)


def _tactic_examples(path: Path) -> object:
    from rubricrl.tactics.labeling import fit_examples

    return fit_examples(path)[:2]


def _generation_rows(path: Path) -> object:
    from rubricrl.authoring.generate import read_generation_rows

    return [(type(r).__name__, r.id) for r in read_generation_rows(path)]


def _read_rows(path: Path) -> object:
    from rubricrl.rubrics.rows import read_rows

    return [(type(r).__name__, r.id) for r in read_rows(path)]


BOM_FILES = {
    "data rows": (_read_rows, [{"id": "r1", "prompt": "p\u2028q", "response": "r"}],
                  [("ScoringRow", "r1")]),
    "agreement labels": (_labels, [{"id": "l1", "prompt": "p\u2028q", "response": "r\x85s", "criterion": "Kind.",
                                    "label": True}], ["l1"]),
    "probe file": (_probes, [{"id": "q1", "prompt": "p\u2028q", "response": "r"}], ["q1"]),
    "exemplar labels": (_exemplar_labels, [{"criterion_id": "x", "response": "r\u2029s", "label": True}],
                        [("r s", True)]),  # whitespace is normalised, U+2029 included
    "tactic conversations": (_tactic_conversations, [{"id": "c1", "messages": [
        {"role": "user", "content": "u\u2028v"}, {"role": "assistant", "content": "a", "tactics": ["t"]}]}],
                             [[{"t"}]]),
    "tactic examples": (_tactic_examples, [{"text": "x\u2028y", "tactics": ["t"]}, {"text": "z", "tactic": "u"}],
                        None),
    "generation rows": (_generation_rows, [{"id": "g1", "prompt": "p\u2028q"}], [("GenerationRow", "g1")]),
}


@pytest.mark.parametrize("kind", list(BOM_FILES))
def test_user_jsonl_files_with_a_bom_and_raw_separators_load(tmp_path, kind):
    read, rows, expected = BOM_FILES[kind]
    path = tmp_path / "file.jsonl"
    path.write_bytes(jsonl_bytes(rows, bom=True))
    got = read(path)
    if expected is not None:
        assert got == expected
    else:
        examples, names = got
        assert [e.text for e in examples] == ["x\u2028y", "z"] and names == ["t", "u"]


def test_calibration_file_with_a_bom_loads(tmp_path):
    from rubricrl.judges.calibration import Calibration

    path = tmp_path / "cal.json"
    Calibration(judge_id="j", default=0.4).save(path)
    path.write_bytes(BOM.encode("utf-8") + path.read_bytes())
    assert Calibration.load(path).default == 0.4


def test_training_run_files_with_separators_read_back(tmp_path):
    from rubricrl.reports.training import read_jsonl as report_read_jsonl

    (tmp_path / "samples.jsonl").write_bytes(jsonl_bytes([{"step": 1, "completion": "a\u2028b"},
                                                          {"step": 2, "completion": "c\x85d"}]))
    assert [r["completion"] for r in report_read_jsonl(tmp_path / "samples.jsonl")] == ["a\u2028b", "c\x85d"]
