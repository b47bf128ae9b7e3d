"""Fitting calibrated thresholds on human labels (`rubricrl judge calibrate`), with the held-out
agreement before and after. The rule is in `rubricrl.judges.calibration`'s docstring; the
`Calibration` it fits and the `CalibratedJudge` that applies it live there."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from rubricrl.core.verdicts import Verdict
from rubricrl.judge_tools.agreement import group_metrics
from rubricrl.judges.calibration import MIN_PER_CLASS, Calibration, KeyInfo, recalibrate


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
