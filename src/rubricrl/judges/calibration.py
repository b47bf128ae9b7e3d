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
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rubricrl.core.jsonl import read_text
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status, Verdict
from rubricrl.judges.base import Judge, JudgeRequest, WrapperJudge
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
    """The verdict re-decided at the calibrated threshold (see the module docstring for what passes); a
    critic's unverified estimate (judges/critic.py) is not the calibrated judge's and passes unchanged."""
    if not verdict.decided or verdict.p_met is None or verdict.reason.startswith("precheck") or verdict.unverified:
        return verdict
    t, source = calibration.threshold_for(criterion)
    status = Status.MET if verdict.p_met >= t else Status.UNMET
    note = f"calibrated threshold {t:.3f} ({source})"
    return verdict.model_copy(update={"status": status, "judge_id": judge_id,
                                      "evidence": f"{verdict.evidence}; {note}" if verdict.evidence else note})


class CalibratedJudge(WrapperJudge):
    """Wraps a judge; its judge id gains `#cal-<hash>` so caches never mix calibrated verdicts. Its report is
    the inner judge's (cache, endpoints, ...) under the calibrated judge id."""

    def __init__(self, inner: Judge, calibration: Calibration):
        self.inner, self.calibration = inner, calibration
        self.judge_id = f"{inner.judge_id}#cal-{calibration.content_hash()}"

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        answers = await self.inner.judge(requests)
        out = []
        for req, row in zip(requests, answers):
            by_id = {c.id: c for c in req.criteria}
            out.append([recalibrate(v, by_id[v.criterion_id], self.calibration, self.judge_id)
                        if v.criterion_id in by_id else v for v in row])
        return out


# -- fitting -------------------------------------------------------------------------------------
