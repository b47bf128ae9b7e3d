"""Calibrated thresholds: the fitting rule, the file, CalibratedJudge, make_judge and the CLI."""

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rubricrl.judges as judges_pkg
from rubricrl.judge_tools.agreement import judge_labels, read_labels
from rubricrl.cli import app
from rubricrl.core.messages import as_conversation
from rubricrl.judges import JudgeSpecError, RoutedJudge, make_judge
from rubricrl.judges.base import JudgeRequest, JudgeStats, StatsJudge
from rubricrl.judges.calibration import CalibratedJudge, Calibration, CalibrationError
from rubricrl.judge_tools.calibrate import calibrate, fit_threshold, split_heldout
from rubricrl.judges.exemplar import criterion_key
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status, Verdict, error_verdict

runner = CliRunner()
WARM, ASKS = "The reply is warm.", "The reply asks a question."
TRUE_THRESHOLD = {WARM: 0.3, ASKS: 0.7}


class PJudge(StatsJudge):
    """A stub model judge: the response is "p=<p_met>"; met when p_met >= 0.5 (the uncalibrated rule)."""

    judge_id = "stub-p"

    def __init__(self):
        self.stats = JudgeStats()

    async def judge(self, requests):
        out = []
        for r in requests:
            if r.response == "fail":
                out.append([error_verdict(c.id, self.judge_id, "timeout: stub") for c in r.criteria])
                continue
            p = float(r.response.split("=")[1])
            out.append([Verdict(criterion_id=c.id, status=Status.MET if p >= 0.5 else Status.UNMET, p_met=p,
                                judge_id=self.judge_id) for c in r.criteria])
        return out


def synthetic_rows(n: int = 50, tags: bool = False) -> list[dict]:
    """Per criterion, n replies with p_met on a grid; the human says met exactly when p_met >= the
    criterion's true threshold (0.3 for WARM, 0.7 for ASKS), so the judge at 0.5 is wrong in between."""
    rows = []
    for text, t in TRUE_THRESHOLD.items():
        for i in range(n):
            p = (i + 0.5) / n
            row = {"prompt": f"conv {i % 4}", "response": f"p={p:.4f}", "criterion": text, "label": p >= t}
            if tags:
                row["tags"] = ["warmth" if text == WARM else "questions"]
            rows.append(row)
    return rows


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_fit_threshold_rule_and_ties():
    # p sorted with labels unmet, met, unmet, met; candidates (midpoints) 0.275, 0.525, 0.75:
    # t=0.275 -> TP 2 FP 1 FN 0 TN 1: F1 met 4/5, F1 unmet 2/3 -> 0.733; t=0.525 -> 0.5; t=0.75 -> F1 met 2/3,
    # F1 unmet 4/5 -> 0.733. Tie: 0.275 is closer to 0.5 than 0.75.
    t, score = fit_threshold([0.1, 0.45, 0.6, 0.9], [False, True, False, True])
    assert t == pytest.approx(0.275) and score == pytest.approx((4 / 5 + 2 / 3) / 2)
    # equal distance (0.3 and 0.7): the lower one
    assert fit_threshold([0.2, 0.4, 0.6, 0.8], [False, True, False, True])[0] == pytest.approx(0.3)
    assert fit_threshold([0.2, 0.4], [True, True]) is None  # one class
    assert fit_threshold([0.4, 0.4], [True, False]) is None  # one distinct value
    assert fit_threshold([0.1, 0.2, 0.8, 0.9], [False, False, True, True])[0] == pytest.approx(0.5)  # separable


def test_split_is_stratified_and_seeded(tmp_path):
    labels, _ = read_labels(write_jsonl(tmp_path / "l.jsonl", synthetic_rows()))
    fit, held = split_heldout(labels, 0.3, seed=0)
    assert sorted(fit + held) == list(range(100)) and not set(fit) & set(held)
    for text in TRUE_THRESHOLD:
        for y in (True, False):
            group = [i for i, lab in enumerate(labels) if lab.criterion.text == text and lab.label is y]
            assert sum(i in held for i in group) == int(0.3 * len(group) + 0.5)
    assert split_heldout(labels, 0.3, seed=0) == (fit, held)
    assert split_heldout(labels, 0.3, seed=1) != (fit, held)


