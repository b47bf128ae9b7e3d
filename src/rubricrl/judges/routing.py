"""Route each criterion to the judge that should decide it: a declarative check goes to the
rule judge; everything else to the configured model judge (or `skipped` when there is none)."""

from __future__ import annotations

from collections.abc import Sequence

from ..verdict import Verdict, skipped_verdict
from .base import Judge, JudgeRequest, JudgeStats
from .rules import RuleJudge


class RoutedJudge:
    def __init__(self, model_judge: Judge | None = None):
        self.rules = RuleJudge()
        self.model_judge = model_judge
        self.judge_id = f"rules+{model_judge.judge_id}" if model_judge else "rules"

    @property
    def stats(self) -> JudgeStats:
        return self.model_judge.stats if self.model_judge else self.rules.stats

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        model_requests, owners = [], []
        for i, req in enumerate(requests):
            needs_model = tuple(c for c in req.criteria if c.check is None)
            if needs_model and self.model_judge is not None:
                model_requests.append(JudgeRequest(req.conversation, req.response, needs_model))
                owners.append(i)
        model_answers = await self.model_judge.judge(model_requests) if model_requests else []
        by_request: dict[int, dict[str, Verdict]] = {
            i: {v.criterion_id: v for v in verdicts} for i, verdicts in zip(owners, model_answers)}
        out = []
        for i, req in enumerate(requests):
            ruled = {v.criterion_id: v for v in self.rules.judge_one(
                JudgeRequest(req.conversation, req.response, tuple(c for c in req.criteria if c.check)))}
            modeled = by_request.get(i, {})
            out.append([ruled.get(c.id) or modeled.get(c.id) or skipped_verdict(
                c.id, "router", "no model judge configured (use --judge local or another model judge)")
                for c in req.criteria])
        return out
