"""Run summary computed from result records: mean with bootstrap CI, pass rates, errors, coverage."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

from .scoring import Estimate, bootstrap


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
    criteria: dict[str, CriterionStats] = field(default_factory=dict)
    tags: dict[str, float] = field(default_factory=dict)
    invalid_examples: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["criteria"] = {k: {**asdict(v), "pass_rate": v.pass_rate} for k, v in self.criteria.items()}
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
        verdicts=verdicts, errors=errors, error_reasons=dict(reasons),
        criteria=dict(sorted(criteria.items())),
        tags={t: sum(v) / len(v) for t, v in sorted(tag_values.items())},
        invalid_examples=[r["problem"] for r in records if r["status"] == "invalid"][:10],
    )
