"""Scoring formulas: points score, hard rules, row scores, run score with bootstrap, run summary."""

from __future__ import annotations

import pytest

from rubricrl.rubrics.model import Criterion, Rubric
from rubricrl.scoring.formulas import (
    Estimate,
    bootstrap,
    clipped_mean,
    failed_hard_rules,
    points_score,
    score_row,
    tag_scores,
)
from rubricrl.scoring.records import RecordVerdict, ResultRecord
from rubricrl.scoring.summary import summarize
from rubricrl.core.verdicts import Status, Verdict, error_verdict, skipped_verdict


def crit(cid: str, weight: float, kind: str = "principle", tags: tuple[str, ...] = ()) -> Criterion:
    return Criterion(id=cid, text=f"criterion {cid}", weight=weight, kind=kind, tags=tags)


def v(cid: str, status: str, reason: str = "") -> Verdict:
    return Verdict(criterion_id=cid, status=Status(status), reason=reason, judge_id="test")


def verdicts(**statuses: str) -> dict[str, Verdict]:
    return {cid: v(cid, status) for cid, status in statuses.items()}


# --------------------------------------------------------------------------- points_score


def test_points_score_all_met_is_one():
    criteria = [crit("a", 3), crit("b", 2)]
    assert points_score(criteria, verdicts(a="met", b="met")) == pytest.approx(1.0)  # (3 + 2) / (3 + 2)


def test_points_score_weighted_mean_of_met():
    criteria = [crit("a", 3), crit("b", 1)]
    assert points_score(criteria, verdicts(a="unmet", b="met")) == pytest.approx(0.25)  # 1 / (3 + 1)


def test_points_score_negative_met_subtracts():
    criteria = [crit("a", 3), crit("b", 2), crit("pit", -3)]
    # (3 + 2 - 3) / (3 + 2) = 0.4 — the negative weight is not in the denominator
    assert points_score(criteria, verdicts(a="met", b="met", pit="met")) == pytest.approx(0.4)
    # pitfall avoided: (3 + 2) / (3 + 2) = 1.0
    assert points_score(criteria, verdicts(a="met", b="met", pit="unmet")) == pytest.approx(1.0)


def test_points_score_can_be_negative_unclipped():
    criteria = [crit("a", 2), crit("pit", -5)]
    assert points_score(criteria, verdicts(a="unmet", pit="met")) == pytest.approx(-2.5)  # -5 / 2


def test_points_score_excludes_error_skipped_and_missing_from_both_sums():
    criteria = [crit("a", 3), crit("b", 2), crit("pit", -1), crit("err", 4), crit("skip", 1), crit("missing", 2)]
    vs = verdicts(a="met", b="unmet", pit="met", err="error", skip="skipped")
    # (3 + 0 - 1) / (3 + 2) = 0.4; err (4), skip (1) and missing (2) are in neither sum
    assert points_score(criteria, vs) == pytest.approx(0.4)
    # errored pitfall is excluded as well: (3) / (3 + 2) = 0.6
    vs2 = verdicts(a="met", b="unmet", pit="error")
    assert points_score(criteria, vs2) == pytest.approx(0.6)


def test_points_score_none_when_no_positive_criterion_decided():
    criteria = [crit("a", 3), crit("pit", -2)]
    assert points_score(criteria, verdicts(a="error", pit="met")) is None
    assert points_score(criteria, {}) is None


def test_zero_weight_criterion_counts_in_neither_sum():
    criteria = [crit("a", 2), crit("zero", 0)]
    assert points_score(criteria, verdicts(a="met", zero="met")) == pytest.approx(1.0)  # (2 + 0) / 2
    assert points_score(criteria, verdicts(a="unmet", zero="met")) == pytest.approx(0.0)  # 0 / 2


# --------------------------------------------------------------------------- failed_hard_rules


def test_positive_hard_rule_unmet_fails_met_passes():
    criteria = [crit("h", 2, "hard_rule"), crit("p", 1)]
    assert failed_hard_rules(criteria, verdicts(h="unmet", p="met")) == ["h"]
    assert failed_hard_rules(criteria, verdicts(h="met", p="unmet")) == []


def test_negative_hard_rule_met_fails_unmet_passes():
    criteria = [crit("forbid", -3, "hard_rule"), crit("p", 1)]
    assert failed_hard_rules(criteria, verdicts(forbid="met", p="met")) == ["forbid"]
    assert failed_hard_rules(criteria, verdicts(forbid="unmet", p="met")) == []


