"""Critic mode (judges/critic.py): which criteria the verifier sees, what the others carry, the counts,
the online critic's refit, and the `critic:` spec."""

import asyncio
import math
from types import SimpleNamespace

import numpy as np
import pytest

from rubricrl.core.messages import as_conversation
from rubricrl.core.verdicts import Status, Verdict, error_verdict, skipped_verdict
from rubricrl.judges import Defences, JudgeSpecError, RoutedJudge, make_judge
from rubricrl.judges.base import JudgeRequest, JudgeStats, StatsJudge
from rubricrl.judges.critic import (CriticHead, CriticJudge, CriticSettings, OnlineCritic, fit_map, p_fail,
                                    parse_critic_spec)
from rubricrl.judges.exemplar import CriterionModel, ExemplarJudge, criterion_key
from rubricrl.rewards.functions import RubricReward
from rubricrl.rubrics.model import Criterion, Rubric

A = Criterion(id="a", text="The reply names the feeling.", weight=3)
B = Criterion(id="b", text="The reply refers to the situation.", weight=2)
P = Criterion(id="p", text="The reply blames the person.", weight=-2)  # a pitfall
C = Criterion(id="c", text="The reply invites more.", weight=1)
CRITERIA = (A, B, P, C)
# critic p_met -> p_fail: a 1 - 0.9 = 0.1, b 1 - 0.3 = 0.7, p (pitfall) 0.6, c 1 - 0.5 = 0.5
CRITIC_P = {"a": 0.9, "b": 0.3, "p": 0.6, "c": 0.5}


class Critic(StatsJudge):
    """Scripted p_met per criterion id (None: skipped, no estimate); records what it was asked."""

    def __init__(self, p: dict, name: str = "stub-critic"):
        self.judge_id, self.p, self.stats, self.seen = name, p, JudgeStats(), []

    async def judge(self, requests):
        out = []
        for r in requests:
            self.seen.append([c.id for c in r.criteria])
            self.stats.model_calls += 1
            out.append([skipped_verdict(c.id, self.judge_id, "no model") if self.p.get(c.id) is None else
                        Verdict(criterion_id=c.id, status=Status.MET if self.p[c.id] >= 0.5 else Status.UNMET,
                                p_met=self.p[c.id], evidence="critic says so", judge_id=self.judge_id)
                        for c in r.criteria])
        return out


class Verifier(StatsJudge):
    """Scripted status per criterion id ("met", "unmet", "error", or "missing": no verdict at all); one
    model call per criterion asked (like the logprob and per_criterion HTTP modes)."""

    def __init__(self, answers: dict, explains: bool = False):
        self.judge_id, self.answers, self.stats, self.asked = "stub-verifier", answers, JudgeStats(), []
        self.explains = explains

    async def judge(self, requests):
        out = []
        for r in requests:
            self.asked.append((r.response, [c.id for c in r.criteria]))
            self.stats.model_calls += len(r.criteria)
            row = []
            for c in r.criteria:
                status = self.answers.get(c.id, "unmet")
                if status == "error":
                    row.append(error_verdict(c.id, self.judge_id, "timeout: no answer"))
                elif status != "missing":
                    row.append(Verdict(criterion_id=c.id, status=Status(status),
                                       p_met=1.0 if status == "met" else 0.0, judge_id=self.judge_id))
            out.append(row)
        return out


def run(judge, responses=("reply",), criteria=CRITERIA):
    return asyncio.run(judge.judge([JudgeRequest(as_conversation("hi"), r, tuple(criteria)) for r in responses]))


def critic_judge(critic_p=CRITIC_P, answers=None, **settings):
    critic, verifier = Critic(critic_p), Verifier(answers or {"b": "unmet", "p": "unmet", "c": "met", "a": "met"})
    return CriticJudge(critic, verifier, CriticSettings(**settings)), critic, verifier


def test_p_fail_is_one_minus_p_met_for_positive_criteria_and_p_met_for_pitfalls():
    v = Verdict(criterion_id="x", status=Status.MET, p_met=0.8, judge_id="j")
    assert p_fail(A, v) == pytest.approx(0.2) and p_fail(P, v) == pytest.approx(0.8)
    assert p_fail(A, Verdict(criterion_id="x", status=Status.UNMET, judge_id="j")) == 1.0  # no p_met: unmet = 0
    assert p_fail(A, skipped_verdict("x", "j", "no model")) is None and p_fail(A, None) is None


