"""Run summary computed from result records: mean with bootstrap CI, pass rates, errors, coverage.

`ModelCoverage` says how much of the model-judged part of the rubrics a score rests on: criteria
without a declarative check are decided by a model (or exemplar) judge, and when that judge fails
their verdicts are `error` and left out of every row's score, so a run whose judge was down scores
the rule criteria alone. `rubricrl score` and `rubricrl eval` print it next to the headline score
and exit non-zero when its error rate is above `--max-error-rate` (DEFAULT_MAX_ERROR_RATE).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, computed_field

from rubricrl.core.verdicts import Status
from rubricrl.scoring.formulas import Estimate, bootstrap
from rubricrl.scoring.records import RecordVerdict, ResultRecord, as_records

DEFAULT_MAX_ERROR_RATE = 0.5
RULES_JUDGE_ID = "rules"  # judges/rules.py: every criterion with a declarative check, and only those


def is_model_judged(verdict: RecordVerdict) -> bool:
    """A verdict on a criterion without a declarative check (the router sends every check, and only
    checks, to the rule judge; a model criterion with no model judge is `skipped` by the router)."""
    return verdict.judge_id != RULES_JUDGE_ID


class ModelCoverage(BaseModel):
    """Model-judged verdicts of a run (criteria without a declarative check): decided (met/unmet),
    errors (the judge failed: left out of the score) and skipped (not judged on purpose, e.g.
    `--judge rules`). The `model_judged` of score and eval summaries alike."""

    verdicts: int = 0
    decided: int = 0
    errors: int = 0
    skipped: int = 0

    @computed_field
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
        return self.model_dump()


def model_coverage(records: Iterable[ResultRecord]) -> ModelCoverage:
    """The model-judged verdicts of result records (`score` or `eval` records)."""
    c = ModelCoverage()
    for r in records:
        for v in r.verdicts:
            if not is_model_judged(v):
                continue
            c.verdicts += 1
            if v.decided:
                c.decided += 1
            elif v.status is Status.ERROR:
                c.errors += 1
            else:
                c.skipped += 1
    return c


class CriterionStats(BaseModel):
    """One criterion's verdicts over a run: met, unmet, error, skipped, and the pass rate over the
    decided ones; with the criterion's id, text (eval records carry it), weight and tags."""

    id: str
    text: str = ""
    weight: float = 0.0
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

    def add(self, status: Status) -> None:
        if status is Status.MET:
            self.met += 1
        elif status is Status.UNMET:
            self.unmet += 1
        elif status is Status.ERROR:
            self.error += 1
        else:
            self.skipped += 1

    def counts(self) -> dict:
        """met, unmet, error, skipped and pass_rate (what a score summary lists per criterion)."""
        return self.model_dump(include={"met", "unmet", "error", "skipped", "pass_rate"})


def error_reason(text: str) -> str:
    """The counted reason of an error (verdict or policy): the part before the first colon."""
    return (text or "").split(":", 1)[0][:80] or "unknown"


@dataclass
class VerdictTally:
    """Every verdict of some records, counted: per criterion (by a key), error reasons (in the order
    first seen), judge ids."""

    verdicts: int = 0
    criteria: dict[str, CriterionStats] = field(default_factory=dict)
    error_reasons: Counter = field(default_factory=Counter)
    judge_ids: set[str] = field(default_factory=set)

    @property
    def errors(self) -> int:
        return sum(self.error_reasons.values())


def tally(records: Iterable[ResultRecord], key: Callable[[RecordVerdict], str]) -> VerdictTally:
    t = VerdictTally()
    for r in records:
        for v in r.verdicts:
            t.verdicts += 1
            t.judge_ids.add(v.judge_id)
            stats = t.criteria.get(key(v))
            if stats is None:
                stats = t.criteria[key(v)] = CriterionStats(id=v.criterion_id, text=v.criterion_text,
                                                            weight=v.weight, tags=list(v.tags))
            stats.add(v.status)
            if v.status is Status.ERROR:
                t.error_reasons[error_reason(v.reason)] += 1
    return t


def mean_coverage(records: Sequence[ResultRecord]) -> float | None:
    """The mean coverage of the judged records; None when there are none."""
    coverage = [r.coverage for r in records if r.judged]
    return sum(coverage) / len(coverage) if coverage else None


@dataclass
class RunSummary:
    """The summary of a `rubricrl score` output (OUT_STEM.summary.json: `to_dict()`)."""

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
    criteria: dict[str, CriterionStats] = field(default_factory=dict)  # by criterion id
    tags: dict[str, float] = field(default_factory=dict)  # plain mean of each tag's row scores
    invalid_examples: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"rows": self.rows, "scored": self.scored, "unscored": self.unscored, "invalid": self.invalid,
                "score": self.score.to_dict() if self.score else None, "mean_coverage": self.mean_coverage,
                "gated_rows": self.gated_rows, "verdicts": self.verdicts, "errors": self.errors,
                "error_reasons": dict(self.error_reasons), "model_judged": self.model_judged.to_dict(),
                "criteria": {k: v.counts() for k, v in self.criteria.items()}, "tags": dict(self.tags),
                "invalid_examples": list(self.invalid_examples)}


def summarize(records: Sequence[ResultRecord | dict], *, resamples: int = 1000, seed: int = 0) -> RunSummary:
    """The summary of result records (plain dicts from `read_results` are validated first)."""
    records = as_records(records)
    status = Counter(r.status for r in records)
    scores = [r.score for r in records if r.status == "scored"]
    tag_values: dict[str, list[float]] = defaultdict(list)
    for r in records:
        for tag, value in r.tag_scores.items():
            tag_values[tag].append(value)
    t = tally(records, key=lambda v: v.criterion_id)
    return RunSummary(
        rows=len(records), scored=status["scored"], unscored=status["unscored"], invalid=status["invalid"],
        score=bootstrap(scores, resamples=resamples, seed=seed) if scores else None,
        mean_coverage=mean_coverage(records),
        gated_rows=sum(1 for r in records if r.gated),
        verdicts=t.verdicts, errors=t.errors, error_reasons=dict(t.error_reasons), model_judged=model_coverage(records),
        criteria=dict(sorted(t.criteria.items())),
        tags={tag: sum(v) / len(v) for tag, v in sorted(tag_values.items())},
        invalid_examples=[r.problem for r in records if r.status == "invalid"][:10],
    )
