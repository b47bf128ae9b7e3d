"""Judge-based tactic classifier: each tactic becomes a rubric criterion ("The reply uses this
tactic: ...") decided by any judge backend. Useful with a strong LLM judge; same interface as
TacticClassifier (`tactics`, `probabilities`, `predict`, `labels`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from rubricrl.core.messages import as_conversation
from rubricrl.judges.base import Judge, JudgeRequest
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status
from rubricrl.tactics.classifier import TacticClassifier, TurnExample
from rubricrl.tactics.taxonomy import Taxonomy


class JudgeTacticClassifier:
    def __init__(self, taxonomy: Taxonomy, judge: Judge):
        self.taxonomy, self.judge = taxonomy.name, judge
        self.tactics = taxonomy.names
        self.criteria = tuple(
            Criterion(id=f"t{i}", text=f"The reply uses this tactic: {t.name}. {t.description}".strip())
            for i, t in enumerate(taxonomy.tactics))

    def probabilities(self, turns: Sequence[TurnExample], progress=None) -> np.ndarray:
        """P(tactic) per turn, all turns in one judge call (`progress(done, total)` once, at the end).
        Error or skipped verdicts (a failing judge, or `rules`, which cannot decide them) raise
        instead of being read as 'no tactic'."""
        requests = [JudgeRequest(as_conversation(t.context or "(start of conversation)"), t.text, self.criteria)
                    for t in turns]
        answers = asyncio.run(self.judge.judge(requests)) if requests else []
        if progress is not None:
            progress(len(turns), len(turns))
        if any(v.status is Status.SKIPPED for row in answers for v in row):
            raise ValueError(f"judge {self.judge.judge_id!r} did not decide the tactic criteria (skipped); "
                             "use a model judge such as local:MODEL")
        errors = sorted({v.reason for row in answers for v in row if v.status is Status.ERROR})
        if errors:  # a failed verdict is not evidence that a tactic is absent
            raise ValueError(f"judge {self.judge.judge_id!r} failed on tactic criteria: {'; '.join(errors)[:300]}")
        return np.array([[v.p_met if v.p_met is not None else float(v.status is Status.MET) for v in row]
                         for row in answers]).reshape(len(turns), len(self.tactics))

    predict = TacticClassifier.predict
    labels = TacticClassifier.labels
