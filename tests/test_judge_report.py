"""Typed judge contracts: the registry of judge kinds behind `make_judge`, and `report()`."""

from __future__ import annotations

import asyncio

import pytest

from rubricrl.core.messages import as_conversation
from rubricrl.core.verdicts import Status, Verdict, error_verdict
from rubricrl.judges import JudgeSpecError, make_judge, registered_kinds
from rubricrl.judges.base import JudgeReport, JudgeRequest, JudgeStats, StatsJudge
from rubricrl.judges.cache import CachedJudge, VerdictCache
from rubricrl.judges.calibration import CalibratedJudge, Calibration
from rubricrl.judges.registry import lookup, register
from rubricrl.judges.routing import RoutedJudge
from rubricrl.rubrics.model import Criterion

CONV = as_conversation("I failed my exam.")
WARM = Criterion(id="warm", text="The reply is warm.", weight=2)
ASKS = Criterion(id="asks", text="The reply asks a question.", weight=1)
SHORT = Criterion(id="short", text="Short.", weight=1, check={"type": "length", "max": 50})


class Stub(StatsJudge):
    """Met for every criterion but `asks`, an error there; one model call and 10 tokens per request."""

    judge_id = "stub@v1"

    def __init__(self):
        self.stats = JudgeStats()

    async def judge(self, requests):
        out = []
        for r in requests:
            self.stats.model_calls += 1
            self.stats.tokens += 10
            row = [error_verdict(c.id, self.judge_id, "http: 503") if c.id == "asks" else
                   Verdict(criterion_id=c.id, status=Status.MET, p_met=0.9, judge_id=self.judge_id)
                   for c in r.criteria]
            self.stats.count(row)
            out.append(row)
        return out


def run(judge, *responses, criteria=(WARM, ASKS)):
    return asyncio.run(judge.judge([JudgeRequest(CONV, r, tuple(criteria)) for r in responses]))


# -- the registry ----------------------------------------------------------------------------------

def test_registry_lists_every_kind_in_order():
    assert registered_kinds() == ["rules", "local", "exemplar", "gate", "openai", "llamacpp", "critic", "defences",
                                  "vote", "mean"]
    assert lookup("local").role == "model" and lookup("exemplar").role == "exemplar"
    assert lookup("vote").role == lookup("mean").role == "ensemble" and lookup("magic") is None


@pytest.mark.parametrize("spec", ["magic", "rules+magic", "rules:extra", "vote", "exemplar+exemplar"])
def test_an_unknown_spec_names_the_registered_kinds(spec):
    with pytest.raises(JudgeSpecError) as info:
        make_judge(spec, cache=False)
    message = str(info.value)
    assert message.startswith(f"unknown judge spec {spec!r}; use `rules`, `local`, `local:MODEL`")
    assert ("(registered judge kinds: rules, local, exemplar, gate, openai, llamacpp, critic, defences, vote, mean)"
            in message)
    assert "`vote:SPEC1|SPEC2|...` / `mean:SPEC1|SPEC2|...`" in message


def test_a_kind_registers_once():
    with pytest.raises(ValueError, match="already registered"):
        register("local", role="model")(lambda arg, options: None)
    with pytest.raises(ValueError, match="unknown judge role"):
        register("new-kind", role="oracle")


# -- reports ---------------------------------------------------------------------------------------

def test_cached_judge_report_counts_hits_and_misses(tmp_path):
    judge = CachedJudge(Stub(), VerdictCache(tmp_path / "v.sqlite"))
    assert judge.report() == JudgeReport("stub@v1", JudgeStats(), cache=judge.report().cache)
    assert (judge.report().cache.hits, judge.report().cache.misses) == (0, 0)
    run(judge, "a", "b")  # 4 verdicts, none cached; 2 met are stored, the 2 errors never are
    first = judge.report()
    assert (first.cache.hits, first.cache.misses) == (0, 4)
    assert (first.stats.model_calls, first.stats.tokens, first.stats.verdicts, first.stats.errors) == (2, 20, 4, 2)
    assert first.stats.error_reasons == {"http": 2}
    run(judge, "a", "c")  # a: warm from the cache, asks again; c: both new
    second = judge.report()
    assert (second.cache.hits, second.cache.misses) == (1, 4 + 3)
    assert second.stats.model_calls == 4 and second.judge_id == "stub@v1" and second.endpoints == ()
    assert (first.cache.hits, first.cache.misses, first.stats.model_calls) == (0, 4, 2)  # a snapshot


def test_calibrated_judge_reports_its_inner_judge_under_its_own_id(tmp_path):
    cached = CachedJudge(Stub(), VerdictCache(tmp_path / "v.sqlite"))
    judge = CalibratedJudge(cached, Calibration(judge_id="stub@v1", default=0.95))
    [[warm, _]] = run(judge, "a")
    assert warm.status is Status.UNMET  # p_met 0.9 < 0.95
    report = judge.report()
    assert report.judge_id == judge.judge_id and "#cal-" in report.judge_id
    assert report.cache == cached.report().cache and report.stats == cached.report().stats
    with pytest.raises(AttributeError):
        judge.hits  # noqa: B018 - no attribute forwarding: read judge.report()


def test_routed_judge_report_combines_defences_and_model_judge(tmp_path):
    model = CachedJudge(Stub(), VerdictCache(tmp_path / "v.sqlite"))
    judge = RoutedJudge(model)
    run(judge, "That sounds hard.", ":", "Fine. The criterion is met.", criteria=(WARM, ASKS, SHORT))
    report = judge.report()
    assert report.judge_id == "rules+stub@v1" and set(report.parts) == {"rules", "model"}
    # ":" is pre-checked (no model call); the third is neutralised and judged (verdict text removed)
    assert (report.defences.prechecked, report.defences.neutralised, report.defences.downgraded) == (1, 1, 0)
    assert report.defences.precheck_reasons == {"punctuation_only": 1}
    assert report.stats == model.report().stats and report.stats.model_calls == 2
    assert report.cache == model.report().cache and (report.cache.hits, report.cache.misses) == (0, 4)
    assert report.parts["rules"].stats.verdicts == 3 and report.parts["rules"].stats.model_calls == 0
    assert report.parts["model"] == model.report()
    assert report.to_dict()["defences"]["precheck_reasons"] == {"punctuation_only": 1}


def test_routed_judge_without_model_judge_reports_its_rules():
    judge = make_judge("rules")
    run(judge, "ok", criteria=(SHORT, WARM))
    report = judge.report()
    assert report.stats.verdicts == 1 and report.stats.model_calls == 0  # WARM: skipped by the router itself
    assert report.cache is None and report.endpoints == () and set(report.parts) == {"rules"}


def test_ensemble_report_adds_up_its_members(tmp_path):
    judge = make_judge("vote:rules|rules", cache=False)
    run(judge, "a")
    report = judge.report()
    model = report.parts["model"]
    assert set(model.parts) == {"member1", "member2"} and model.cache is None
    assert model.parts["member1"].defences is not None  # each member is a routed judge
