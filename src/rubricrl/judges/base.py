"""The judge protocol: a batch of (conversation, response, criteria) in, one verdict per criterion out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from rubricrl.core.messages import Conversation
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status, Verdict


@dataclass(frozen=True)
class JudgeRequest:
    conversation: Conversation
    response: str
    criteria: tuple[Criterion, ...]


@dataclass
class JudgeStats:
    """Running totals a judge keeps; `model_calls` counts forward passes or HTTP calls."""

    model_calls: int = 0
    tokens: int = 0
    retries: int = 0  # HTTP judges: attempts beyond the first
    cost: float = 0.0  # HTTP judges: priced with the endpoint's cost_per_1k_* settings
    verdicts: int = 0
    errors: int = 0
    error_reasons: dict[str, int] = field(default_factory=dict)

    def count(self, verdicts: Sequence[Verdict]) -> None:
        self.verdicts += len(verdicts)
        for v in verdicts:
            if v.status is Status.ERROR:
                self.errors += 1
                key = v.reason.split(":", 1)[0][:80]
                self.error_reasons[key] = self.error_reasons.get(key, 0) + 1


@runtime_checkable
class Judge(Protocol):
    """Any judge: rules, a local model, an HTTP endpoint, a cache around another judge.

    `judge` returns, for each request, one Verdict per criterion in the request's order.
    It must not raise for a judging failure: a failure is an `error` verdict with a reason."""

    judge_id: str
    stats: JudgeStats

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]: ...