def test_calibration_round_trip_flips_verdicts_and_gains(tmp_path):
    labels, _ = read_labels(write_jsonl(tmp_path / "l.jsonl", synthetic_rows()))
    stub = PJudge()
    verdicts = judge_labels(stub, labels)
    cal = calibrate(labels, verdicts, judge_id=stub.judge_id, heldout=0.3, seed=0, min_labels=20)
    # held out per (criterion, class): 35 met -> floor(10.5 + 0.5) = 11, 15 unmet -> 5; fit 100 - 2 * 16 = 68
    assert cal.by == "criterion" and cal.fitted_on == 68
    assert cal.thresholds[criterion_key(WARM)] == pytest.approx(0.3, abs=0.03)
    assert cal.thresholds[criterion_key(ASKS)] == pytest.approx(0.7, abs=0.03)
    assert criterion_key("  the reply IS   warm. ") == criterion_key(WARM)  # keys are normalised text
    before, after = cal.heldout["before"]["balanced_f1"], cal.heldout["after"]["balanced_f1"]
    assert after > before and after > 0.9
    path = tmp_path / "calibration.json"
    cal.save(path)
    loaded = Calibration.load(path)
    assert loaded == cal and json.loads(path.read_text())["version"] == 1

    judge = CalibratedJudge(stub, loaded)
    assert judge.judge_id == f"stub-p#cal-{loaded.content_hash()}"
    warm, asks = Criterion(id="w", text=WARM), Criterion(id="a", text="the reply asks a  question.")
    other = Criterion(id="o", text="Something else.")
    requests = [JudgeRequest(as_conversation("x"), "p=0.4", (warm, asks, other)),
                JudgeRequest(as_conversation("x"), "p=0.6", (warm, asks, other)),
                JudgeRequest(as_conversation("x"), "fail", (warm,))]
    raw = asyncio.run(stub.judge(requests))
    [low, high, failed] = asyncio.run(judge.judge(requests))
    assert [v.status for v in raw[0]] == [Status.UNMET] * 3 and [v.status for v in raw[1]] == [Status.MET] * 3
    assert [v.status for v in low] == [Status.MET, Status.UNMET, Status.MET if 0.4 >= loaded.default else Status.UNMET]
    assert [v.status for v in high] == [Status.MET, Status.UNMET, Status.MET if 0.6 >= loaded.default else Status.UNMET]
    assert low[0].judge_id == judge.judge_id and "calibrated threshold" in low[0].evidence
    assert failed[0] == raw[2][0]  # errors pass through untouched


def test_verdicts_without_p_met_and_prechecks_pass_through():
    cal = Calibration(judge_id="j", default=0.9)
    judge = CalibratedJudge(PJudge(), cal)
    from rubricrl.judges.calibration import recalibrate

    c = Criterion(id="c", text="x")
    no_p = Verdict(criterion_id="c", status=Status.MET, judge_id="j")
    precheck = Verdict(criterion_id="c", status=Status.UNMET, p_met=0.0, judge_id="j", reason="precheck: empty")
    skipped = Verdict(criterion_id="c", status=Status.SKIPPED, judge_id="j", reason="no judge")
    for v in (no_p, precheck, skipped):
        assert recalibrate(v, c, cal, judge.judge_id) is v
    high = Verdict(criterion_id="c", status=Status.MET, p_met=0.8, judge_id="j")
    assert recalibrate(high, c, cal, judge.judge_id).status is Status.UNMET  # 0.8 < the default 0.9


