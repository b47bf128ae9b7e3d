"""Ensembles `vote:` and `mean:`: arithmetic, ties, errors and skips, and the spec in make_judge."""

import asyncio

import pytest

from rubricrl.core.messages import as_conversation
from rubricrl.judges import JudgeSpecError, make_judge
from rubricrl.judges.base import JudgeRequest, JudgeStats, StatsJudge
from rubricrl.judges.ensemble import EnsembleJudge
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status, Verdict, error_verdict, skipped_verdict

C = Criterion(id="c", text="The reply is kind.")
D = Criterion(id="d", text="The reply is short.")


class Fixed(StatsJudge):
    """A member judge that answers every request with the same scripted verdict per criterion id:
    "met" / "unmet" (optionally with p_met), "error" or "skipped"."""

    def __init__(self, name: str, answers: dict):
        self.judge_id, self.answers, self.stats = name, answers, JudgeStats(model_calls=1, tokens=10)

    async def judge(self, requests):
        out = []
        for r in requests:
            row = []
            for c in r.criteria:
                status, p = self.answers[c.id]
                if status == "error":
                    row.append(error_verdict(c.id, self.judge_id, "timeout: no answer"))
                elif status == "skipped":
                    row.append(skipped_verdict(c.id, self.judge_id, "no model"))
                else:
                    row.append(Verdict(criterion_id=c.id, status=Status(status), p_met=p, judge_id=self.judge_id,
                                       tokens=3))
            out.append(row)
        return out


def run(mode: str, *answers, criteria=(C,)):
    members = [Fixed(f"m{i}", {c.id: a for c in criteria}) for i, a in enumerate(answers)]
    judge = EnsembleJudge(mode, members)
    [row] = asyncio.run(judge.judge([JudgeRequest(as_conversation("hi"), "reply", criteria)]))
    return judge, row


def test_vote_majority_and_tie():
    judge, [v] = run("vote", ("met", 0.9), ("met", 0.6), ("unmet", 0.1))
    assert v.status is Status.MET and v.p_met == pytest.approx(2 / 3)  # 2 of 3 met
    assert v.judge_id == "vote:m0|m1|m2" and v.tokens == 9 and "vote 2/3 met" in v.evidence
    _, [v] = run("vote", ("met", None), ("unmet", None))
    assert v.status is Status.UNMET and v.p_met == 0.5 and "tie" in v.evidence  # a tie is unmet
    _, [v] = run("vote", ("unmet", 0.4), ("unmet", 0.3), ("met", 0.99))
    assert v.status is Status.UNMET and v.p_met == pytest.approx(1 / 3)
    assert judge.stats.model_calls == 3 and judge.stats.tokens == 30 and judge.stats.verdicts == 1


def test_mean_arithmetic():
    # (0.2 + 0.9 + 1.0) / 3 = 0.7: the third member is met without p_met, so it counts as 1.0
    _, [v] = run("mean", ("unmet", 0.2), ("met", 0.9), ("met", None))
    assert v.status is Status.MET and v.p_met == pytest.approx(0.7)
    # (0.4 + 0.55 + 0.0) / 3 = 0.3167: an unmet member without p_met counts as 0.0
    _, [v] = run("mean", ("unmet", 0.4), ("met", 0.55), ("unmet", None))
    assert v.status is Status.UNMET and v.p_met == pytest.approx(0.95 / 3)
    _, [v] = run("mean", ("met", 0.5), ("unmet", 0.5))  # exactly 0.5 -> met
    assert v.status is Status.MET


def test_majority_of_members_must_decide():
    # 2 of 3 decided: decided on those two; (0.8 + 0.3) / 2 = 0.55
    _, [v] = run("mean", ("met", 0.8), ("unmet", 0.3), ("error", None))
    assert v.status is Status.MET and v.p_met == pytest.approx(0.55)
    # 1 of 3 decided: error naming every member's reason
    judge, [v] = run("vote", ("met", 0.8), ("error", None), ("skipped", None))
    assert v.status is Status.ERROR and v.reason.startswith("no_majority: 1 of 3")
    assert "m1: error timeout: no answer" in v.reason and "m2: skipped no model" in v.reason
    assert judge.stats.errors == 1 and judge.stats.error_reasons == {"no_majority": 1}
    # 1 of 2 decided is not more than half
    _, [v] = run("vote", ("met", 0.8), ("error", None))
    assert v.status is Status.ERROR
    # nobody decided, nobody failed: skipped
    _, [v] = run("mean", ("skipped", None), ("skipped", None))
    assert v.status is Status.SKIPPED and "all members skipped" in v.reason


def test_criteria_combined_independently():
    members = [Fixed("a", {"c": ("met", 0.9), "d": ("error", None)}),
               Fixed("b", {"c": ("met", 0.7), "d": ("unmet", 0.1)}),
               Fixed("c", {"c": ("unmet", 0.2), "d": ("unmet", 0.2)})]
    judge = EnsembleJudge("vote", members)
    requests = [JudgeRequest(as_conversation("hi"), f"reply {i}", (C, D)) for i in range(3)]
    rows = asyncio.run(judge.judge(requests))
    assert [[v.status for v in row] for row in rows] == [[Status.MET, Status.UNMET]] * 3
    assert [v.criterion_id for v in rows[0]] == ["c", "d"]


def test_make_judge_ensemble_specs():
    judge = make_judge("vote:rules|rules")
    ensemble = judge.model_judge
    assert isinstance(ensemble, EnsembleJudge) and ensemble.mode == "vote" and len(ensemble.members) == 2
    assert make_judge(" mean:rules | rules | rules ").model_judge.mode == "mean"
    check = Criterion(id="sorry", text="Says sorry.", check={"type": "contains", "any_of": ["sorry"]})
    request = JudgeRequest(as_conversation("hi"), "so sorry", (check, C))
    [[rule, model]] = asyncio.run(judge.judge([request]))
    assert rule.status is Status.MET and rule.judge_id == "rules"  # checks never reach the ensemble
    assert model.status is Status.SKIPPED and "all members skipped" in model.reason
    for bad in ("vote:rules", "mean:", "vote:rules||rules"):
        with pytest.raises(JudgeSpecError, match="two or more member specs"):
            make_judge(bad)
    with pytest.raises(JudgeSpecError, match="vote:SPEC1"):
        make_judge("vote")  # no colon: not an ensemble, and not any other known spec
