"""Calibrated thresholds on a judge's `p_met`, fitted on human labels (`rubricrl judge calibrate`).

The rule (docs/agreement.md):
- candidates are the midpoints between consecutive distinct `p_met` values of the fit labels;
  `met` means `p_met >= threshold`;
- the chosen threshold maximises balanced F1 (mean of the met-class and unmet-class F1);
  ties go to the candidate closest to 0.5 (the uncalibrated default), then to the lower one;
- a key (criterion text or tag) gets its own threshold only with at least `min_labels` fit
  labels carrying `p_met` and `MIN_PER_CLASS` of each class; otherwise the global threshold,
  fitted the same way on all fit labels (0.5 when even that is impossible), applies.

`CalibratedJudge(inner, calibration)` re-decides met/unmet from `p_met`; verdicts without
`p_met`, `error`/`skipped` verdicts and empty-response prechecks pass through unchanged.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rubricrl.core.jsonl import read_text
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status, Verdict
from rubricrl.judges.base import Judge, JudgeReport, JudgeRequest, JudgeStats
from rubricrl.judges.exemplar import criterion_key

MIN_PER_CLASS = 3
Threshold = Annotated[float, Field(ge=0.0, le=1.0)]


class CalibrationError(ValueError):
    pass


class KeyInfo(BaseModel):
    """What a key stands for and how its threshold was chosen (for people; not used to decide)."""

    model_config = ConfigDict(extra="forbid")
    name: str  # the criterion text, or the tag
    n: int = Field(ge=0)
    n_met: int = Field(ge=0)
    fitted: bool
    fit_balanced_f1: float | None = None


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = 1
    judge_id: str
    by: Literal["criterion", "tag"] = "criterion"
    default: Threshold = 0.5
    thresholds: dict[str, Threshold] = Field(default_factory=dict)
    fitted_on: int = Field(default=0, ge=0)
    min_labels: int = Field(default=20, ge=1)
    heldout: dict | None = None  # {"n", "before": metrics, "after": metrics} on the held-out labels
    keys: dict[str, KeyInfo] = Field(default_factory=dict)

    def threshold_for(self, criterion: Criterion) -> tuple[float, str]:
        """The threshold for a criterion and where it came from (a key, or `default`)."""
        if self.by == "criterion":
            key = criterion_key(criterion.text)
            return (self.thresholds[key], key) if key in self.thresholds else (self.default, "default")
        for tag in criterion.tags:
            if tag in self.thresholds:
                return self.thresholds[tag], f"tag {tag}"
        return self.default, "default"

    def content_hash(self) -> str:
        """Hash of what decides verdicts (by, default, thresholds): the judge id suffix."""
        payload = json.dumps([self.by, self.default, sorted(self.thresholds.items())], separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        try:
            return cls.model_validate_json(read_text(path))
        except OSError as exc:
            raise CalibrationError(f"{path}: cannot read: {exc}") from None
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(file)'}: {e['msg']}" for e in exc.errors()[:5])
            raise CalibrationError(f"{path}: not a calibration file ({problems}); write one with "
                                   "`rubricrl judge calibrate`") from None

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.model_dump_json(indent=1) + "\n", encoding="utf-8")


def recalibrate(verdict: Verdict, criterion: Criterion, calibration: Calibration, judge_id: str) -> Verdict:
    """The verdict re-decided at the calibrated threshold (see the module docstring for what passes)."""
    if not verdict.decided or verdict.p_met is None or verdict.reason.startswith("precheck"):
        return verdict
    t, source = calibration.threshold_for(criterion)
    status = Status.MET if verdict.p_met >= t else Status.UNMET
    note = f"calibrated threshold {t:.3f} ({source})"
    return verdict.model_copy(update={"status": status, "judge_id": judge_id,
                                      "evidence": f"{verdict.evidence}; {note}" if verdict.evidence else note})


class CalibratedJudge:
    """Wraps a judge; its judge id gains `#cal-<hash>` so caches never mix calibrated verdicts."""

    def __init__(self, inner: Judge, calibration: Calibration):
        self.inner, self.calibration = inner, calibration
        self.judge_id = f"{inner.judge_id}#cal-{calibration.content_hash()}"

    @property
    def stats(self) -> JudgeStats:
        return self.inner.stats

    @property
    def explains(self) -> bool:
        return self.inner.explains

    def report(self) -> JudgeReport:
        """The inner judge's report (cache, endpoints, ...) under the calibrated judge id."""
        return replace(self.inner.report(), judge_id=self.judge_id)

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        answers = await self.inner.judge(requests)
        out = []
        for req, row in zip(requests, answers):
            by_id = {c.id: c for c in req.criteria}
            out.append([recalibrate(v, by_id[v.criterion_id], self.calibration, self.judge_id)
                        if v.criterion_id in by_id else v for v in row])
        return out


# -- fitting -------------------------------------------------------------------------------------