def test_top_k_verifies_the_most_likely_failed_and_marks_the_rest_unverified():
    judge, critic, verifier = critic_judge(k=2)
    [row] = run(judge)
    # ranked by p_fail: b 0.7, p 0.6, c 0.5, a 0.1 -> the verifier sees b and p only, in rubric order
    assert verifier.asked == [("reply", ["b", "p"])] and critic.seen == [["a", "b", "p", "c"]]
    a, b, p, c = row
    assert [v.criterion_id for v in row] == ["a", "b", "p", "c"]
    assert (b.judge_id, b.status) == (p.judge_id, p.status) == ("stub-verifier", Status.UNMET)
    assert not b.unverified and not p.unverified
    # a and c keep the critic's estimate, marked
    assert a.unverified and c.unverified and a.judge_id == "unverified:stub-critic"
    assert (a.status, a.p_met, c.status, c.p_met) == (Status.MET, 0.9, Status.MET, 0.5)
    assert a.reason == "unverified: p_fail=0.100, not among the 2 criteria ranked first (fail)"
    assert a.evidence == "unverified: critic estimate p=0.900; critic says so"
    # counts: 2 verified (2 verifier calls), 2 unverified; b unmet is a confirmed failure, p unmet is not
    st = judge.stats
    assert (st.verified, st.unverified, st.confirmed, st.verdicts) == (2, 2, 1, 4)
    assert st.model_calls == 1 + 2 and judge.report().parts["verifier"].stats.model_calls == 2

    judge, _, verifier = critic_judge(k=1)
    run(judge, responses=("r1", "r2"))
    assert verifier.asked == [("r1", ["b"]), ("r2", ["b"])]  # one batch, one criterion per reply
    assert (judge.stats.verified, judge.stats.unverified, verifier.stats.model_calls) == (2, 6, 2)


def test_ties_go_to_the_larger_weight_then_to_rubric_order():
    # every p_fail 0.5: a (3), then b and p (2, b first in the rubric), then c (1)
    judge, _, verifier = critic_judge(critic_p={"a": 0.5, "b": 0.5, "p": 0.5, "c": 0.5}, k=3)
    run(judge)
    assert verifier.asked == [("reply", ["a", "b", "p"])]
    judge, _, verifier = critic_judge(critic_p={"a": 0.5, "b": 0.5, "p": 0.5, "c": 0.5}, k=2)
    run(judge)
    assert verifier.asked == [("reply", ["a", "b"])]


def test_cutoff_mode_and_cutoff_with_k():
    judge, _, verifier = critic_judge(cutoff=0.55)
    [row] = run(judge)
    assert verifier.asked == [("reply", ["b", "p"])]  # 0.7 and 0.6 >= 0.55; c 0.5 and a 0.1 are not
    assert row[3].reason == "unverified: p_fail=0.500 below the cutoff 0.55"
    judge, _, verifier = critic_judge(cutoff=0.5)
    run(judge)
    assert verifier.asked == [("reply", ["b", "p", "c"])]  # >= is inclusive
    judge, _, verifier = critic_judge(cutoff=0.55, k=1)
    run(judge)
    assert verifier.asked == [("reply", ["b"])]
    judge, _, verifier = critic_judge(cutoff=0.95)
    [row] = run(judge)
    assert verifier.asked == [] and all(v.unverified for v in row) and judge.stats.verified == 0


def test_rank_uncertain_orders_by_expected_reward_error():
    # |w| p (1 - p): a 3 * 0.1 * 0.9 = 0.27, b 2 * 0.7 * 0.3 = 0.42, p 2 * 0.6 * 0.4 = 0.48, c 0.25
    judge, _, verifier = critic_judge(k=2, rank="uncertain")
    run(judge)
    assert verifier.asked == [("reply", ["b", "p"])]
    judge, _, verifier = critic_judge(k=3, rank="uncertain")
    [row] = run(judge)
    assert verifier.asked == [("reply", ["a", "b", "p"])]  # a (0.27) before c (0.25)
    assert row[3].reason == "unverified: p_fail=0.500, not among the 3 criteria ranked first (uncertain)"


def test_criteria_without_a_critic_estimate_are_always_verified():
    judge, _, verifier = critic_judge(critic_p={"a": 0.9, "b": None, "p": 0.6, "c": 0.5}, k=1)
    [row] = run(judge)
    assert verifier.asked == [("reply", ["b", "p"])]  # b: no estimate; p: the top 1 of the rest
    assert [v.unverified for v in row] == [True, False, False, True]
    assert judge.stats.verified == 2


