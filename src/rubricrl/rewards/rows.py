"""Judge rows and turn each row's verdicts into the reward a trainer gets, with fixed per-row logs.

OpenRLHF and verl put every reward into a tensor, so there is no `mask` here (unlike RubricReward):
a row with a judge error, or with no decided criterion (`unscored`), gets reward 0.0 under the
`zero` policy, flagged `rubric_scored = 0` and counted in the logs, or fails the whole call
under `raise`. The log keys are the same for every row, whatever its rubric, judge or reward mode
(LOG_KEYS): a critic judge's counts (judges/critic.py) and a pairwise row's pairs are 0 where they do
not apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rubricrl.core.messages import Conversation
from rubricrl.judges.base import Judge, JudgeRequest
from rubricrl.rubrics.model import Rubric
from rubricrl.scoring.formulas import NonFiniteScore, RowScore, score_row
from rubricrl.core.verdicts import Status, Verdict

ErrorPolicy = Literal["zero", "raise"]
ERROR_POLICIES = ("zero", "raise")
Outcome = Literal["scored", "unscored", "judge_error"]

LOG_KEYS = ("rubric_scored", "rubric_points", "rubric_coverage", "rubric_judge_errors", "rubric_skipped",
            "rubric_gated", "rubric_verified", "rubric_unverified", "rubric_confirmed", "rubric_pairs")


@dataclass(frozen=True)
class RowInput:
    """What one row asks the judge: the conversation, the response and the rubric to judge it by."""

    conversation: Conversation
    response: str
    rubric: Rubric


@dataclass(frozen=True)
class CriticCounts:
    """A row's criteria under a critic judge (judges/critic.py): `verified` (judged by the verifier),
    `unverified` (the critic's estimate kept) and `confirmed` (verified and found failed: a positive
    criterion unmet, a pitfall met). All 0 for any other judge."""

    verified: int = 0
    unverified: int = 0
    confirmed: int = 0

    @classmethod
    def of(cls, rubric: Rubric, verdicts: Sequence[Verdict], verifiers: frozenset[str]) -> CriticCounts:
        """The counts of one row; `verifiers` are the judge ids of the critic judges' verifiers
        (judges/base.py `verifier_ids`), whose verdicts are the verified ones."""
        from rubricrl.judges.critic import failed

        if not verifiers:
            return cls(unverified=sum(v.unverified for v in verdicts))
        criteria = {c.id: c for c in rubric.criteria}
        verified = [v for v in verdicts if not v.unverified and v.judge_id in verifiers]
        return cls(len(verified), sum(v.unverified for v in verdicts),
                   sum(bool(failed(criteria[v.criterion_id], v)) for v in verified if v.criterion_id in criteria))


@dataclass(frozen=True)
class RowReward:
    reward: float  # what the trainer gets (0.0 when `status` is not `scored`)
    status: Outcome
    score: RowScore  # the row's score with the chosen softness (score.score is None when unscored)
    points: float | None  # met/unmet points score, hard-rule gate applied
    verdicts: tuple[Verdict, ...]
    problem: str  # why the reward is not a judgement ("" when scored)
    critic: CriticCounts = CriticCounts()
    pairs: int = 0  # pairwise mode: the pairs of its group this row was compared in

    def logs(self) -> dict[str, float]:
        """Numbers only, the same keys for every row (LOG_KEYS)."""
        return {"rubric_scored": float(self.status == "scored"),
                "rubric_points": self.points if self.points is not None else 0.0,
                "rubric_coverage": self.score.coverage,
                "rubric_judge_errors": float(self.score.n_error),
                "rubric_skipped": float(self.score.n_skipped),
                "rubric_gated": float(self.score.gated),
                "rubric_verified": float(self.critic.verified),
                "rubric_unverified": float(self.critic.unverified),
                "rubric_confirmed": float(self.critic.confirmed),
                "rubric_pairs": float(self.pairs)}


def row_reward(rubric: Rubric, verdicts: Sequence[Verdict], *, soft: bool = True,
               verifiers: frozenset[str] = frozenset()) -> RowReward:
    """The reward for one row. `soft` scores model verdicts by p_met (as RubricReward does); `verifiers`:
    the judge ids whose verdicts a critic judge verified (CriticCounts.of)."""
    critic = CriticCounts.of(rubric, verdicts, verifiers)
    try:
        s = score_row(rubric, verdicts, soft=soft)
        points = score_row(rubric, verdicts).score if soft else s.score
    except NonFiniteScore as exc:  # only a rubric built without validation gets here: never a NaN reward
        empty = RowScore(None, None, False, 0.0, sum(v.status is Status.ERROR for v in verdicts),
                         sum(v.status is Status.SKIPPED for v in verdicts))
        return RowReward(0.0, "unscored", empty, None, tuple(verdicts), str(exc)[:300], critic)
    errors = [v for v in verdicts if v.status is Status.ERROR]
    if errors:
        reasons = "; ".join(sorted({v.reason for v in errors}))[:300]
        return RowReward(0.0, "judge_error", s, points, tuple(verdicts),
                         f"{len(errors)} judge error(s) ({', '.join(v.criterion_id for v in errors)}): {reasons}",
                         critic)
    if s.score is None:
        return RowReward(0.0, "unscored", s, points, tuple(verdicts),
                         f"no positively weighted criterion was decided ({s.n_skipped} skipped: no judge for them); "
                         "use a judge that decides model-judged criteria, e.g. `exemplar+local` or `openai:URL`",
                         critic)
    return RowReward(s.score, "scored", s, points, tuple(verdicts), "", critic)


async def judge_rows(judge: Judge, rows: Sequence[RowInput]) -> list[list[Verdict]]:
    """Verdicts per row; identical (conversation, response, rubric) rows are judged once
    (GRPO groups often repeat a short response)."""
    unique: dict[tuple, int] = {}
    requests: list[JudgeRequest] = []
    keys = []
    for row in rows:
        key = (row.conversation, row.response, row.rubric.content_hash())
        if key not in unique:
            unique[key] = len(requests)
            requests.append(JudgeRequest(row.conversation, row.response, row.rubric.criteria))
        keys.append(key)
    answers = await judge.judge(requests) if requests else []
    return [answers[unique[key]] for key in keys]


def failures(rewards: Sequence[RowReward]) -> list[tuple[int, RowReward]]:
    """The rows whose reward is not a judgement, with their index."""
    return [(i, r) for i, r in enumerate(rewards) if r.status != "scored"]