def fit_threshold(p: Sequence[float], y: Sequence[bool]) -> tuple[float, float] | None:
    """(threshold, balanced F1) by the rule above; None with one class or one distinct p_met."""
    p, y = np.asarray(p, dtype=float), np.asarray(y, dtype=bool)
    values = np.unique(p)
    if len(values) < 2 or y.all() or not y.any():
        return None
    candidates = (values[:-1] + values[1:]) / 2
    pos, neg = np.sort(p[y]), np.sort(p[~y])
    tp = len(pos) - np.searchsorted(pos, candidates, side="left")  # met items with p >= t
    fp = len(neg) - np.searchsorted(neg, candidates, side="left")
    fn, tn = len(pos) - tp, len(neg) - fp
    with np.errstate(invalid="ignore", divide="ignore"):
        f1_met = np.where(tp > 0, 2 * tp / (2 * tp + fp + fn), 0.0)
        f1_unmet = np.where(tn > 0, 2 * tn / (2 * tn + fn + fp), 0.0)
    score = (f1_met + f1_unmet) / 2
    best = np.flatnonzero(score >= score.max() - 1e-12)
    pick = min(best, key=lambda i: (abs(candidates[i] - 0.5), candidates[i]))
    return round(float(candidates[pick]), 6), float(score[pick])


def split_heldout(labels: Sequence, fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """Indices (fit, held-out): within each (criterion, label) group, a seeded shuffle and
    floor(fraction * n + 0.5) items held out, so every criterion and class keeps its share."""
    groups: dict[tuple[str, bool], list[int]] = {}
    for i, lab in enumerate(labels):
        groups.setdefault((lab.key, lab.label), []).append(i)
    rng = random.Random(seed)
    fit, held = [], []
    for key in sorted(groups):
        members = groups[key][:]
        rng.shuffle(members)
        k = int(fraction * len(members) + 0.5)
        held += members[:k]
        fit += members[k:]
    return sorted(fit), sorted(held)


def fit_calibration(labels: Sequence, verdicts: Sequence[Verdict], *, judge_id: str, by: str = "criterion",
                    min_labels: int = 20) -> Calibration:
    """Thresholds per key from the decided verdicts with p_met (others are not calibratable)."""
    usable = [(lab, v.p_met) for lab, v in zip(labels, verdicts) if v.decided and v.p_met is not None]
    groups: dict[str, list[tuple[bool, float]]] = {}
    names: dict[str, str] = {}
    for lab, p in usable:
        keys = [lab.key] if by == "criterion" else list(lab.tags)
        for key in keys:
            groups.setdefault(key, []).append((lab.label, p))
            names.setdefault(key, lab.criterion.text if by == "criterion" else key)
    fitted = fit_threshold([p for _, p in usable], [lab.label for lab, _ in usable]) if usable else None
    default = fitted[0] if fitted else 0.5
    thresholds, info = {}, {}
    for key, items in sorted(groups.items()):
        y = [t for t, _ in items]
        n_met = sum(y)
        enough = len(items) >= min_labels and min(n_met, len(y) - n_met) >= MIN_PER_CLASS
        result = fit_threshold([p for _, p in items], y) if enough else None
        if result:
            thresholds[key] = result[0]
        info[key] = KeyInfo(name=names[key], n=len(items), n_met=n_met, fitted=result is not None,
                            fit_balanced_f1=round(result[1], 6) if result else None)
    return Calibration(judge_id=judge_id, by=by, default=default, thresholds=thresholds, fitted_on=len(usable),
                       min_labels=min_labels, keys=info)


def calibrate(labels: Sequence, verdicts: Sequence[Verdict], *, judge_id: str, by: str = "criterion",
              heldout: float = 0.3, seed: int = 0, min_labels: int = 20,
              calibratable=lambda v: True) -> Calibration:
    """Split, fit on the fit part (only verdicts `calibratable` accepts), and measure the held-out
    agreement before (the judge's own decisions) and after (re-decided at the fitted thresholds)."""
    from rubricrl.judge_tools.agreement import group_metrics

    fit, held = split_heldout(labels, heldout, seed) if heldout > 0 else (list(range(len(labels))), [])
    fit_verdicts = [verdicts[i] if calibratable(verdicts[i]) else verdicts[i].model_copy(update={"p_met": None})
                    for i in fit]
    calibration = fit_calibration([labels[i] for i in fit], fit_verdicts, judge_id=judge_id, by=by,
                                  min_labels=min_labels)
    if held:
        held_labels = [labels[i] for i in held]
        before = [verdicts[i] for i in held]
        after = [recalibrate(v, lab.criterion, calibration, v.judge_id) if calibratable(v) else v
                 for lab, v in zip(held_labels, before)]
        per_key: dict[str, list[int]] = {}
        for j, lab in enumerate(held_labels):
            for key in ([lab.key] if by == "criterion" else lab.tags):
                per_key.setdefault(key, []).append(j)
        by_key = {}
        for key, ix in sorted(per_key.items()):
            sub = [held_labels[j] for j in ix]
            by_key[key] = {"n": len(ix), "balanced_f1_before": group_metrics(sub, [before[j] for j in ix])["balanced_f1"],
                           "balanced_f1_after": group_metrics(sub, [after[j] for j in ix])["balanced_f1"]}
        calibration.heldout = {"n": len(held), "fraction": heldout, "seed": seed,
                               "before": group_metrics(held_labels, before),
                               "after": group_metrics(held_labels, after), "by_key": by_key}
    return calibration