def test_verifier_errors_stay_errors():
    judge, _, _ = critic_judge(k=2, answers={"b": "error", "p": "missing"})
    [row] = run(judge)
    assert row[1].status is Status.ERROR and row[1].reason == "timeout: no answer" and not row[1].unverified
    assert row[2].status is Status.ERROR and row[2].reason == "no verdict from the verifier"
    assert judge.stats.errors == 2 and judge.stats.confirmed == 0 and judge.stats.verified == 2


def test_through_the_router_rules_always_run_and_unverified_estimates_skip_the_evidence_check():
    check = Criterion(id="q", text="Asks a question.", weight=1, check={"type": "regex", "pattern": r"\?"})
    critic, verifier = Critic(CRITIC_P), Verifier({"b": "met", "p": "unmet"}, explains=True)
    router = RoutedJudge(CriticJudge(critic, verifier, CriticSettings(k=2)),
                         defences=Defences(require_evidence=True))
    [row] = run(router, responses=("How are you?",), criteria=CRITERIA + (check,))
    assert critic.seen == [["a", "b", "p", "c"]]  # the check went to the rule judge
    assert row[4].judge_id == "rules" and row[4].status is Status.MET
    # a is an unverified `met` without a quote: kept; b is the verifier's `met` without a quote: downgraded
    assert row[0].status is Status.MET and row[0].unverified
    assert row[1].status is Status.UNMET and row[1].reason.startswith("evidence:")
    report = router.report()
    assert (report.stats.verified, report.stats.unverified) == (2, 2)
    assert set(report.parts["model"].parts) == {"critic", "verifier"}


def test_soft_reward_and_training_logs_count_verified_and_unverified():
    rubric = Rubric(id="r", criteria=list(CRITERIA))
    reward = RubricReward(RoutedJudge(CriticJudge(Critic(CRITIC_P), Verifier({"b": "met", "p": "unmet"}),
                                                  CriticSettings(k=2))), rubric)
    logged = {}
    [value] = reward(["hi"], ["reply"], log_metric=lambda k, v: logged.__setitem__(k, v))
    # a 3 * 0.9 (unverified) + b 2 * 1.0 + p -2 * 0.0 + c 1 * 0.5 (unverified) = 5.2 over 3 + 2 + 1 = 6
    assert value == pytest.approx(5.2 / 6)
    assert (logged["rubric/judge_verified"], logged["rubric/judge_unverified"], logged["rubric/critic_confirmed"]) \
        == (2.0, 2.0, 0.0)
    assert logged["rubric/judge_calls"] == 3.0  # one critic call + two verifier calls
    assert logged["rubric/critic_saved"] == 0.5  # 2 unverified of 2 + 2: half the verifier verdicts saved


def critic_router():
    # ranked by p_fail: b 0.7, p 0.6 verified; the verifier finds b unmet (a positive criterion failed) and
    # p met (a pitfall happened): both confirmed. a (0.9) and c (0.5) keep the critic's estimate.
    return RoutedJudge(CriticJudge(Critic(CRITIC_P), Verifier({"b": "unmet", "p": "met"}), CriticSettings(k=2)))


def test_reward_server_reports_critic_counts_per_row_in_extra_logs_and_metrics():
    import json

    from fastapi.testclient import TestClient

    from rubricrl.integrations.reward_server import create_app
    from rubricrl.serve.settings import ServerSettings

    rubric = Rubric(id="r", criteria=list(CRITERIA))
    client = TestClient(create_app(ServerSettings(rubric=rubric, judge="critic"), judge=critic_router()))
    body = {"query": ["hi reply one", "hi reply two"], "prompts": ["hi ", "hi "], "labels": ["", ""]}
    answer = client.post("/", json=body).json()
    # soft: a 3 * 0.9 + b 2 * 0.0 + p -2 * 1.0 + c 1 * 0.5 = 1.2 over 3 + 2 + 1 = 6
    assert answer["rewards"] == pytest.approx([0.2, 0.2])
    logs = answer["extra_logs"]
    assert (logs["rubric_verified"], logs["rubric_unverified"], logs["rubric_confirmed"]) == \
        ([2.0, 2.0], [2.0, 2.0], [2.0, 2.0])
    assert logs["rubric_pairs"] == [0.0, 0.0]
    text = client.get("/metrics").text
    assert 'rubricrl_judge_verified_total{part="model"} 4.0' in text
    assert 'rubricrl_judge_unverified_total{part="model"} 4.0' in text
    assert 'rubricrl_judge_confirmed_total{part="model"} 4.0' in text
    # a judge without a critic: the same keys, all 0
    plain = TestClient(create_app(ServerSettings(rubric=rubric, judge="v"), judge=RoutedJudge(Verifier({}))))
    logs = plain.post("/", json=body).json()["extra_logs"]
    assert logs["rubric_verified"] == logs["rubric_unverified"] == logs["rubric_confirmed"] == [0.0, 0.0]
    assert json.dumps(sorted(logs)) == json.dumps(sorted(answer["extra_logs"]))


