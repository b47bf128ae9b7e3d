"""Ensembles of judges: `vote:SPEC1|SPEC2|...` and `mean:SPEC1|SPEC2|...` (docs/agreement.md).

Every member judges every criterion; per criterion:
- it is decided only when more than half of the members decided it (met/unmet). Otherwise it is
  an `error` (reason `no_majority: ...` with each member's reason), or `skipped` when no member
  decided and none failed (every member skipped it on purpose);
- `vote`: met when more than half of the deciding members say met; a tie is `unmet` (a reward
  is not granted without a majority for it). `p_met` is the fraction of met votes;
- `mean`: `p_met` is the mean over the deciding members of their `p_met` (1.0 / 0.0 for a met /
  unmet verdict without one); met when it is >= 0.5.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rubricrl.core.verdicts import Status, Verdict, skipped_verdict
from rubricrl.judges.base import Judge, JudgeReport, JudgeRequest, JudgeStats, combined_cache

MODES = ("vote", "mean")


class EnsembleJudge:
    explains = False  # its evidence is a tally of the members' verdicts

    def __init__(self, mode: str, members: Sequence[Judge]):
        if mode not in MODES:
            raise ValueError(f"unknown ensemble mode {mode!r}; use one of {', '.join(MODES)}")
        if not members:
            raise ValueError("an ensemble needs at least one member judge")
        self.mode, self.members = mode, list(members)
        self.judge_id = f"{mode}:" + "|".join(m.judge_id for m in self.members)
        self._own = JudgeStats()

    @property
    def stats(self) -> JudgeStats:
        """The members' model calls, tokens, retries and cost; verdicts and errors of the ensemble."""
        total = JudgeStats(verdicts=self._own.verdicts, errors=self._own.errors,
                           error_reasons=dict(self._own.error_reasons))
        return total.add_spend(self.members)

    def report(self) -> JudgeReport:
        """`stats` as above; the members' caches added up and their endpoints; each member's report
        as part `member1`, `member2`, ..."""
        members = [m.report() for m in self.members]
        return JudgeReport(self.judge_id, self.stats, cache=combined_cache(members),
                           endpoints=tuple(e for r in members for e in r.endpoints),
                           parts={f"member{i}": r for i, r in enumerate(members, start=1)})

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        answers = await asyncio.gather(*(m.judge(requests) for m in self.members))
        out = []
        for i, req in enumerate(requests):
            by_member = [{v.criterion_id: v for v in member_answers[i]} for member_answers in answers]
            row = [self.combine(c.id, [found.get(c.id) for found in by_member]) for c in req.criteria]
            self._own.count(row)
            out.append(row)
        return out

    def combine(self, criterion_id: str, verdicts: Sequence[Verdict | None]) -> Verdict:
        """One verdict from the members' verdicts on one criterion (None: a member gave none)."""
        decided = [v for v in verdicts if v is not None and v.decided]
        tokens = sum(v.tokens for v in verdicts if v is not None)
        if 2 * len(decided) <= len(self.members):
            notes = "; ".join(f"{m.judge_id}: {v.status.value} {v.reason}".rstrip() if v else f"{m.judge_id}: no verdict"
                              for m, v in zip(self.members, verdicts))
            if not decided and all(v is not None and v.status is Status.SKIPPED for v in verdicts):
                return skipped_verdict(criterion_id, self.judge_id, f"all members skipped it ({notes})")
            return Verdict(criterion_id=criterion_id, status=Status.ERROR, judge_id=self.judge_id, tokens=tokens,
                           reason=f"no_majority: {len(decided)} of {len(self.members)} members decided it, more than "
                                  f"half must ({notes})")
        if self.mode == "vote":
            met = sum(v.status is Status.MET for v in decided)
            p = met / len(decided)
            status = Status.MET if 2 * met > len(decided) else Status.UNMET
            summary = f"vote {met}/{len(decided)} met" + (" (tie: unmet)" if 2 * met == len(decided) else "")
        else:
            values = [v.p_met if v.p_met is not None else (1.0 if v.status is Status.MET else 0.0) for v in decided]
            p = sum(values) / len(values)
            status = Status.MET if p >= 0.5 else Status.UNMET
            summary = f"mean p_met {p:.3f} over {len(values)}"
        members = ", ".join(f"{v.judge_id}={v.status.value}" + (f"({v.p_met:.2f})" if v.p_met is not None else "")
                            for v in decided)
        return Verdict(criterion_id=criterion_id, status=status, p_met=min(max(p, 0.0), 1.0), tokens=tokens,
                       evidence=f"{summary}: {members}", judge_id=self.judge_id)
