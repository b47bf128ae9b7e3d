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
  score rests on the rule criteria alone (scoring.summary.ModelCoverage).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel

from rubricrl.scoring.formulas import Estimate, bootstrap
from rubricrl.scoring.records import EvalRecord, RecordVerdict, as_records
from rubricrl.scoring.summary import CriterionStats, ModelCoverage, error_reason, mean_coverage, model_coverage, tally

EstimateOut = Estimate  # the old name: one estimate type for score and eval summaries (scoring/formulas.py)
CriterionOut = CriterionStats  # the old names of the shared summary parts (scoring/summary.py)
ModelJudgedOut = ModelCoverage


class EvalSummary(BaseModel):
    """The summary.json of an eval directory. Its parts are the score summary's (Estimate,
    CriterionStats, ModelCoverage); the top level keeps its own keys, which differ from a score
    summary's where the numbers differ (units and rows, tags as bootstrap estimates)."""

    units: int  # result lines: (row id, sample) pairs
    rows: int
    samples: int
    status: dict[str, int]  # scored, unscored, invalid, policy_error
    score: Estimate | None
    score_errors_as_zero: Estimate | None = None  # only when there are policy errors
    mean_coverage: float | None
    gated: int
    criterion_tags: dict[str, Estimate]
    example_tags: dict[str, Estimate]
    criteria_key: Literal["id", "text"]  # text when rows carry different rubrics (HealthBench)
    criteria: dict[str, CriterionStats]
    judge_ids: list[str]
    judge_verdicts: int
    judge_errors: int
    judge_error_reasons: dict[str, int]
    model_judged: ModelCoverage = ModelCoverage()
    policy_errors: int
    policy_error_reasons: dict[str, int]
    invalid_examples: list[str]


def row_estimate(values: Iterable[tuple[str, float]], *, resamples: int = 1000, seed: int = 0,
                 clip: bool = True) -> Estimate | None:
    """Bootstrap estimate over rows of (row id, value) pairs; a row's values are averaged first."""
    by_row: dict[str, list[float]] = defaultdict(list)
    for row_id, value in values:
        by_row[row_id].append(value)
    if not by_row:
        return None
    means = [float(np.mean(v)) for v in by_row.values()]
    e = bootstrap(means, resamples=resamples, seed=seed, clip=clip)
    return Estimate(mean=e.mean, std=e.std, ci_low=e.ci_low, ci_high=e.ci_high, n=e.n,
                    units=sum(len(v) for v in by_row.values()))


def criteria_key_mode(records: Sequence[EvalRecord]) -> Literal["id", "text"]:
    """Criteria are keyed by id when every judged record has the same rubric, else by their text
    (per-row rubrics reuse ids like c1, c2 for different criteria)."""
    hashes = {r.rubric_hash for r in records if r.verdicts}
    return "id" if len(hashes) <= 1 else "text"


def criterion_key(verdict: RecordVerdict, mode: str) -> str:
    return (verdict.criterion_text or verdict.criterion_id) if mode == "text" else verdict.criterion_id


def summarize_eval(records: Sequence[EvalRecord | dict], *, samples: int = 1, resamples: int = 1000,
                   seed: int = 0) -> EvalSummary:
    """The summary.json of an eval directory from its result records (plain dicts from `read_results`
    are validated first)."""
    records = as_records(records, EvalRecord)
    status = Counter(r.status for r in records)
    scored = [r for r in records if r.status == "scored"]
    tag_values: dict[str, list[tuple[str, float]]] = defaultdict(list)
    theme_values: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for r in scored:
        for tag, value in r.tag_scores.items():
            tag_values[tag].append((r.id, value))
        for tag in r.example_tags:
            theme_values[tag].append((r.id, r.score))
    mode = criteria_key_mode(records)
    counted = tally(records, key=lambda v: criterion_key(v, mode))
    policy = [r for r in records if r.status == "policy_error"]
    with_errors = [(r.id, r.score) for r in scored] + [(r.id, 0.0) for r in policy]
    return EvalSummary(
        units=len(records), rows=len({r.id for r in records}), samples=samples,
        status={k: status[k] for k in ("scored", "unscored", "invalid", "policy_error")},
        score=row_estimate(((r.id, r.score) for r in scored), resamples=resamples, seed=seed),
        score_errors_as_zero=row_estimate(with_errors, resamples=resamples, seed=seed) if policy else None,
        mean_coverage=mean_coverage(records),
        gated=sum(1 for r in records if r.gated),
        criterion_tags={t: row_estimate(v, resamples=resamples, seed=seed) for t, v in sorted(tag_values.items())},
        example_tags={t: row_estimate(v, resamples=resamples, seed=seed) for t, v in sorted(theme_values.items())},
        criteria_key=mode, criteria=counted.criteria,
        judge_ids=sorted(counted.judge_ids), judge_verdicts=counted.verdicts, judge_errors=counted.errors,
        judge_error_reasons=dict(counted.error_reasons.most_common()),
        model_judged=model_coverage(records),
        policy_errors=len(policy), policy_error_reasons=dict(Counter(error_reason(r.problem) for r in policy)),
        invalid_examples=list(dict.fromkeys(r.problem or "" for r in records if r.status == "invalid"))[:10],
    )