def test_verl_batch_reports_critic_counts_per_sample_and_in_totals(monkeypatch):
    import json

    import rubricrl.integrations.verl as rv
    import rubricrl.judges

    monkeypatch.setattr(rubricrl.judges, "make_judge", lambda spec: critic_router())
    rubric = json.dumps({"id": "r", "criteria": [c.model_dump(mode="json") for c in CRITERIA]})
    before = rv.totals()
    out = rv.compute_score_batch(["ds", "ds"], ["reply one", "reply two"], [rubric, rubric],
                                 [{"prompt": "hi"}, {"prompt": "hi"}], judge="critic-test")
    assert [o["score"] for o in out] == pytest.approx([0.2, 0.2])
    assert [(o["rubric_verified"], o["rubric_unverified"], o["rubric_confirmed"]) for o in out] == [(2.0, 2.0, 2.0)] * 2
    after = rv.totals()
    assert {k: after.get(k, 0) - before.get(k, 0) for k in ("verified", "unverified", "confirmed")} == \
        {"verified": 4, "unverified": 4, "confirmed": 4}


# -- the online critic ------------------------------------------------------------------------------


def test_fit_map_solves_a_hand_computed_case():
    # x = +1 (met) and x = -1 (unmet), prior centred on 0: by symmetry b = 0 and the optimum solves
    # 2 sigmoid(w) - 2 + prior * w = 0; with prior = 0.5 / ln 3 that is w = ln 3 (sigmoid = 0.75)
    w, b = fit_map(np.array([[1.0], [-1.0]]), np.array([1.0, 0.0]), np.zeros(1), 0.0, prior=0.5 / math.log(3))
    assert w[0] == pytest.approx(math.log(3), abs=1e-7) and b == pytest.approx(0.0, abs=1e-7)
    # no data pull against the prior: one-class data with a strong prior stays near the centre
    w, b = fit_map(np.array([[0.0]]), np.array([1.0]), np.zeros(1), -1.0, prior=1e6)
    assert b == pytest.approx(-1.0, abs=1e-5)


def test_online_critic_starts_as_the_exemplar_model():
    model = CriterionModel("a", A.text, coef=np.array([1.0, 2.0]), intercept=0.5, platt_a=2.0, platt_b=-1.0,
                           threshold=0.3)
    exemplar = SimpleNamespace(models={criterion_key(A.text): model}, encoder="enc", judge_id="exemplar:x@1",
                               inputs=lambda pairs: np.array([[1.0, 1.0] for _ in pairs]))
    online = OnlineCritic.from_exemplar(exemplar, every=4)
    head = online.heads[criterion_key(A.text)]
    # the exemplar's p_met at x = (1, 1): sigmoid(2 * (1 + 2 + 0.5) - 1) = sigmoid(6)
    assert head.p_met(np.array([1.0, 1.0])) == pytest.approx(1 / (1 + math.exp(-6)))
    assert head.p_met(np.array([1.0, 1.0])) == pytest.approx(float(model.p_met(np.array([[1.0, 1.0]]))[0]))
    assert (head.threshold, online.judge_id) == (0.3, "online:exemplar:x@1")
    assert online.inputs([("what the person said", "a reply")]).tolist() == [[1.0, 1.0]]  # the exemplar's inputs


