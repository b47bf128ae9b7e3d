"""The rule judge: evaluates declarative checks, no model call. Criteria without a check are
`skipped` (they need a model judge), never guessed."""

from __future__ import annotations

from collections.abc import Sequence

from rubricrl.rubrics.checks import run_check
from rubricrl.core.verdicts import Status, Verdict, skipped_verdict
from rubricrl.judges.base import JudgeRequest, JudgeStats, StatsJudge


class RuleJudge(StatsJudge):
    judge_id = "rules"

    def __init__(self) -> None:
        self.stats = JudgeStats()

    def judge_one(self, request: JudgeRequest) -> list[Verdict]:
        out = []
        for c in request.criteria:
            if c.check is None:
                out.append(skipped_verdict(c.id, self.judge_id, "no declarative check; needs a model judge"))
                continue
            result = run_check(c.check, request.response)
            out.append(Verdict(criterion_id=c.id, status=Status.MET if result.met else Status.UNMET,
                               p_met=1.0 if result.met else 0.0, evidence=result.evidence, judge_id=self.judge_id))
        self.stats.count(out)
        return out

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        return [self.judge_one(r) for r in requests]
