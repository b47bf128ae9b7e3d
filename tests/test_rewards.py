"""Reward callables with TRL's contract: values by hand, error policies, dedup, logging."""

import asyncio

import pytest

from rubricrl.judges import make_judge
from rubricrl.judges.base import JudgeStats, StatsJudge
from rubricrl.rewards import FormatReward, JudgeFailure, LengthPenalty, RubricReward, completion_text
from rubricrl.rubrics.model import Criterion, Rubric
from rubricrl.core.verdicts import Status, Verdict, error_verdict

RUBRIC = Rubric(criteria=(
    Criterion(id="sorry", text="Says sorry.", weight=2, check={"type": "contains", "any_of": ["sorry"]}),
    Criterion(id="short", text="Short.", weight=1, check={"type": "length", "max": 8}),
    Criterion(id="lecture", text="Says should.", weight=-1, check={"type": "contains", "any_of": ["should"]}),
))
PROMPTS = [[{"role": "user", "content": "I failed."}]] * 3


def as_completions(*texts):
    return [[{"role": "assistant", "content": t}] for t in texts]


def test_rubric_reward_values_by_hand():
    reward = RubricReward(make_judge("rules"), RUBRIC)
    values = reward(PROMPTS, as_completions("I'm sorry.", "You should study much harder next time, honestly, really.",
                                            "sorry, you should rest"))
    # "I'm sorry." -> sorry 2 + short 1 = 3/3 = 1.0
    # long "should" reply -> lecture -1 = -1/3
    # "sorry, you should rest" -> 2 + 1 - 1 = 2/3
    assert values == pytest.approx([1.0, -1 / 3, 2 / 3])
    assert reward.__name__ == "rubric"


def test_rubric_column_overrides_shared_rubric():
    reward = RubricReward(make_judge("rules"), RUBRIC)
    own = '{"criteria": [{"id": "x", "text": "Has x.", "check": {"type": "contains", "any_of": ["x"]}}]}'
    values = reward(PROMPTS[:2], as_completions("x", "y"), rubric=[own, None])
    assert values == pytest.approx([1.0, 1 / 3])  # row 2 falls back to the shared rubric: short only


class ScriptedJudge(StatsJudge):
    """Returns an error verdict for responses containing 'ERR', met otherwise; counts requests."""

    judge_id = "scripted"

    def __init__(self):
        self.stats = JudgeStats()
        self.requests = 0

    async def judge(self, requests):
        self.requests += len(requests)
        return [[error_verdict(c.id, "scripted", "http: 503 after 3 retries") if "ERR" in r.response else
                 Verdict(criterion_id=c.id, status=Status.MET, p_met=0.8, judge_id="scripted")
                 for c in r.criteria] for r in requests]


MODEL_RUBRIC = Rubric(criteria=(Criterion(id="warm", text="Is warm.", weight=1),))


@pytest.mark.parametrize("policy, expected", [("mask", [0.8, None]), ("zero", [0.8, 0.0])])
def test_error_policy_mask_and_zero(policy, expected):
    reward = RubricReward(ScriptedJudge(), MODEL_RUBRIC, error_policy=policy)  # soft: p_met 0.8
    assert reward(PROMPTS[:2], as_completions("fine", "ERR")) == expected
    assert reward.totals["rows_with_errors"] == 1 and reward.totals["error_verdicts"] == 1
    assert "http: 503" in reward.last_records[1]["note"]


def test_error_policy_raise():
    reward = RubricReward(ScriptedJudge(), MODEL_RUBRIC, error_policy="raise")
    with pytest.raises(JudgeFailure, match="1 judge error"):
        reward(PROMPTS[:1], as_completions("ERR"))


def test_binary_scoring_when_not_soft():
    reward = RubricReward(ScriptedJudge(), MODEL_RUBRIC, soft=False)
    assert reward(PROMPTS[:1], as_completions("fine")) == [1.0]


def test_identical_completions_are_judged_once():
    judge = ScriptedJudge()
    reward = RubricReward(judge, MODEL_RUBRIC)
    reward(PROMPTS, as_completions("same", "same", "other"))
    assert judge.requests == 2
    assert reward.totals["judged"] == 2 and reward.totals["completions"] == 3


def test_metrics_are_logged_per_criterion():
    logged = {}
    reward = RubricReward(make_judge("rules"), RUBRIC)
    reward(PROMPTS[:2], as_completions("sorry", "no"), log_metric=lambda k, v: logged.__setitem__(k, v))
    assert logged["rubric/pass_rate/sorry"] == 0.5
    assert logged["rubric/judge_errors"] == 0.0 and logged["rubric/masked"] == 0.0


def test_structured_response_only_judged_span_and_gated_format():
    reward = RubricReward(make_judge("rules"), RUBRIC, judged_span="response")
    good = "<understanding>u</understanding><response>I'm sorry.</response>"
    values = reward(PROMPTS[:2], as_completions(good, "I'm sorry."))
    assert values == [1.0, 0.0]  # no <response> span -> the gate value 0.0, no judging
    assert reward.totals["format_gated"] == 1


def test_format_reward():
    f = FormatReward()
    ok = "<understanding>a</understanding><reasoning>b</reasoning><emotion>c</emotion><response>d</response>"
    wrong_order = "<reasoning>b</reasoning><understanding>a</understanding><emotion>c</emotion><response>d</response>"
    empty = "<understanding> </understanding><reasoning>b</reasoning><emotion>c</emotion><response>d</response>"
    twice = ok + "<response>e</response>"
    assert f(PROMPTS * 2, [ok, wrong_order, empty, twice, "plain", ok.replace("</emotion>", "")]) == \
        [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_length_penalty():
    p = LengthPenalty(max_words=10)
    assert p(PROMPTS, ["a " * 10, "a " * 15, "a " * 40]) == [0.0, -0.5, -1.0]
    with pytest.raises(ValueError):
        LengthPenalty(0)


def test_completion_text_forms():
    assert completion_text("x") == "x"
    assert completion_text([{"role": "assistant", "content": "y"}]) == "y"
    with pytest.raises(TypeError):
        completion_text(3)


def test_reward_refuses_running_event_loop():
    reward = RubricReward(make_judge("rules"), RUBRIC)

    async def inside():
        reward(PROMPTS[:1], as_completions("x"))

    with pytest.raises(RuntimeError, match="running event loop"):
        asyncio.run(inside())