def test_online_critic_refit_changes_its_ranking_after_verifications():
    x, y = Criterion(id="x", text="Criterion x.", weight=1), Criterion(id="y", text="Criterion y.", weight=1)
    vectors = {"r1": [1.0, 0.0], "r2": [0.0, 1.0]}
    embed = lambda pairs: np.array([vectors[reply] for _, reply in pairs])  # noqa: E731
    b0 = math.log(0.2 / 0.8)  # x starts at p_met 0.2 (p_fail 0.8), y at 0.5 (p_fail 0.5)
    heads = {criterion_key(x.text): CriticHead(np.zeros(2), b0, np.zeros(2), b0),
             criterion_key(y.text): CriticHead(np.zeros(2), 0.0, np.zeros(2), 0.0)}
    online = OnlineCritic(heads, embed, every=2, prior=0.1)
    verifier = Verifier({"x": "met", "y": "unmet"})
    judge = CriticJudge(online, verifier, CriticSettings(k=1))
    [r1, _] = run(judge, responses=("r1", "r2"), criteria=(x, y))
    assert verifier.asked == [("r1", ["x"]), ("r2", ["x"])]  # x is ranked first, found met twice
    assert r1[1].unverified and r1[1].judge_id == "unverified:online:online" and r1[1].p_met == pytest.approx(0.5)
    assert online.refits == 1 and online.pending == 0
    # the refit: MAP optimum, gradient X'(p - t) + prior (theta - theta0) = 0 by hand
    hx = heads[criterion_key(x.text)]
    X = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    theta = np.append(hx.w, hx.b)
    p = 1 / (1 + np.exp(-X @ theta))
    assert np.allclose(X.T @ (p - 1.0) + 0.1 * (theta - np.array([0.0, 0.0, b0])), 0.0, atol=1e-8)
    assert hx.p_met(np.array([1.0, 0.0])) > 0.5  # x now looks met: p_fail below y's 0.5
    run(judge, responses=("r1", "r2"), criteria=(x, y))
    assert verifier.asked[2:] == [("r1", ["y"]), ("r2", ["y"])]  # the ranking changed
    assert (judge.stats.verified, judge.stats.unverified, judge.stats.confirmed) == (4, 4, 2)
    assert online.refits == 2 and len(heads[criterion_key(y.text)].targets) == 2


def test_online_critic_waits_for_every_n_verifications_and_learns_uncovered_criteria():
    z = Criterion(id="z", text="Criterion z.", weight=1)
    online = OnlineCritic({}, lambda pairs: np.array([[1.0] for _ in pairs]), every=3, prior=1.0)
    judge = CriticJudge(online, Verifier({"z": "unmet"}), CriticSettings(k=1))
    [[v]] = run(judge, criteria=(z,))
    assert not v.unverified and online.refits == 0 and online.pending == 1  # no model yet: always verified
    run(judge, responses=("a", "b"), criteria=(z,))
    assert online.refits == 1 and judge.stats.verified == 3
    [[v]] = asyncio.run(online.judge([JudgeRequest(as_conversation("hi"), "c", (z,))]))
    assert v.status is Status.UNMET and v.judge_id == "online:online"  # an estimate now
    # three unmet verdicts at x = 1, prior 1 centred on 0: w = b and 3 sigmoid(w + b) + w = 0 (w ~ -0.646)
    [head] = online.heads.values()
    assert head.w[0] == pytest.approx(head.b) and 3 * v.p_met + head.b == pytest.approx(0.0, abs=1e-8)
    assert v.p_met == pytest.approx(0.216, abs=1e-3)


# -- the spec -----------------------------------------------------------------------------------------

URL = "openai:http://127.0.0.1:9/v1?mode=logprob"


def test_spec_builds_a_critic_judge_behind_the_router():
    judge = make_judge(f"critic:k=2:exemplar>{URL}", cache=False)
    critic = judge.model_judge
    assert isinstance(critic, CriticJudge) and isinstance(critic.critic, ExemplarJudge)
    assert critic.settings == CriticSettings(k=2) and judge.exemplar_judge is None
    assert critic.judge_id.startswith("critic:k=2:exemplar:fitted@") and critic.judge_id.endswith("/logprob@http-v1")
    judge = make_judge(f"gate+critic:p=0.4,k=3,rank=uncertain,online=16,prior=2:exemplar>{URL}", cache=False)
    critic = judge.model_judge
    assert judge.gate is not None and isinstance(critic.critic, OnlineCritic)
    assert critic.settings == CriticSettings(k=3, cutoff=0.4, rank="uncertain", online=16, prior=2.0)
    assert (critic.critic.every, critic.critic.prior) == (16, 2.0)
    assert critic.judge_id.startswith("critic:k=3,p=0.4,rank=uncertain,online=16,prior=2:online:exemplar:fitted@")
    assert parse_critic_spec("k=1:exemplar:DIR>llamacpp?mode=logprob")[1:] == ("exemplar:DIR", "llamacpp?mode=logprob")