def test_errored_skipped_or_missing_hard_rule_does_not_fail():
    criteria = [crit("h1", 2, "hard_rule"), crit("h2", -2, "hard_rule"), crit("h3", 1, "hard_rule")]
    assert failed_hard_rules(criteria, verdicts(h1="error", h2="skipped")) == []


def test_principles_never_fail_as_hard_rules():
    criteria = [crit("p", 2), crit("pit", -2)]
    assert failed_hard_rules(criteria, verdicts(p="unmet", pit="met")) == []


def test_failed_hard_rules_keeps_rubric_order():
    criteria = [crit("h2", 1, "hard_rule"), crit("h1", 1, "hard_rule"), crit("f", -1, "hard_rule")]
    assert failed_hard_rules(criteria, verdicts(h1="unmet", h2="unmet", f="met")) == ["h2", "h1", "f"]


# --------------------------------------------------------------------------- score_row


def gate_rubric(gate: float = 0.0) -> Rubric:
    return Rubric(criteria=(crit("safe", 2, "hard_rule"), crit("helpful", 3),
                            crit("no_dose", -1, "hard_rule")), hard_rule_gate=gate)


def test_score_row_without_failure_is_the_points_score():
    row = score_row(gate_rubric(), verdicts(safe="met", helpful="unmet", no_dose="unmet"))
    assert row.score == pytest.approx(0.4)  # 2 / (2 + 3)
    assert row.raw_score == pytest.approx(0.4)
    assert row.gated is False
    assert row.failed_hard_rules == ()


def test_score_row_gate_replaces_score_when_positive_hard_rule_fails():
    row = score_row(gate_rubric(gate=0.1), verdicts(safe="unmet", helpful="met", no_dose="unmet"))
    assert row.raw_score == pytest.approx(0.6)  # 3 / (2 + 3)
    assert row.score == pytest.approx(0.1)  # the gate value, not 0.6
    assert row.gated is True
    assert row.failed_hard_rules == ("safe",)


def test_score_row_gate_replaces_score_when_negative_hard_rule_met():
    row = score_row(gate_rubric(), verdicts(safe="met", helpful="met", no_dose="met"))
    assert row.raw_score == pytest.approx(0.8)  # (2 + 3 - 1) / (2 + 3)
    assert row.score == 0.0  # default gate
    assert row.gated is True
    assert row.failed_hard_rules == ("no_dose",)


def test_score_row_errored_hard_rule_does_not_gate():
    row = score_row(gate_rubric(), verdicts(safe="error", helpful="met", no_dose="unmet"))
    assert row.score == pytest.approx(1.0)  # 3 / 3: `safe` left out of both sums
    assert row.gated is False
    assert row.n_error == 1
    assert row.coverage == pytest.approx(2 / 3)  # helpful and no_dose decided out of 3


def test_score_row_coverage_and_counts():
    rubric = Rubric(criteria=(crit("a", 1), crit("b", 1), crit("c", 1), crit("d", 1), crit("e", 1)))
    given = [v("a", "met"), v("b", "unmet"), v("c", "error"), v("d", "skipped")]  # e has no verdict
    row = score_row(rubric, given)  # a sequence of verdicts is accepted as well as a mapping
    assert row.score == pytest.approx(0.5)  # 1 / (1 + 1)
    assert row.coverage == pytest.approx(0.4)  # 2 decided / 5 criteria
    assert row.n_error == 1
    assert row.n_skipped == 2  # d skipped + e missing
    assert row.gated is False


def test_score_row_all_errors_gives_no_score():
    rubric = Rubric(criteria=(crit("a", 1), crit("h", -1, "hard_rule")))
    row = score_row(rubric, verdicts(a="error", h="met"))
    assert row.score is None and row.raw_score is None
    assert row.gated is False  # nothing to gate without a score
    assert row.failed_hard_rules == ("h",)
    assert row.coverage == pytest.approx(0.5)


def test_score_row_tag_scores_drop_tags_without_positive_criterion():
    rubric = Rubric(criteria=(
        crit("a", 4, tags=("axis:accuracy",)),
        crit("b", 2, tags=("axis:accuracy", "axis:completeness")),
        crit("pit", -2, tags=("axis:safety",)),  # safety has only a negative criterion
        crit("err", 3, tags=("axis:context",)),  # context's only criterion errors
    ))
    row = score_row(rubric, verdicts(a="met", b="unmet", pit="met", err="error"))
    assert row.tag_scores == pytest.approx({
        "axis:accuracy": 4 / 6,  # (4 + 0) / (4 + 2)
        "axis:completeness": 0.0,  # 0 / 2
    })
    assert "axis:safety" not in row.tag_scores
    assert "axis:context" not in row.tag_scores
    assert row.score == pytest.approx(2 / 6)  # (4 - 2) / (4 + 2)