def test_min_labels_fallback_and_per_tag(tmp_path):
    rows = synthetic_rows(tags=True) + [{"prompt": "c", "response": f"p={p}", "criterion": "Rare.", "label": p > 0.5,
                                         "tags": ["rare"]} for p in (0.1, 0.2, 0.6, 0.9)]
    labels, _ = read_labels(write_jsonl(tmp_path / "l.jsonl", rows))
    verdicts = judge_labels(PJudge(), labels)
    by_crit = calibrate(labels, verdicts, judge_id="stub-p", heldout=0.0, min_labels=20)
    assert by_crit.heldout is None and by_crit.fitted_on == 104
    assert criterion_key("Rare.") not in by_crit.thresholds and not by_crit.keys[criterion_key("Rare.")].fitted
    assert by_crit.keys[criterion_key("Rare.")].n == 4

    by_tag = calibrate(labels, verdicts, judge_id="stub-p", by="tag", heldout=0.3, seed=0, min_labels=20)
    assert set(by_tag.thresholds) == {"warmth", "questions"}
    assert by_tag.thresholds["warmth"] == pytest.approx(0.3, abs=0.03)
    assert by_tag.thresholds["questions"] == pytest.approx(0.7, abs=0.03)
    assert by_tag.heldout["after"]["balanced_f1"] > by_tag.heldout["before"]["balanced_f1"]
    tagged = Criterion(id="x", text="Any text at all.", tags=("other", "questions"))
    assert by_tag.threshold_for(tagged) == (by_tag.thresholds["questions"], "tag questions")
    assert by_tag.threshold_for(Criterion(id="y", text="z"))[1] == "default"


def test_calibration_file_validation(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "judge_id": "j", "by": "rubric", "default": 1.5, "thresholds": {}}))
    with pytest.raises(CalibrationError, match="by.*default|default.*by"):
        Calibration.load(bad)
    with pytest.raises(CalibrationError, match="cannot read"):
        Calibration.load(tmp_path / "missing.json")


def test_make_judge_wraps_the_model_judge(tmp_path):
    path = tmp_path / "cal.json"
    Calibration(judge_id="vote:rules|rules", default=0.4).save(path)
    judge = make_judge("vote:rules|rules", calibration=path)
    assert isinstance(judge.model_judge, CalibratedJudge) and "#cal-" in judge.judge_id
    with pytest.raises(JudgeSpecError, match="no model judge"):
        make_judge("rules", calibration=path)
    with pytest.raises(JudgeSpecError, match="not a calibration file"):
        make_judge("vote:rules|rules", calibration=write_jsonl(tmp_path / "x.json", [[1]]))
    other = tmp_path / "other.json"
    Calibration(judge_id="local:somebody-else", default=0.4).save(other)
    with pytest.warns(UserWarning, match="fitted for judge"):
        make_judge("vote:rules|rules", calibration=other)


def test_cli_calibrate_and_score(tmp_path, monkeypatch):
    labels = write_jsonl(tmp_path / "labels.jsonl", synthetic_rows())
    monkeypatch.setattr(judges_pkg, "make_judge", lambda spec, **kw: RoutedJudge(PJudge()))
    out = tmp_path / "calibration.json"
    result = runner.invoke(app, ["judge", "calibrate", "--judge", "stub", "--labels", str(labels), "--out", str(out),
                                 "--heldout", "0.3", "--seed", "0"])
    assert result.exit_code == 0, result.output
    cal = Calibration.load(out)
    assert cal.judge_id == "stub-p" and len(cal.thresholds) == 2
    assert cal.heldout["after"]["balanced_f1"] > cal.heldout["before"]["balanced_f1"]
    assert "held-out agreement" in result.output and "balanced_f1" in result.output
    result = runner.invoke(app, ["judge", "calibrate", "--judge", "stub", "--labels", str(labels), "--out", str(out),
                                 "--by", "rubric"])
    assert result.exit_code == 2 and "--by rubric" in result.output
    monkeypatch.undo()
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"prompt": "p", "response": "r"}])
    result = runner.invoke(app, ["score", "--data", str(rows), "--out", str(tmp_path / "s.jsonl"), "--rubric",
                                 "empathy", "--judge", "rules", "--calibration", str(out)])
    assert result.exit_code == 2 and "no model judge" in result.output
