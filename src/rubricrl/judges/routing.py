"""Route each criterion to the judge that should decide it: a declarative check goes to the
rule judge; a criterion with a fitted exemplar model to the exemplar judge; everything else to
the configured model judge (or `skipped` when there is none)."""

from __future__ import annotations

from collections.abc import Sequence

from ..verdict import Verdict, skipped_verdict
from .base import Judge, JudgeRequest, JudgeStats
from .rules import RuleJudge


class RoutedJudge:
    def __init__(self, model_judge: Judge | None = None, exemplar_judge=None):
        self.rules = RuleJudge()
        self.model_judge = model_judge
        self.exemplar_judge = exemplar_judge
        self.judge_id = "+".join(["rules"] + [j.judge_id for j in (exemplar_judge, model_judge) if j is not None])

    @property
    def stats(self) -> JudgeStats:
        return self.model_judge.stats if self.model_judge else self.rules.stats

    def route(self, criterion) -> str:
        """`rules` for a check; else the criterion's preference (`judge: exemplar | llm`) when that
        judge can decide it; else an exemplar model if one fits, then the LLM judge."""
        if criterion.check is not None:
            return "rules"
        has_exemplar = self.exemplar_judge is not None and self.exemplar_judge.covers(criterion)
        if criterion.judge == "llm" and self.model_judge is not None:
            return "model"
        if has_exemplar:
            return "exemplar"
        return "model" if self.model_judge is not None else "none"

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        decided: list[dict[str, Verdict]] = [{} for _ in requests]
        for name, judge in (("rules", self.rules), ("exemplar", self.exemplar_judge), ("model", self.model_judge)):
            if judge is None:
                continue
            sub, owners = [], []
            for i, req in enumerate(requests):
                mine = tuple(c for c in req.criteria if self.route(c) == name)
                if mine:
                    sub.append(JudgeRequest(req.conversation, req.response, mine))
                    owners.append(i)
            for i, verdicts in zip(owners, await judge.judge(sub) if sub else []):
                decided[i].update({v.criterion_id: v for v in verdicts})
        return [[decided[i].get(c.id) or skipped_verdict(
            c.id, "router", "no model judge configured (use --judge local, exemplar+local or another model judge)")
            for c in req.criteria] for i, req in enumerate(requests)]