def test_tag_scores_include_negative_criteria_of_the_tag():
    criteria = [crit("a", 2, tags=("t",)), crit("pit", -1, tags=("t",))]
    assert tag_scores(criteria, verdicts(a="met", pit="met")) == pytest.approx({"t": 0.5})  # (2 - 1) / 2


# --------------------------------------------------------------------------- HealthBench worked example


HB = Rubric(criteria=(
    crit("see_doctor", 5, tags=("axis:accuracy",)),
    crit("dosage", 3, tags=("axis:completeness",)),
    crit("unsafe_dose", -4, tags=("axis:accuracy",)),
    crit("no_caveats", -2, tags=("axis:safety",)),
))  # Σ positive weight = 5 + 3 = 8


def test_healthbench_worked_example():
    rows = [
        # A: everything right: (5 + 3) / 8 = 1.0
        verdicts(see_doctor="met", dosage="met", unsafe_dose="unmet", no_caveats="unmet"),
        # B: (5 - 2) / 8 = 0.375
        verdicts(see_doctor="met", dosage="unmet", unsafe_dose="unmet", no_caveats="met"),
        # C: both pitfalls, nothing positive: (-4 - 2) / 8 = -0.75
        verdicts(see_doctor="unmet", dosage="unmet", unsafe_dose="met", no_caveats="met"),
    ]
    scores = [score_row(HB, vs).score for vs in rows]
    assert scores == pytest.approx([1.0, 0.375, -0.75])  # row scores are unclipped
    assert scores[2] < 0
    # run score: (1.0 + 0.375 - 0.75) / 3 = 0.625 / 3 = 0.208333...
    assert clipped_mean(scores) == pytest.approx(0.625 / 3)
    estimate = bootstrap(scores, seed=0)
    assert estimate.mean == pytest.approx(0.625 / 3)
    assert estimate.n == 3
    # tag scores of row C: accuracy (0 - 4) / 5 = -0.8; completeness 0 / 3 = 0; safety dropped
    assert score_row(HB, rows[2]).tag_scores == pytest.approx({"axis:accuracy": -0.8, "axis:completeness": 0.0})


def test_clipped_mean_clips_to_unit_interval():
    assert clipped_mean([-0.75, -0.5]) == 0.0  # mean -0.625 -> 0
    assert clipped_mean([1.5, 2.0]) == 1.0  # mean 1.75 -> 1
    assert clipped_mean([0.25, 0.75]) == pytest.approx(0.5)


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_is_seeded():
    scores = [0.1, 0.5, 0.9, 0.3, 0.7]
    first = bootstrap(scores, resamples=500, seed=7)
    second = bootstrap(scores, resamples=500, seed=7)
    assert first == second
    assert isinstance(first, Estimate)
    assert first.mean == pytest.approx(0.5)  # (0.1 + 0.5 + 0.9 + 0.3 + 0.7) / 5
    assert first.n == 5
    assert 0.1 <= first.ci_low <= first.mean <= first.ci_high <= 0.9
    assert first.std > 0


def test_bootstrap_constant_scores_have_zero_spread():
    estimate = bootstrap([0.25] * 6, resamples=200, seed=1)
    assert estimate.mean == 0.25
    assert estimate.std == 0.0
    assert estimate.ci_low == 0.25 and estimate.ci_high == 0.25
    assert estimate.n == 6


def test_bootstrap_clip_above_one():
    est = bootstrap([1.5, 2.0], resamples=200, seed=0)
    # every resample mean lies in [1.5, 2.0], so each clips to 1.0
    assert est.mean == 1.0 and est.ci_low == 1.0 and est.ci_high == 1.0 and est.std == 0.0
    unclipped = bootstrap([1.5, 2.0], resamples=200, seed=0, clip=False)
    assert unclipped.mean == pytest.approx(1.75)  # (1.5 + 2.0) / 2
    assert unclipped.ci_high > 1.0


def test_bootstrap_clip_below_zero():
    est = bootstrap([-0.5, -1.0], resamples=200, seed=0)
    assert est.mean == 0.0 and est.ci_low == 0.0 and est.ci_high == 0.0
    assert bootstrap([-0.5, -1.0], resamples=200, seed=0, clip=False).mean == pytest.approx(-0.75)


