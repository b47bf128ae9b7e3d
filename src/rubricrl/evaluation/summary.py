"""Aggregate eval result records with HealthBench semantics, so numbers compare with published ones.

- Unit score (one row, one sample): Σ points of met criteria (negatives included) / Σ positive
  points (`scoring.score_row`, unclipped).
- Run score: the mean clipped to [0, 1] with a seeded bootstrap (1000 resamples) std and 95% CI.
  The bootstrap resamples rows (prompts), not units: with `--samples N` a row's samples are
  averaged first, because samples of one prompt are not independent. With one sample per row
  this is exactly HealthBench's estimate.
- Criterion tags (HealthBench `axis:*`, `level:*`): the points formula over a tag's criteria per
  unit (`tag_scores` in the record), aggregated like the run score.
- Example tags (HealthBench `theme:*`, ...): the run score over the units whose row has the tag.
- Policy errors and unscored units are left out of the means and counted; `score_errors_as_zero`
  shows the headline if policy errors were scored 0 (a lower bound the reader can check).
- Judge errors are left out of each unit's score; `model_judged` counts the model-judged verdicts
  (criteria without a declarative check) decided, failed and skipped, so a reader sees when the
  score rests on the rule criteria alone (summary.ModelCoverage).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Literal

import numpy as np
from pydantic import BaseModel, computed_field

from rubricrl.scoring.formulas import bootstrap
from rubricrl.scoring.summary import model_coverage


class EstimateOut(BaseModel):
    """A clipped mean with bootstrap std and 95% CI; `n` rows (the resampled unit), `units` scores."""

    mean: float
    std: float
    ci_low: float
    ci_high: float
    n: int
    units: int


class CriterionOut(BaseModel):
    id: str
    text: str = ""
    weight: float
    tags: list[str] = []
    met: int = 0
    unmet: int = 0
    error: int = 0
    skipped: int = 0

    @computed_field
    @property
    def pass_rate(self) -> float | None:
        decided = self.met + self.unmet
        return self.met / decided if decided else None


class ModelJudgedOut(BaseModel):
    """Model-judged verdicts (criteria without a declarative check): decided, errors, skipped;
    error_rate = errors / (decided + errors), None when there are none."""

    verdicts: int = 0
    decided: int = 0
    errors: int = 0
    skipped: int = 0
    error_rate: float | None = None


class EvalSummary(BaseModel):
    units: int  # result lines: (row id, sample) pairs
    rows: int
    samples: int
    status: dict[str, int]  # scored, unscored, invalid, policy_error
    score: EstimateOut | None
    score_errors_as_zero: EstimateOut | None = None  # only when there are policy errors
    mean_coverage: float | None
    gated: int
    criterion_tags: dict[str, EstimateOut]
    example_tags: dict[str, EstimateOut]
    criteria_key: Literal["id", "text"]  # text when rows carry different rubrics (HealthBench)
    criteria: dict[str, CriterionOut]
    judge_ids: list[str]
    judge_verdicts: int
    judge_errors: int
    judge_error_reasons: dict[str, int]
    model_judged: ModelJudgedOut = ModelJudgedOut()
    policy_errors: int
    policy_error_reasons: dict[str, int]
    invalid_examples: list[str]


def row_estimate(values: Iterable[tuple[str, float]], *, resamples: int = 1000, seed: int = 0,
                 clip: bool = True) -> EstimateOut | None:
    """Bootstrap estimate over rows of (row id, value) pairs; a row's values are averaged first."""
    by_row: dict[str, list[float]] = defaultdict(list)
    for row_id, value in values:
        by_row[row_id].append(value)
    if not by_row:
        return None
    means = [float(np.mean(v)) for v in by_row.values()]
    e = bootstrap(means, resamples=resamples, seed=seed, clip=clip)
    return EstimateOut(mean=e.mean, std=e.std, ci_low=e.ci_low, ci_high=e.ci_high, n=e.n,
                       units=sum(len(v) for v in by_row.values()))


def criteria_key_mode(records: list[dict]) -> Literal["id", "text"]:
    """Criteria are keyed by id when every judged record has the same rubric, else by their text
    (per-row rubrics reuse ids like c1, c2 for different criteria)."""
    hashes = {r.get("rubric_hash") for r in records if r.get("verdicts")}
    return "id" if len(hashes) <= 1 else "text"


def criterion_key(verdict: dict, mode: str) -> str:
    return (verdict.get("text") or verdict["criterion_id"]) if mode == "text" else verdict["criterion_id"]


def _reason(text: str) -> str:
    return (text or "").split(":", 1)[0][:80] or "unknown"


def summarize_eval(records: list[dict], *, samples: int = 1, resamples: int = 1000, seed: int = 0) -> EvalSummary:
    """The summary.json of an eval directory from its result records."""
    status = Counter(r["status"] for r in records)
    scored = [r for r in records if r["status"] == "scored"]
    tag_values: dict[str, list[tuple[str, float]]] = defaultdict(list)
    theme_values: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for r in scored:
        for tag, value in (r.get("tag_scores") or {}).items():
            tag_values[tag].append((r["id"], value))
        for tag in r.get("example_tags") or []:
            theme_values[tag].append((r["id"], r["score"]))
    mode = criteria_key_mode(records)
    criteria: dict[str, CriterionOut] = {}
    judge_reasons: Counter = Counter()
    judge_ids: set[str] = set()
    verdicts = 0
    for r in records:
        for v in r.get("verdicts") or []:
            verdicts += 1
            judge_ids.add(v.get("judge_id", "?"))
            key = criterion_key(v, mode)
            c = criteria.setdefault(key, CriterionOut(id=v["criterion_id"], text=v.get("text", ""),
                                                      weight=v.get("weight", 0.0), tags=v.get("tags") or []))
            setattr(c, v["status"], getattr(c, v["status"]) + 1)
            if v["status"] == "error":
                judge_reasons[_reason(v.get("reason", ""))] += 1
    policy = [r for r in records if r["status"] == "policy_error"]
    coverage = [r["coverage"] for r in records if "coverage" in r]
    with_errors = [(r["id"], r["score"]) for r in scored] + [(r["id"], 0.0) for r in policy]
    return EvalSummary(
        units=len(records), rows=len({r["id"] for r in records}), samples=samples,
        status={k: status[k] for k in ("scored", "unscored", "invalid", "policy_error")},
        score=row_estimate(((r["id"], r["score"]) for r in scored), resamples=resamples, seed=seed),
        score_errors_as_zero=row_estimate(with_errors, resamples=resamples, seed=seed) if policy else None,
        mean_coverage=sum(coverage) / len(coverage) if coverage else None,
        gated=sum(1 for r in records if r.get("gated")),
        criterion_tags={t: row_estimate(v, resamples=resamples, seed=seed) for t, v in sorted(tag_values.items())},
        example_tags={t: row_estimate(v, resamples=resamples, seed=seed) for t, v in sorted(theme_values.items())},
        criteria_key=mode, criteria=criteria,
        judge_ids=sorted(judge_ids), judge_verdicts=verdicts, judge_errors=sum(judge_reasons.values()),
        judge_error_reasons=dict(judge_reasons.most_common()),
        model_judged=ModelJudgedOut(**model_coverage(records).to_dict()),
        policy_errors=len(policy), policy_error_reasons=dict(Counter(_reason(r.get("problem", "")) for r in policy)),
        invalid_examples=list(dict.fromkeys(r.get("problem", "") for r in records if r["status"] == "invalid"))[:10],
    )
