"""Route each criterion to the judge that should decide it: a declarative check goes to the
rule judge; a criterion with a fitted exemplar model to the exemplar judge; everything else to
the configured model judge (or `skipped` when there is none). The defences (judges/defences.py:
pre-checks, neutralised text, optional evidence) and the quality gate (judges/gate.py, when the spec
has `gate`) apply to the exemplar and model judges; the rule judge always sees the original response."""

from __future__ import annotations

from collections.abc import Sequence

from rubricrl.core.messages import last_user_text
from rubricrl.core.verdicts import Status, Verdict, skipped_verdict
from rubricrl.judges.base import Judge, JudgeReport, JudgeRequest, JudgeStats, combined_cache
from rubricrl.judges.defences import GATE_JUDGE_ID, Defences, DefenceStats, require_evidence, screen
from rubricrl.judges.rules import RuleJudge



class RoutedJudge:
    def __init__(self, model_judge: Judge | None = None, exemplar_judge=None, defences: Defences | None = None,
                 gate=None):
        self.rules = RuleJudge()
        self.model_judge = model_judge
        self.exemplar_judge = exemplar_judge
        self.gate = gate  # a judges.gate.QualityGate, or None
        self.defences = defences if defences is not None else Defences()  # judges/defences.py; on by default
        self.defence_stats = DefenceStats()
        self.judge_id = "+".join(["rules"] + [j.judge_id for j in (gate, exemplar_judge, model_judge) if j is not None])

    @property
    def stats(self) -> JudgeStats:
        return self.model_judge.stats if self.model_judge else self.rules.stats

    def report(self) -> JudgeReport:
        """`stats` as above, the model judge's cache and endpoints, the defence counts, and the report
        of each judge as part `rules`, `exemplar` and `model` (those that are configured)."""
        parts = {name: judge.report() for name, judge in
                 (("rules", self.rules), ("exemplar", self.exemplar_judge), ("model", self.model_judge))
                 if judge is not None}
        main = parts.get("model", parts["rules"])
        return JudgeReport(self.judge_id, main.stats, cache=combined_cache(list(parts.values())),
                           endpoints=tuple(e for r in parts.values() for e in r.endpoints),
                           defences=self.defence_stats.snapshot(), parts=parts)

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

    def with_defences(self, defences: Defences) -> RoutedJudge:
        """The same rule, exemplar and model judges (one model load, one server) behind other defences."""
        return RoutedJudge(self.model_judge, self.exemplar_judge, defences, self.gate)

    @property
    def explains(self) -> bool:
        return self.model_judge is not None and self.model_judge.explains

    @property
    def checks_evidence(self) -> bool:
        """Evidence is required (defences) and the model judge explains its verdicts (a generative judge)."""
        return self.defences.require_evidence and self.explains

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        decided: list[dict[str, Verdict]] = [{} for _ in requests]
        # defences: pre-checks and neutralised text for the exemplar and model judges; rules see the original
        screens = [screen(req.response, self.defences) for req in requests]
        assessed = self._gate(requests, screens) if self.gate is not None else {}
        gated = {i: r for i, r in assessed.items() if r.fired is not None}
        prechecked, neutralised = set(), set()
        for name, judge in (("rules", self.rules), ("exemplar", self.exemplar_judge), ("model", self.model_judge)):
            if judge is None:
                continue
            sub, owners = [], []
            for i, req in enumerate(requests):
                mine = tuple(c for c in req.criteria if self.route(c) == name)
                text = req.response
                if name != "rules" and mine:
                    s = screens[i]
                    for c in mine:
                        if s.blocks(c):
                            decided[i][c.id] = s.verdict(c.id)
                            prechecked.add(i)
                        elif i in gated and c.weight > 0 and name == "model":  # no LLM call for a gated reply
                            decided[i][c.id] = Verdict(criterion_id=c.id, status=Status.UNMET, p_met=0.0,
                                                       reason=gated[i].reason, evidence=gated[i].reason,
                                                       judge_id=GATE_JUDGE_ID)
                    mine = tuple(c for c in mine if c.id not in decided[i])
                    text = s.text
                    if mine and s.neutralised:
                        neutralised.add(i)
                if mine:
                    sub.append(JudgeRequest(req.conversation, text, mine))
                    owners.append(i)
            for i, sent, verdicts in zip(owners, sub, await judge.judge(sub) if sub else []):
                if name == "model" and self.checks_evidence:
                    checked = [v if v.unverified  # a critic's estimate (judges/critic.py) quotes nothing
                               else require_evidence(v, c, sent.response, self.defences.min_quote_chars)
                               for v, c in zip(verdicts, sent.criteria)]
                    self.defence_stats.downgraded += sum(a is not b for a, b in zip(checked, verdicts))
                    verdicts = checked
                if name != "rules" and i in assessed:
                    verdicts = [self._gated(v, c, assessed[i]) for v, c in zip(verdicts, sent.criteria)]
                decided[i].update({v.criterion_id: v for v in verdicts})
        st = self.defence_stats
        st.prechecked += len(prechecked)
        st.neutralised += len(neutralised)
        for i in prechecked:
            st.precheck_reasons[screens[i].precheck] = st.precheck_reasons.get(screens[i].precheck, 0) + 1
        st.gated += len(gated)
        for result in gated.values():
            st.gate_reasons[result.fired] = st.gate_reasons.get(result.fired, 0) + 1
        for i in neutralised:
            for kind in screens[i].neutralised:
                st.neutralised_kinds[kind] = st.neutralised_kinds.get(kind, 0) + 1
        return [[decided[i].get(c.id) or skipped_verdict(
            c.id, "router", "no model judge configured (use --judge local, exemplar+local or another model judge)")
            for c in req.criteria] for i, req in enumerate(requests)]

    @staticmethod
    def _gated(verdict: Verdict, criterion, result) -> Verdict:
        """A positive criterion's verdict after the gate: unchanged when the gate did not fire; else `unmet`,
        judge id `gate`, p_met times the gate's p_ok (the probability that the reply is coherent and does
        not deflect: small, and it keeps the ranking among gated replies)."""
        if criterion.weight <= 0 or verdict.status not in (Status.MET, Status.UNMET) or result.fired is None:
            return verdict
        p = None if verdict.p_met is None else verdict.p_met * result.p_ok
        return verdict.model_copy(update={"status": Status.UNMET, "p_met": p if p is not None else 0.0,
                                          "judge_id": GATE_JUDGE_ID, "reason": result.reason,
                                          "evidence": f"{result.reason}; judge {verdict.judge_id}: "
                                                      f"{verdict.status.value} (p={verdict.p_met})"})

    def _gate(self, requests: Sequence[JudgeRequest], screens) -> dict:
        """Index -> GateResult for every reply with a positive-weight criterion for the exemplar or model
        judge that no pre-check decided."""
        todo = [i for i, req in enumerate(requests)
                if any(c.weight > 0 and self.route(c) in ("exemplar", "model") and not screens[i].blocks(c)
                       for c in req.criteria)]
        if not todo:
            return {}
        prompts = [last_user_text(requests[i].conversation) for i in todo]
        results = self.gate.assess(prompts, [screens[i].text for i in todo])
        return dict(zip(todo, results))

