"""The verdict: one judge's decision on one criterion for one response."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

# The judge-id prefix of a verdict that carries a critic's estimate instead of a verifier's decision.
UNVERIFIED = "unverified:"


class Status(str, Enum):
    """`error` means the judge failed and the criterion is excluded from the score (and counted);
    `skipped` means the criterion was not applicable or not judged on purpose (reason says why)."""

    MET = "met"
    UNMET = "unmet"
    ERROR = "error"
    SKIPPED = "skipped"


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    criterion_id: str
    status: Status
    p_met: float | None = Field(default=None, ge=0.0, le=1.0)
    evidence: str = ""
    reason: str = ""
    judge_id: str
    tokens: int = Field(default=0, ge=0, description="model tokens spent on this verdict (its share of a shared pass)")
    cached: bool = False

    @property
    def decided(self) -> bool:
        """True for met/unmet: the verdicts that enter a score."""
        return self.status in (Status.MET, Status.UNMET)

    @property
    def unverified(self) -> bool:
        """True for a critic's estimate that no verifier checked (judges/critic.py): its judge id starts
        with `unverified:` and names the critic, so it reads as one in every file."""
        return self.judge_id.startswith(UNVERIFIED)


def error_verdict(criterion_id: str, judge_id: str, reason: str) -> Verdict:
    return Verdict(criterion_id=criterion_id, status=Status.ERROR, reason=reason, judge_id=judge_id)


def skipped_verdict(criterion_id: str, judge_id: str, reason: str) -> Verdict:
    return Verdict(criterion_id=criterion_id, status=Status.SKIPPED, reason=reason, judge_id=judge_id)
