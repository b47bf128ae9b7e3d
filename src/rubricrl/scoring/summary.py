"""Run summary computed from result records: mean with bootstrap CI, pass rates, errors, coverage.

`ModelCoverage` says how much of the model-judged part of the rubrics a score rests on: criteria
without a declarative check are decided by a model (or exemplar) judge, and when that judge fails
their verdicts are `error` and left out of every row's score, so a run whose judge was down scores
the rule criteria alone. `rubricrl score` and `rubricrl eval` print it next to the headline score
and exit non-zero when its error rate is above `--max-error-rate` (DEFAULT_MAX_ERROR_RATE).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

from rubricrl.scoring.formulas import Estimate, bootstrap

DEFAULT_MAX_ERROR_RATE = 0.5
RULES_JUDGE_ID = "rules"  # judges/rules.py: every criterion with a declarative check, and only those


def is_model_judged(verdict: dict) -> bool:
    """A verdict on a criterion without a declarative check (the router sends every check, and only
    checks, to the rule judge; a model criterion with no model judge is `skipped` by the router)."""
    return verdict.get("judge_id") != RULES_JUDGE_ID


@dataclass
class ModelCoverage:
    """Model-judged verdicts of a run: decided (met/unmet), errors (the judge failed: left out of the
    score) and skipped (not judged on purpose, e.g. `--judge rules`)."""

    verdicts: int = 0
    decided: int = 0
    errors: int = 0
    skipped: int = 0

    @property
    def error_rate(self) -> float | None:
        """Errors / (decided + errors): the share of the verdicts a judge was asked for that failed
        (skipped verdicts were never asked for); None when there are none."""
        asked = self.decided + self.errors
        return self.errors / asked if asked else None

    @property
    def partial(self) -> bool:
        return self.decided < self.verdicts

    def exceeds(self, max_error_rate: float) -> bool:
        rate = self.error_rate
        return rate is not None and rate > max_error_rate

    def describe(self) -> str:
        """e.g. `0 of 60 decided (60 errors)`."""
        parts = [f"{self.errors} error{'s' if self.errors != 1 else ''}"] if self.errors else []
        parts += [f"{self.skipped} skipped"] if self.skipped else []
        return f"{self.decided} of {self.verdicts} decided" + (f" ({', '.join(parts)})" if parts else "")

    def to_dict(self) -> dict:
        return {**asdict(self), "error_rate": self.error_rate}


def model_coverage(records: list[dict]) -> ModelCoverage:
    """The model-judged verdicts of result records (`score` or `eval` records)."""
    c = ModelCoverage()
    for r in records:
        for v in r.get("verdicts") or []:
            if not is_model_judged(v):
                continue
            c.verdicts += 1
            if v["status"] in ("met", "unmet"):
                c.decided += 1
            elif v["status"] == "error":
                c.errors += 1
            else:
                c.skipped += 1
    return c


@dataclass
class CriterionStats:
    met: int = 0
    unmet: int = 0
    error: int = 0
    skipped: int = 0

    @property
    def pass_rate(self) -> float | None:
        decided = self.met + self.unmet
        return self.met / decided if decided else None


@dataclass
class RunSummary:
    rows: int
    scored: int
    unscored: int
    invalid: int
    score: Estimate | None  # HealthBench-style: mean clipped to [0, 1], bootstrap over rows
    mean_coverage: float | None
    gated_rows: int
    verdicts: int
    errors: int
    error_reasons: dict[str, int]
    model_judged: ModelCoverage = field(default_factory=ModelCoverage)
    criteria: dict[str, CriterionStats] = field(default_factory=dict)
    tags: dict[str, float] = field(default_factory=dict)
    invalid_examples: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["criteria"] = {k: {**asdict(v), "pass_rate": v.pass_rate} for k, v in self.criteria.items()}
        out["model_judged"] = self.model_judged.to_dict()
        return out


def summarize(records: list[dict], *, resamples: int = 1000, seed: int = 0) -> RunSummary:
    status = Counter(r["status"] for r in records)
    scores = [r["score"] for r in records if r["status"] == "scored"]
    criteria: dict[str, CriterionStats] = defaultdict(CriterionStats)
    tag_values: dict[str, list[float]] = defaultdict(list)
    reasons: Counter = Counter()
    verdicts = errors = 0
    for r in records:
        for tag, value in (r.get("tag_scores") or {}).items():
            tag_values[tag].append(value)
        for v in r.get("verdicts", []):
            verdicts += 1
            stats = criteria[v["criterion_id"]]
            setattr(stats, v["status"], getattr(stats, v["status"]) + 1)
            if v["status"] == "error":
                errors += 1
                reasons[v["reason"].split(":", 1)[0][:80] or "unknown"] += 1
    coverage = [r["coverage"] for r in records if "coverage" in r]
    return RunSummary(
        rows=len(records), scored=status["scored"], unscored=status["unscored"], invalid=status["invalid"],
        score=bootstrap(scores, resamples=resamples, seed=seed) if scores else None,
        mean_coverage=sum(coverage) / len(coverage) if coverage else None,
        gated_rows=sum(1 for r in records if r.get("gated")),
        verdicts=verdicts, errors=errors, error_reasons=dict(reasons), model_judged=model_coverage(records),
        criteria=dict(sorted(criteria.items())),
        tags={t: sum(v) / len(v) for t, v in sorted(tag_values.items())},
        invalid_examples=[r["problem"] for r in records if r["status"] == "invalid"][:10],
    )