def test_bootstrap_skips_none_scores():
    est = bootstrap([0.5, None, 1.0], resamples=100, seed=0)
    assert est.n == 2
    assert est.mean == pytest.approx(0.75)  # (0.5 + 1.0) / 2


@pytest.mark.parametrize("scores", [[], [None, None]])
def test_bootstrap_empty_raises(scores):
    with pytest.raises(ValueError):
        bootstrap(scores)


# --------------------------------------------------------------------------- summarize


def verdict_record(cid: str, status: str, reason: str = "") -> RecordVerdict:
    return RecordVerdict(**dict(v(cid, status, reason)), weight=1.0, kind="principle")


def judged(row_id: str, status: str, score: float | None, coverage: float, gated: bool, verdicts: list,
           tag_scores: dict) -> ResultRecord:
    return ResultRecord(id=row_id, line=1, status=status, score=score, raw_score=score, gated=gated,
                        failed_hard_rules=(), coverage=coverage, n_error=0, n_skipped=0, tag_scores=tag_scores,
                        rubric_hash="h", rubric_source="file", verdicts=verdicts)


RECORDS = [
    judged("r1", "scored", 0.8, 1.0, False, [verdict_record("c1", "met"), verdict_record("c2", "unmet")],
           {"axis:accuracy": 1.0, "axis:safety": 0.5}),
    judged("r2", "scored", 0.2, 0.5, True,
           [verdict_record("c1", "unmet"), verdict_record("c2", "error", "timeout: judge took 30s")],
           {"axis:accuracy": 0.0}),
    judged("r3", "unscored", None, 0.0, False,
           [verdict_record("c1", "unmet"), verdict_record("c2", "error", "timeout: again"),
            verdict_record("c3", "error", "parse error: no verdict"), verdict_record("c3", "error", ""),
            verdict_record("c4", "skipped", "not applicable")], {}),
    ResultRecord(id="r4", line=4, status="invalid", score=None, problem="rows.jsonl:4: response: missing"),
]


def test_summarize_counts_and_rates():
    s = summarize(RECORDS, resamples=200, seed=0)
    assert (s.rows, s.scored, s.unscored, s.invalid) == (4, 2, 1, 1)
    assert s.score is not None
    assert s.score.mean == pytest.approx(0.5)  # (0.8 + 0.2) / 2, scored rows only
    assert s.score.n == 2
    assert s.mean_coverage == pytest.approx(0.5)  # (1.0 + 0.5 + 0.0) / 3; r4 has no coverage
    assert s.gated_rows == 1
    assert s.verdicts == 9  # 2 + 2 + 5
    assert s.errors == 4  # c2 twice, c3 twice
    assert s.error_reasons == {"timeout": 2, "parse error": 1, "unknown": 1}
    c1, c2, c3, c4 = (s.criteria[k] for k in ("c1", "c2", "c3", "c4"))
    assert (c1.met, c1.unmet, c1.error, c1.skipped) == (1, 2, 0, 0)
    assert c1.pass_rate == pytest.approx(1 / 3)  # 1 met / 3 decided
    assert (c2.met, c2.unmet, c2.error) == (0, 1, 1 + 1)
    assert c2.pass_rate == 0.0  # 0 / 1
    assert c3.pass_rate is None  # only errors: nothing decided
    assert c4.skipped == 1 and c4.pass_rate is None
    assert s.tags == pytest.approx({"axis:accuracy": 0.5, "axis:safety": 0.5})  # (1.0 + 0.0) / 2; 0.5 / 1
    assert s.invalid_examples == ["rows.jsonl:4: response: missing"]


def test_summarize_to_dict_has_pass_rates():
    out = summarize(RECORDS, resamples=50, seed=0).to_dict()
    assert out["criteria"]["c1"]["pass_rate"] == pytest.approx(1 / 3)
    assert out["criteria"]["c3"]["pass_rate"] is None
    assert out["score"]["n"] == 2


def test_summarize_clips_run_score():
    records = [judged("a", "scored", -0.75, 1.0, False, [], {}), judged("b", "scored", -0.25, 1.0, False, [], {})]
    s = summarize(records, resamples=50)
    assert s.score is not None and s.score.mean == 0.0  # mean -0.5 clipped to 0


def test_summarize_without_scored_rows():
    s = summarize([RECORDS[3]])
    assert s.score is None
    assert s.mean_coverage is None
    assert (s.rows, s.invalid, s.verdicts, s.errors) == (1, 1, 0, 0)
    assert s.error_reasons == {}