@pytest.mark.parametrize("spec, message", [
    ("critic:exemplar>local", "write `critic:SETTINGS:CRITIC>VERIFIER`, e.g. `critic:k=2:exemplar>local`"),
    ("critic:k=2:exemplar", "name one critic and one verifier judge separated by one `>`"),
    ("critic:k=2:exemplar>local>local", "name one critic and one verifier judge separated by one `>`"),
    ("critic:k=2:>local", "name one critic and one verifier judge"),
    ("critic:rank=fail:exemplar>local", "a critic needs a budget: k=N (top N per reply), p=X (p_fail >= X) and/or u=X"),
    ("critic:k=0:exemplar>local", "k=0: verify at least one criterion per reply"),
    ("critic:k=two:exemplar>local", "critic setting 'k=two': 'two' is not an integer"),
    ("critic:p=1.5:exemplar>local", "p=1.5: the cutoff is a probability in (0, 1]"),
    ("critic:k=1,k=2:exemplar>local", "critic setting k given twice"),
    ("critic:k=1,depth=2:exemplar>local", "unknown critic setting 'depth=2'; known: k=N, p=X"),
    ("critic:k=1,rank=best:exemplar>local", "rank=best: use one of fail, uncertain"),
    ("critic:k=1,online=0:exemplar>local", "online=0: refit after N >= 1 verifications"),
    ("critic:k=1,online=4,prior=0:exemplar>local", "prior=0.0: the prior's precision must be a positive number"),
    ("critic:k=1:gate>local", "the critic `gate` must be one model or exemplar judge"),
    ("critic:k=1:exemplar>vote:local|local", "the verifier `vote:local|local` must be one model or exemplar judge"),
    ("critic:k=1:magic>local", "the critic `magic` must be one model or exemplar judge"),
    (f"critic:k=1,online=8:{URL}>exemplar", "online=N refits embedding models warm-started from exemplar models"),
])
def test_bad_specs_say_what_is_wrong(spec, message):
    with pytest.raises(JudgeSpecError) as info:
        make_judge(spec, cache=False)
    assert message in str(info.value)


def test_dialogue_rubric_reward_logs_critic_counts_per_call():
    from rubricrl.dialogue.rewards import DialogueRubricReward
    from rubricrl.dialogue.rollout import Transcript, Turn

    t = Transcript(trajectory_id="t", persona_id="p", group="g", seed=0, start_emotion=40, final_emotion=42,
                   end_reason="max_turns", turns=[
                       Turn(role="user", text="I lost my job.", emotion=40),
                       Turn(role="supporter", text="reply one"), Turn(role="user", text="yes", emotion=41, change=1),
                       Turn(role="supporter", text="reply two"), Turn(role="user", text="", emotion=42, change=1)])
    reward = DialogueRubricReward(critic_router(), Rubric(id="r", criteria=list(CRITERIA)), "turn")
    logged = {}
    # each supporter turn: 1.2 / 6 = 0.2 (as in the reward server test above); the mean of two turns 0.2
    assert reward([None], [None], transcript=[t], log_metric=lambda k, v: logged.__setitem__(k, v)) == \
        pytest.approx([0.2])
    # two turns judged, each with 2 verified (both confirmed failed) and 2 unverified criteria
    assert (logged["dialogue_rubric/judge_verified"], logged["dialogue_rubric/judge_unverified"],
            logged["dialogue_rubric/critic_confirmed"], logged["dialogue_rubric/critic_saved"]) == (4.0, 4.0, 4.0, 0.5)
    # the stub critic counts one call per turn judged, the stub verifier one per verified criterion: 2 + 4
    assert logged["dialogue_rubric/judge_calls"] == 2.0 + 4.0


# -- the group budget, the uncertainty cutoff, hard estimates ------------------------------------------

# rank=uncertain scores |w| p_fail (1 - p_fail):
# SURE   a 3 * .01 * .99 = .0297, b 2 * .02 * .98 = .0392, p 2 * .01 * .99 = .0198, c 1 * .03 * .97 = .0291
# UNSURE a 3 * .5 * .5 = .75,     b 2 * .6 * .4 = .48,     p 2 * .5 * .5 = .5,      c 1 * .7 * .3 = .21
SURE = {"a": 0.99, "b": 0.98, "p": 0.01, "c": 0.97}
UNSURE = {"a": 0.5, "b": 0.4, "p": 0.5, "c": 0.3}


