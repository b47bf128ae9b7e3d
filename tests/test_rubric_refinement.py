"""`rubricrl rubrics refine`: the conservative split rule, the validated LLM splitter, duplicate
dropping with confirmation, correlation re-weighting on a hand-made verdict matrix, the diff and
a refined rubric that loads."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rubricrl.cli import app
from rubricrl.core.messages import as_conversation
from rubricrl.llm.endpoint import ChatResult
from rubricrl.rubrics.loading import load_rubric, rubric_from_data
from rubricrl.rubrics.rows import ScoringRow
from rubricrl.authoring.refine import (
    Change,
    cluster_weights,
    correlations,
    llm_split,
    near_duplicates,
    redundant_clusters,
    refine_rubric,
    split_compound,
    verdict_matrix,
    write_rubric,
)
from rubricrl.core.verdicts import Status, Verdict

runner = CliRunner()


class FakeChat:
    name = "fake"

    def __init__(self, answers: list[str]):
        self.answers, self.calls = list(answers), []

    async def chat(self, messages, *, max_tokens=256, temperature=0.0, seed=None, json_schema=None) -> ChatResult:
        self.calls.append(messages[-1]["content"])
        return ChatResult(text=self.answers.pop(0) if self.answers else "", finish_reason="stop")


@pytest.mark.parametrize("text, parts", [
    ("The reply validates the feeling and asks an open question.",
     ["The reply validates the feeling.", "The reply asks an open question."]),
    ("The reply validates sadness and anger and asks a question.",  # "and" between nouns is not a split
     ["The reply validates sadness and anger.", "The reply asks a question."]),
    ("The response names the feeling; it offers one next step.",
     ["The response names the feeling.", "The response offers one next step."]),
    ("The reply acknowledges the loss, and also invites the person to talk, and never blames them.",
     ["The reply acknowledges the loss.", "The reply invites the person to talk.", "The reply never blames them."]),
    ("The reply is warm and kind.", None),  # adjectives, one quality
    ("The reply mentions friends and names of helplines.", None),  # "names of": a noun
    ("The reply asks about safety when the person mentions harm and offers a hotline.", None),  # a condition
    ("The reply validates the feeling or asks a question.", None),  # an alternative
    ("Validates the feeling and asks a question.", None),  # no subject
    ("The reply names the feeling and asks.", None),  # a one-word clause
])
def test_split_rule_is_conservative(text, parts):
    assert split_compound(text) == parts


def rubric(*criteria: dict, **extra):
    return rubric_from_data({"id": "r", "criteria": list(criteria), **extra}, "test", 1)


def no_embed(texts):
    raise AssertionError("no near-duplicate search expected")


def test_split_divides_the_weight_and_skips_checks_and_pitfalls():
    r = rubric({"id": "both", "text": "The reply validates the feeling and asks an open question.", "weight": 3,
                "tags": ["axis:empathy"], "kind": "hard_rule"},
               {"id": "bad", "text": "The reply blames the person and lectures them.", "weight": -2},
               {"id": "len", "text": "The reply is short and uses plain words.", "weight": 1,
                "check": {"type": "length", "max": 50}})
    fake = lambda texts: np.eye(len(texts))  # nothing is a duplicate
    result = asyncio.run(refine_rubric(r, embed=fake))
    by_id = {c.id: c for c in result.rubric.criteria}
    assert list(by_id) == ["both.1", "both.2", "bad", "len"]
    assert by_id["both.1"].weight == 1.5 and by_id["both.2"].weight == 1.5
    assert by_id["both.1"].kind == "hard_rule" and by_id["both.2"].tags == ("axis:empathy",)
    assert result.changes[:3] == [Change("both", 3.0, None, "split (rule) into both.1, both.2"),
                                  Change("both.1", None, 1.5, "split from both"),
                                  Change("both.2", None, 1.5, "split from both")]
    assert result.changes[3] == Change("bad", -2.0, -2.0, "kept")


def test_split_ids_never_collide_with_existing_ones():
    r = rubric({"id": "a", "text": "The reply names the feeling and asks a question.", "weight": 2},
               {"id": "a.1", "text": "The reply is short.", "weight": 1})
    result = asyncio.run(refine_rubric(r, embed=lambda t: np.eye(len(t))))
    assert [c.id for c in result.rubric.criteria] == ["a.1x", "a.2", "a.1"]


def test_llm_splitter_answer_is_validated():
    text = "The reply is supportive towards the person."
    good = json.dumps({"atomic": False, "parts": ["The reply is supportive.", "The reply addresses the person."]})
    invented = json.dumps({"atomic": False, "parts": ["The reply recommends therapy.", "The reply is supportive."]})
    assert asyncio.run(llm_split(FakeChat([good]), text))[0] == ["The reply is supportive.",
                                                                 "The reply addresses the person."]
    parts, note = asyncio.run(llm_split(FakeChat([invented]), text))
    assert parts is None and "not taken from the criterion" in note
    parts, note = asyncio.run(llm_split(FakeChat(["I think it is fine"]), text))
    assert parts is None and "unusable" in note
    assert asyncio.run(llm_split(FakeChat(['{"atomic": true, "parts": []}']), text)) == (None, "")
    r = rubric({"id": "s", "text": text, "weight": 2})
    result = asyncio.run(refine_rubric(r, splitter=FakeChat([good]), confirm=FakeChat([]),
                                       embed=lambda t: np.eye(len(t))))
    assert [c.id for c in result.rubric.criteria] == ["s.1", "s.2"]
    assert result.changes[0].action == "split (splitter) into s.1, s.2"


def vectors(*angles_deg: float) -> np.ndarray:
    """Unit vectors at the given angles: cosine between two = cos(difference)."""
    return np.array([[math.cos(math.radians(a)), math.sin(math.radians(a))] for a in angles_deg])


DUPES = [{"id": "a", "text": "The reply validates the person's feelings.", "weight": 2, "tags": ["axis:empathy"]},
         {"id": "b", "text": "The reply validates how the person feels.", "weight": 3, "tags": ["src:gen"]},
         {"id": "c", "text": "The reply gives one next step.", "weight": 1},
         {"id": "d", "text": "The reply invalidates the person's feelings.", "weight": -2}]


def test_near_duplicates_same_sign_only_most_similar_first():
    r = rubric(*DUPES)
    embed = lambda texts: vectors(0, 10, 90, 5)  # cos(a,b)=0.985, cos(a,d)=0.996, cos(b,d)=0.996
    pairs = near_duplicates(r.criteria, 0.9, embed)
    assert [(i, j) for i, j, _ in pairs] == [(0, 1)]  # d is a pitfall: not a duplicate of a or b
    assert pairs[0][2] == pytest.approx(math.cos(math.radians(10)))


def test_duplicate_dropped_when_confirmed_keeping_higher_weight_and_merging_tags():
    r = rubric(*DUPES)
    confirm = FakeChat(['{"same": true}'])
    result = asyncio.run(refine_rubric(r, embed=lambda t: vectors(0, 10, 90, 5), confirm=confirm))
    ids = [c.id for c in result.rubric.criteria]
    assert ids == ["b", "c", "d"]
    assert result.rubric.criterion("b").tags == ("src:gen", "axis:empathy")
    assert "Criterion A: The reply validates the person's feelings." in confirm.calls[0]
    changes = {c.id: c for c in result.changes}
    assert changes["a"] == Change("a", 2.0, None, "dropped: duplicate of b (cosine 0.98, confirmed)")
    assert changes["b"].action == "kept over duplicate a, tags merged"


def test_duplicate_kept_when_the_model_says_they_differ_or_answers_nonsense():
    for answer, why in (('{"same": false}', "the model says they differ"), ("hmm", "answer was unusable")):
        result = asyncio.run(refine_rubric(rubric(*DUPES), embed=lambda t: vectors(0, 10, 90, 5),
                                           confirm=FakeChat([answer])))
        assert [c.id for c in result.rubric.criteria] == ["a", "b", "c", "d"]
        assert any(why in n for n in result.notes)


def test_without_confirm_model_embeddings_decide_with_a_note():
    result = asyncio.run(refine_rubric(rubric(*DUPES), embed=lambda t: vectors(0, 10, 90, 5)))
    assert [c.id for c in result.rubric.criteria] == ["b", "c", "d"]
    assert any("embeddings alone" in n for n in result.notes)
    assert {c.id: c for c in result.changes}["a"].action == "dropped: duplicate of b (cosine 0.98)"


def test_phi_correlation_by_hand():
    m = np.array([[1, 1], [1, 1], [1, 0], [0, 0], [0, 0], [0, 0], [np.nan, 1]], dtype=float)
    # over the 6 rows both decided: n11=2, n10=1, n01=0, n00=3 -> phi = (2*3 - 1*0) / sqrt(3*3*2*4)
    assert correlations(m)[0, 1] == pytest.approx(6 / math.sqrt(72))
    assert np.isnan(correlations(m[:4])[0, 1])  # fewer than 5 jointly decided responses
    constant = np.array([[1, 1], [1, 0], [1, 1], [1, 0], [1, 1]], dtype=float)
    assert np.isnan(correlations(constant)[0, 1])  # a criterion that never varies says nothing


# 8 responses; A and B move together, D (a pitfall) is met exactly when A is not, C is independent,
# E is C's opposite (a trade-off, not a duplicate).
A = [1, 1, 1, 1, 0, 0, 0, 0]
MATRIX = {"A": A, "B": A, "C": [1, 0, 1, 0, 1, 0, 1, 0], "D": [1 - x for x in A], "E": [0, 1, 0, 1, 0, 1, 0, 1]}
WEIGHTS = {"A": 3.0, "B": 2.0, "C": 1.0, "D": -1.0, "E": 2.0}


def test_reweight_arithmetic_on_a_known_matrix():
    m = np.array([MATRIX[k] for k in MATRIX], dtype=float).T
    corr = correlations(m)
    assert corr[0, 1] == pytest.approx(1.0) and corr[0, 3] == pytest.approx(-1.0) and corr[0, 2] == pytest.approx(0.0)
    weights = list(WEIGHTS.values())
    clusters = redundant_clusters(corr, weights, 0.8)
    assert clusters == [[0, 1, 3]]  # C-E (corr -1, both positive) is a trade-off, not redundancy
    # cluster |w| total 3 + 2 + 1 = 6, largest 3 -> factor 0.5
    assert cluster_weights(weights, clusters) == [1.5, 1.0, 1.0, -0.5, 2.0]


class MatrixJudge:
    """Verdicts from MATRIX: the response text is the row index; criteria are decided by id."""

    judge_id = "matrix"

    async def judge(self, requests):
        return [[Verdict(criterion_id=c.id, judge_id="matrix",
                         status=Status.MET if MATRIX[c.id][int(r.response)] else Status.UNMET)
                 for c in r.criteria] for r in requests]


def responses(n: int = 8) -> list[ScoringRow]:
    return [ScoringRow(str(i), i + 1, as_conversation("hi"), str(i), None) for i in range(n)]


def refined_with_matrix():
    r = rubric(*({"id": k, "text": f"The reply does thing {k}.", "weight": w} for k, w in WEIGHTS.items()))
    return asyncio.run(refine_rubric(r, embed=lambda t: np.eye(len(t)), judge=MatrixJudge(), responses=responses()))


def test_refine_reweights_from_judged_responses_and_reports_the_diff():
    result = refined_with_matrix()
    assert {c.id: c.weight for c in result.rubric.criteria} == {"A": 1.5, "B": 1.0, "C": 1.0, "D": -0.5, "E": 2.0}
    changes = {c.id: c for c in result.changes}
    assert changes["A"] == Change("A", 3.0, 1.5, "reweighted x0.5 (correlated: A, B, D)")
    assert changes["C"] == Change("C", 1.0, 1.0, "kept")


def test_verdict_matrix_leaves_errors_and_skips_out():
    row = [Verdict(criterion_id=cid, status=status, judge_id="j") for cid, status in
           (("m", Status.MET), ("u", Status.UNMET), ("e", Status.ERROR), ("s", Status.SKIPPED))]
    m = verdict_matrix([row], ["m", "u", "e", "s", "missing"])
    assert m[0, :2].tolist() == [1.0, 0.0] and np.isnan(m[0, 2:]).all()


def test_too_few_responses_means_no_reweighting_and_a_note():
    r = rubric(*({"id": k, "text": f"The reply does thing {k}.", "weight": w} for k, w in WEIGHTS.items()))
    result = asyncio.run(refine_rubric(r, embed=lambda t: np.eye(len(t)), judge=MatrixJudge(), responses=responses(4)))
    assert {c.id: c.weight for c in result.rubric.criteria} == WEIGHTS
    assert any("fewer than 5 decided responses" in n for n in result.notes)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_written_rubric_loads(tmp_path, suffix):
    result = refined_with_matrix()
    path = tmp_path / f"refined{suffix}"
    write_rubric(result.rubric, path)
    loaded = load_rubric(path)
    assert loaded == result.rubric and loaded.id == "r-refined"


@pytest.mark.slow
@pytest.mark.parametrize("splitter", ["llamacpp", "local"])
def test_cli_refine_end_to_end_on_the_embedded_model(tmp_path, splitter):
    source = tmp_path / "rubric.yaml"
    source.write_text(Path(__file__).resolve().parent.parent.joinpath(
        "src/rubricrl/data/rubrics/empathy.yaml").read_text()
        + "  - id: compound\n    text: The reply validates the feeling and asks an open question.\n    weight: 2\n"
        + "  - id: near-copy\n    text: The reply names or validates the feelings the person expressed.\n    weight: 1\n")
    out = tmp_path / "refined.yaml"
    responses_file = Path(__file__).resolve().parent.parent / "examples" / "score" / "rows.jsonl"
    result = runner.invoke(app, ["rubrics", "refine", str(source), "--out", str(out), "--splitter", splitter,
                                 "--responses", str(responses_file), "--judge", "rules"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    refined = load_rubric(out)
    ids = [c.id for c in refined.criteria]
    assert "compound.1" in ids and "compound.2" in ids  # the deterministic rule needs no model
    assert "compound" in result.output and "split (rule) into compound.1, compound.2" in result.output
    assert refined.positive_weight > 0