def test_error_and_skipped_verdict_helpers():
    e = error_verdict("c1", "j", "boom")
    k = skipped_verdict("c2", "j", "n/a")
    assert e.status is Status.ERROR and not e.decided and e.reason == "boom"
    assert k.status is Status.SKIPPED and not k.decided
    assert v("c3", "met").decided and v("c3", "unmet").decided


# --------------------------------------------------------------------------- non-finite numbers never come out

import math  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rubricrl.core.problems import RubricError

from rubricrl.rubrics.loading import rubric_from_data  # noqa: E402
from rubricrl.scoring.formulas import NonFiniteScore  # noqa: E402


def test_points_score_refuses_to_return_a_non_finite_score():
    # criteria that never went through Rubric validation: 1e308 + 1e308 overflows, inf / inf is NaN
    huge = [crit("a", 1e308), crit("b", 1e308)]
    with pytest.raises(NonFiniteScore, match="not a finite number"):
        points_score(huge, verdicts(a="met", b="met"))
    with pytest.raises(NonFiniteScore):
        score_row(Rubric.model_construct(criteria=tuple(huge), hard_rule_gate=0.0), verdicts(a="met", b="met"))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_bootstrap_and_clipped_mean_refuse_non_finite_scores(bad):
    with pytest.raises(ValueError, match="finite"):
        bootstrap([0.5, bad])
    with pytest.raises(ValueError, match="finite"):
        clipped_mean([0.5, bad])


def test_bootstrap_of_huge_finite_scores_stays_finite():
    # the sum overflows (-1.5e308 * 2) but the mean does not
    est = bootstrap([-1.5e308, -1.5e308, 1.0], resamples=50, seed=0, clip=False)
    assert all(math.isfinite(x) for x in (est.mean, est.std, est.ci_low, est.ci_high))
    assert est.mean == pytest.approx(-1e308)
    assert clipped_mean([-1.5e308, -1.5e308]) == 0.0


WEIGHTS = st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([1e308, -1e308, 1.7e308, -1.7e308, 5e-324, -5e-324, 1e-300, 0.0, 1.0, -2.0]))
STATUSES = st.sampled_from(["met", "unmet", "error", "skipped", None])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(WEIGHTS, STATUSES, st.one_of(st.none(), st.floats(0.0, 1.0)),
                          st.lists(st.sampled_from(["x", "y"]), max_size=2, unique=True)), min_size=1, max_size=6))
def test_property_an_accepted_rubric_always_gives_finite_scores(items):
    data = {"criteria": [{"id": f"c{i}", "text": "t", "weight": w, "tags": tags}
                         for i, (w, _, _, tags) in enumerate(items)]}
    try:
        rubric = rubric_from_data(data, "fuzz")
    except RubricError:
        return
    given_verdicts = [Verdict(criterion_id=f"c{i}", status=Status(s), judge_id="t", p_met=p)
                      for i, (_, s, p, _) in enumerate(items) if s is not None]
    any_negative = any(c.weight < 0 for c in rubric.criteria)
    for soft in (False, True):
        row = score_row(rubric, given_verdicts, soft=soft)
        for value in (row.score, row.raw_score, *row.tag_scores.values()):
            if value is None:
                continue
            assert math.isfinite(value) and value <= 1.0
            assert any_negative or value >= 0.0  # without pitfalls a score lies in [0, 1]
        assert 0.0 <= row.coverage <= 1.0


def test_summary_file_keeps_its_shape_and_plain_dicts_are_validated_first():
    from rubricrl.evaluation.summary import CriterionOut, EstimateOut, ModelJudgedOut
    from rubricrl.scoring.summary import CriterionStats, ModelCoverage

    assert (EstimateOut, CriterionOut, ModelJudgedOut) == (Estimate, CriterionStats, ModelCoverage)
    s = summarize(RECORDS, resamples=50)
    assert summarize([r.model_dump(mode="json") for r in RECORDS], resamples=50) == s
    out = s.to_dict()
    assert list(out) == ["rows", "scored", "unscored", "invalid", "score", "mean_coverage", "gated_rows", "verdicts",
                         "errors", "error_reasons", "model_judged", "criteria", "tags", "invalid_examples"]
    assert list(out["score"]) == ["mean", "std", "ci_low", "ci_high", "n"]  # no `units` in a score summary
    assert list(out["criteria"]["c1"]) == ["met", "unmet", "error", "skipped", "pass_rate"]
    assert out["model_judged"] == {"verdicts": 9, "decided": 4, "errors": 4, "skipped": 1, "error_rate": 0.5}
    with pytest.raises(ValueError, match="a scored record needs"):
        summarize([{"id": "x", "line": 1, "status": "scored", "score": 1.0}])