class ReplyCritic(Critic):
    """Scripted p_met per reply and criterion id."""

    def __init__(self, by_reply: dict):
        super().__init__({})
        self.by_reply = by_reply

    async def judge(self, requests):
        out = []
        for r in requests:
            self.p = self.by_reply[r.response]
            out += await super().judge([r])
        return out


def judge_group(requests, by_reply, **settings):
    verifier = Verifier({"a": "met", "b": "unmet", "p": "unmet", "c": "met"})
    judge = CriticJudge(ReplyCritic(by_reply), verifier, CriticSettings(**settings))
    return judge, verifier, asyncio.run(judge.judge(requests))


def test_group_budget_spends_k_times_n_verifications_where_the_group_is_least_sure():
    same, other = as_conversation("my exam went badly"), as_conversation("my dog died")
    requests = [JudgeRequest(same, "r1", CRITERIA), JudgeRequest(same, "r2", CRITERIA),
                JudgeRequest(other, "r3", CRITERIA)]
    by_reply = {"r1": SURE, "r2": UNSURE, "r3": SURE}
    # per reply, k=1: each reply's top criterion (r1 and r3: b .0392; r2: a .75)
    _, verifier, _ = judge_group(requests, by_reply, k=1, rank="uncertain")
    assert verifier.asked == [("r1", ["b"]), ("r2", ["a"]), ("r3", ["b"])]
    # budget=group, k=1: r1 and r2 share 1 x 2 = 2 verifications, both go to r2 (a .75, p .5); r3 is a
    # group of one (another conversation) and keeps its own 1
    judge, verifier, rows = judge_group(requests, by_reply, k=1, rank="uncertain", budget="group")
    assert verifier.asked == [("r2", ["a", "p"]), ("r3", ["b"])]
    assert all(v.unverified for v in rows[0])
    assert rows[0][0].reason == ("unverified: p_fail=0.010, not among the 1 x 2 criteria ranked first in its group "
                                 "of 2 replies (uncertain)")
    assert rows[2][0].reason.endswith("not among the 1 x 1 criteria ranked first in its group of 1 replies (uncertain)")
    assert (judge.stats.verified, judge.stats.unverified) == (3, 9)
    # k=2: 4 verifications for r1 and r2, all r2's (a .75, p .5, b .48, c .21 all above r1's best, b .0392);
    # r3 alone keeps 2: b .0392 and a .0297 (asked in rubric order)
    _, verifier, _ = judge_group(requests, by_reply, k=2, rank="uncertain", budget="group")
    assert verifier.asked == [("r2", ["a", "b", "p", "c"]), ("r3", ["a", "b"])]


def test_group_budget_ties_and_criteria_without_an_estimate():
    conv = as_conversation("hi")
    flat = {"a": 0.5, "b": 0.5, "p": 0.5, "c": 0.5}
    requests = [JudgeRequest(conv, "r1", CRITERIA), JudgeRequest(conv, "r2", CRITERIA)]
    # every p_fail 0.5 (rank=fail): larger |weight| first, then reply order, then rubric order: budget 2 -> both a;
    # budget 4 -> both a, then the |weight| 2 ones of r1 (b, p) before those of r2
    _, verifier, _ = judge_group(requests, {"r1": flat, "r2": flat}, k=1, budget="group")
    assert verifier.asked == [("r1", ["a"]), ("r2", ["a"])]
    _, verifier, _ = judge_group(requests, {"r1": flat, "r2": flat}, k=2, budget="group")
    assert verifier.asked == [("r1", ["a", "b", "p"]), ("r2", ["a"])]
    # a criterion without an estimate is verified on top of the group's budget
    _, verifier, _ = judge_group(requests, {"r1": {**SURE, "c": None}, "r2": UNSURE}, k=1, rank="uncertain",
                                 budget="group")
    assert verifier.asked == [("r1", ["c"]), ("r2", ["a", "p"])]


def test_group_budget_through_the_reward_pools_by_prompt():
    rubric = Rubric(id="r", criteria=list(CRITERIA))
    critic = ReplyCritic({"sure": SURE, "unsure": UNSURE})
    verifier = Verifier({"a": "met", "b": "unmet", "p": "unmet", "c": "met"})
    reward = RubricReward(RoutedJudge(CriticJudge(critic, verifier, CriticSettings(k=1, rank="uncertain",
                                                                                   budget="group"))), rubric)
    reward(["first prompt", "first prompt", "second prompt", "second prompt"], ["sure", "unsure", "unsure", "sure"])
    # two GRPO groups of two in one reward call: each spends its 2 verifications on its unsure reply
    assert verifier.asked == [("unsure", ["a", "p"]), ("unsure", ["a", "p"])]


