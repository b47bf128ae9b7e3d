"""Scoring formulas as plain functions: verdicts -> row score -> run score with a bootstrap CI.

Row score (HealthBench points, also the Rubrics-as-Rewards explicit weighted mean when all
weights are positive): sum of weights of met criteria, negative weights included, divided by
the sum of positive weights. Unclipped per row; the run score is the mean clipped to [0, 1].
Criteria whose verdict is `error` or `skipped` are left out of both sums and counted.

Every number that comes out is finite: a rubric whose weight sums could overflow is refused when
it is built (rubric.weight_sum_problems), and a non-finite result here is an error
(NonFiniteScore), never a NaN or infinity in an output file or a reward.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rubricrl.rubrics.model import Criterion, Rubric
from rubricrl.core.verdicts import Status, Verdict


class NonFiniteScore(ValueError):
    """A score that is not a finite number: the rubric's weights bypassed validation."""


@dataclass(frozen=True)
class RowScore:
    score: float | None  # None when no positive criterion got a met/unmet verdict
    raw_score: float | None  # before the hard-rule gate
    gated: bool
    coverage: float  # share of criteria with a met/unmet verdict
    n_error: int
    n_skipped: int
    tag_scores: dict[str, float] = field(default_factory=dict)
    failed_hard_rules: tuple[str, ...] = ()


def points_score(criteria: Sequence[Criterion], verdicts: Mapping[str, Verdict], *,
                 soft: bool = False) -> float | None:
    """Σ weight of met criteria / Σ positive weight, over criteria with a met/unmet verdict.
    With `soft`, a verdict counts as met in proportion to its `p_met` (expected points)."""
    achieved = possible = 0.0
    for c in criteria:
        v = verdicts.get(c.id)
        if v is None or not v.decided:
            continue
        if c.weight > 0:
            possible += c.weight
        if soft and v.p_met is not None:
            achieved += c.weight * v.p_met
        elif v.status is Status.MET:
            achieved += c.weight
    if not possible > 0:
        return None
    score = achieved / possible
    if not math.isfinite(score):
        raise NonFiniteScore(f"the points score {achieved!r} / {possible!r} is not a finite number; the weights "
                             f"({', '.join(f'{c.id}: {c.weight!r}' for c in criteria)}) are too large to add up "
                             "(load the rubric through rubricrl.rubrics.loading, which refuses them)")
    return score


def failed_hard_rules(criteria: Sequence[Criterion], verdicts: Mapping[str, Verdict]) -> list[str]:
    """Hard rules that failed: a positive one unmet, or a negative (forbidden) one met."""
    failed = []
    for c in criteria:
        v = verdicts.get(c.id)
        if c.kind != "hard_rule" or v is None or not v.decided:
            continue
        if (c.weight >= 0 and v.status is Status.UNMET) or (c.weight < 0 and v.status is Status.MET):
            failed.append(c.id)
    return failed


def tag_scores(criteria: Sequence[Criterion], verdicts: Mapping[str, Verdict]) -> dict[str, float]:
    """The points formula recomputed over each tag's criteria; tags with no scorable positive
    criterion are dropped (HealthBench)."""
    by_tag: dict[str, list[Criterion]] = {}
    for c in criteria:
        for tag in c.tags:
            by_tag.setdefault(tag, []).append(c)
    out = {}
    for tag, items in sorted(by_tag.items()):
        value = points_score(items, verdicts)
        if value is not None:
            out[tag] = value
    return out


def score_row(rubric: Rubric, verdicts: Sequence[Verdict] | Mapping[str, Verdict], *,
              soft: bool = False) -> RowScore:
    """Everything a row's verdicts say: score with the hard-rule gate, tag scores, coverage, counts.
    `soft` scores model verdicts by `p_met` (see points_score); gates still use the met/unmet status."""
    by_id = verdicts if isinstance(verdicts, Mapping) else {v.criterion_id: v for v in verdicts}
    statuses = [by_id[c.id].status if c.id in by_id else Status.SKIPPED for c in rubric.criteria]
    raw = points_score(rubric.criteria, by_id, soft=soft)
    failed = failed_hard_rules(rubric.criteria, by_id)
    gated = bool(failed) and raw is not None
    decided = sum(s in (Status.MET, Status.UNMET) for s in statuses)
    return RowScore(
        score=min(raw, rubric.hard_rule_gate) if gated else raw,  # failing a hard rule never raises a score
        raw_score=raw,
        gated=gated,
        coverage=decided / len(rubric.criteria),
        n_error=sum(s is Status.ERROR for s in statuses),
        n_skipped=sum(s is Status.SKIPPED for s in statuses),
        tag_scores=tag_scores(rubric.criteria, by_id),
        failed_hard_rules=tuple(failed),
    )


@dataclass(frozen=True)
class Estimate:
    """A run-level mean with its bootstrap std and percentile 95% CI over `n` resampled values.

    `units`: how many scores were averaged into those `n` values, when that differs from one per value
    (an eval with several samples per row resamples rows, `n`, of `units` scores); None otherwise.
    Score and eval summaries, comparisons and training evaluations all use this one type."""

    mean: float
    std: float
    ci_low: float
    ci_high: float
    n: int
    units: int | None = None

    def to_dict(self) -> dict:
        """mean, std, ci_low, ci_high, n, and units when it is set."""
        out = {"mean": self.mean, "std": self.std, "ci_low": self.ci_low, "ci_high": self.ci_high, "n": self.n}
        return out if self.units is None else {**out, "units": self.units}


def clipped_mean(scores: Sequence[float]) -> float:
    """HealthBench run score: mean of unclipped row scores, clipped to [0, 1]."""
    return float(np.clip(_scaled(np.mean, _finite(scores)), 0.0, 1.0))


def _finite(scores: Sequence[float]) -> np.ndarray:
    values = np.asarray(scores, dtype=float)
    if values.size == 0:
        raise ValueError("no scored rows to aggregate")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"scores must be finite numbers, got {values[~np.isfinite(values)][:3].tolist()}")
    return values


def _scaled(statistic: Callable[..., np.ndarray], values: np.ndarray, **kwargs) -> np.ndarray:
    """`statistic(values)` for a scale-equivariant statistic (mean, std, percentile), computed on
    `values` scaled into [-1, 1] when the plain computation overflows (sums of scores near 1e308)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = statistic(values, **kwargs)
    if np.all(np.isfinite(out)):
        return out
    scale = float(np.max(np.abs(values)))
    return statistic(values / scale, **kwargs) * scale


def bootstrap(scores: Sequence[float], *, resamples: int = 1000, seed: int = 0, clip: bool = True,
              confidence: float = 0.95) -> Estimate:
    """Bootstrap over rows (seeded). With `clip`, each resample's mean is clipped to [0, 1]."""
    values = _finite([s for s in scores if s is not None])
    rng = np.random.default_rng(seed)
    means = _scaled(np.mean, values[rng.integers(0, values.size, size=(resamples, values.size))], axis=1)
    point = _scaled(np.mean, values)
    if clip:
        means, point = np.clip(means, 0.0, 1.0), float(np.clip(point, 0.0, 1.0))
    tail = (1.0 - confidence) / 2 * 100
    low, high = _scaled(np.percentile, means, q=[tail, 100 - tail])
    estimate = Estimate(float(point), float(_scaled(np.std, means)), float(low), float(high), int(values.size))
    if not all(math.isfinite(x) for x in (estimate.mean, estimate.std, estimate.ci_low, estimate.ci_high)):
        raise NonFiniteScore(f"the bootstrap estimate {estimate} is not finite")  # pragma: no cover - defence
    return estimate