def test_uncertainty_cutoff():
    # min(p_fail, 1 - p_fail): a .1, b .3, p .4, c .5
    judge, _, verifier = critic_judge(doubt=0.35)
    [row] = run(judge)
    assert verifier.asked == [("reply", ["p", "c"])]
    assert row[1].reason == "unverified: p_fail=0.700, the critic's likelier outcome is wrong with p=0.300 < u=0.35"
    judge, _, verifier = critic_judge(doubt=0.5)
    run(judge)
    assert verifier.asked == [("reply", ["c"])]  # >= is inclusive
    judge, _, verifier = critic_judge(doubt=0.35, k=1, rank="uncertain")
    run(judge)
    assert verifier.asked == [("reply", ["p"])]  # p .48 before c .25
    judge, _, verifier = critic_judge(doubt=0.2, cutoff=0.65)
    run(judge)
    assert verifier.asked == [("reply", ["b"])]  # both cutoffs: b (p_fail .7, .3) only


def test_unverified_hard_scores_the_critics_likelier_outcome():
    rubric = Rubric(id="r", criteria=list(CRITERIA))
    critic_p = {"a": 0.9, "b": 0.3, "p": 0.6, "c": 0.45}  # p_fail: a .1, b .7, p .6, c .55 -> k=2 verifies b, p
    for mode, expected in (("soft", (3 * 0.9 + 2 * 1.0 - 2 * 0.0 + 1 * 0.45) / 6), ("hard", (3 + 2 - 0 + 0) / 6)):
        judge = CriticJudge(Critic(critic_p), Verifier({"b": "met", "p": "unmet"}), CriticSettings(k=2, unverified=mode))
        [value] = RubricReward(RoutedJudge(judge), rubric)(["hi"], ["reply"])
        assert value == pytest.approx(expected)
    judge, _, _ = critic_judge(critic_p={"a": 0.9, "b": 0.3, "p": 0.6, "c": 0.45}, k=1, unverified="hard")
    a, b, p, c = run(judge)[0]
    assert not b.unverified  # the one verified
    assert (a.status, a.p_met, p.status, p.p_met, c.status, c.p_met) == (Status.MET, 1.0, Status.MET, 1.0,
                                                                        Status.UNMET, 0.0)
    assert a.unverified and c.evidence == ("unverified: critic estimate p=0.450, scored as its likelier outcome "
                                           "(unmet); critic says so")
    judge, _, _ = critic_judge(critic_p={"a": 0.5, "b": 0.3, "p": 0.6, "c": 0.45}, k=1, unverified="hard")
    assert run(judge)[0][0].status is Status.MET  # p_met 0.5 counts as met


def test_new_settings_in_the_spec():
    judge = make_judge(f"critic:k=2,rank=uncertain,budget=group,unverified=hard,u=0.05:exemplar>{URL}", cache=False)
    settings = judge.model_judge.settings
    assert settings == CriticSettings(k=2, rank="uncertain", budget="group", unverified="hard", doubt=0.05)
    assert judge.model_judge.judge_id.startswith("critic:k=2,u=0.05,rank=uncertain,budget=group,unverified=hard:")
    assert CriticSettings.parse("u=0.1").label() == "u=0.1"


@pytest.mark.parametrize("spec, message", [
    ("critic:u=0.1,budget=group:exemplar>local", "budget=group shares k x (replies in the group) verifications"),
    ("critic:k=2,budget=batch:exemplar>local", "budget=batch: use one of reply, group"),
    ("critic:k=2,unverified=maybe:exemplar>local", "unverified=maybe: use one of soft, hard"),
    ("critic:u=0.6:exemplar>local", "u=0.6: the uncertainty cutoff is the probability"),
    ("critic:u=0:exemplar>local", "so it lies in (0, 0.5]"),
    ("critic:u=x:exemplar>local", "critic setting 'u=x': 'x' is not a number"),
])
def test_bad_new_settings_say_what_is_wrong(spec, message):
    with pytest.raises(JudgeSpecError) as info:
        make_judge(spec, cache=False)
    assert message in str(info.value)
