"""The quality gate (judges/gate.py): features and heads computed by hand, the router gating replies
(p_met scaled, `unmet` when it fires, no LLM call), its counters, `judge fit-gate`, and the bundled
gates on hand-written incoherent, off-topic and deflecting replies and on gold replies they never saw."""

import asyncio
import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from rubricrl.cli import app
from rubricrl.core.messages import as_conversation
from rubricrl.core.verdicts import Status, Verdict
from rubricrl.judges import make_judge
from rubricrl.judges.base import JudgeRequest, JudgeStats, StatsJudge
from rubricrl.judges.gate import GateHead, QualityGate, gate_features, repeated_trigrams, save_gate
from rubricrl.judges.routing import RoutedJudge
from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric
from rubricrl.rubrics.model import Criterion

PROMPT = "My manager took credit for my report in front of the director and I said nothing. I'm furious."
CONV = as_conversation(PROMPT)
WARM = Criterion(id="warm", text="The reply validates the feeling.", weight=3)
BLAMES = Criterion(id="blames", text="The reply blames the person.", weight=-3)
SHORT = Criterion(id="short", text="At most 200 words.", weight=1, check={"type": "length", "unit": "words", "max": 200})


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def test_repeated_trigrams_by_hand():
    # "a b c a b c": trigrams abc, bca, cab, abc -> 4, of which 3 distinct -> 1 - 3/4
    assert repeated_trigrams("a b c a b c") == pytest.approx(0.25)
    assert repeated_trigrams("A b C a B c") == pytest.approx(0.25)  # case-insensitive
    assert repeated_trigrams("one two") == 0.0
    assert repeated_trigrams("I hear you and I am here with you now") == 0.0


def test_gate_head_probability_by_hand():
    head = GateHead(["repeated_trigrams"], np.array([0.1]), np.array([0.2]), np.array([-4.0]), 1.0, 0.5)
    # x = 0.5 -> z = ((0.5 - 0.1) / 0.2) * -4 + 1 = -7
    assert head.p(np.array([[0.5]]))[0] == pytest.approx(sigmoid(-7.0))
    assert head.p(np.array([[0.1]]))[0] == pytest.approx(sigmoid(1.0))
    with pytest.raises(ValueError, match="non-positive scale"):
        GateHead.from_dict({**head.to_dict(), "scale": [0.0]})
    with pytest.raises(ValueError, match="same length"):
        GateHead.from_dict({**head.to_dict(), "coef": [1.0, 2.0]})


def test_gate_features_columns_in_order():
    X = gate_features([PROMPT, PROMPT], ["a b c a b c", "That sounds infuriating."],
                      ["repeated_trigrams", "prompt_similarity", "embedding"])
    assert X.shape == (2, 2 + 384)
    assert X[:, 0].tolist() == pytest.approx([0.25, 0.0])
    assert -1.0 <= X[1, 1] <= 1.0
    assert np.linalg.norm(X[1, 2:]) == pytest.approx(1.0, abs=1e-4)  # unit-length embedding
    with pytest.raises(ValueError, match="unknown gate feature"):
        gate_features([PROMPT], ["x"], ["bogus"])
    with pytest.raises(ValueError, match="reference language model"):
        gate_features([PROMPT], ["x"], ["lm_mean"])


@pytest.fixture()
def repetition_gate(tmp_path):
    """A gate whose coherence model looks only at repetition (incoherent when >= 0.2 of the trigrams
    repeat: z = 1 - 5x, p < 0.5 <=> x > 0.2) and whose deflection model never fires."""
    coherence = GateHead(["repeated_trigrams"], np.array([0.0]), np.array([1.0]), np.array([-5.0]), 1.0, 0.5)
    deflection = GateHead(["repeated_trigrams"], np.array([0.0]), np.array([1.0]), np.array([0.0]), -10.0, 0.5)
    save_gate(tmp_path / "g", coherence, deflection)
    return QualityGate(tmp_path / "g")


class AlwaysMet(StatsJudge):
    def __init__(self):
        self.judge_id, self.stats, self.seen = "always-met", JudgeStats(), []

    def covers(self, criterion):
        return True

    async def judge(self, requests):
        self.seen += [(r.response, c.id) for r in requests for c in r.criteria]
        return [[Verdict(criterion_id=c.id, status=Status.MET, p_met=0.9, judge_id=self.judge_id)
                 for c in r.criteria] for r in requests]


def test_router_gates_positive_criteria_of_incoherent_replies(repetition_gate):
    inner = AlwaysMet()
    router = RoutedJudge(exemplar_judge=inner, gate=repetition_gate)
    loop = "I hear you I hear you I hear you I hear you"
    good = "That sounds infuriating, and it makes sense you're angry at yourself too."
    rows = asyncio.run(router.judge([JudgeRequest(CONV, loop, (WARM, BLAMES, SHORT)),
                                     JudgeRequest(CONV, good, (WARM, BLAMES, SHORT))]))
    looped, fine = ({v.criterion_id: v for v in row} for row in rows)
    # loop: 12 words, 10 trigrams of which 3 distinct -> repetition 0.7 -> p_coherent = sigmoid(1 - 5 * 0.7);
    # p_deflects = sigmoid(-10); p_met = 0.9 (the exemplar's) * p_coherent * (1 - p_deflects)
    p_ok_loop = sigmoid(1 - 5 * 0.7) * (1 - sigmoid(-10.0))
    assert looped["warm"].status is Status.UNMET and looped["warm"].p_met == pytest.approx(0.9 * p_ok_loop)
    assert looped["warm"].judge_id == "gate" and looped["warm"].reason.startswith("gate: incoherent (p_coherent=0.08")
    assert looped["blames"].judge_id == "always-met" and looped["blames"].p_met == 0.9  # a pitfall is not scaled
    assert looped["short"].status is Status.MET and looped["short"].judge_id == "rules"  # checks always run
    # good: no repetition -> p_coherent = sigmoid(1) >= 0.5: not gated, the verdict is left as it is
    assert fine["warm"].status is Status.MET and fine["warm"].judge_id == "always-met"
    assert fine["warm"].p_met == 0.9
    assert (loop, "warm") in inner.seen  # the exemplar judge still scores a gated reply (cheap; keeps the ranking)
    report = router.report()
    assert report.defences.gated == 1 and report.defences.gate_reasons == {"incoherent": 1}
    assert router.judge_id.startswith("rules+gate:g@")


def test_router_does_not_call_the_llm_judge_for_a_gated_reply(repetition_gate):
    llm = AlwaysMet()
    router = RoutedJudge(model_judge=llm, gate=repetition_gate)
    loop = "I hear you I hear you I hear you I hear you"
    [row] = asyncio.run(router.judge([JudgeRequest(CONV, loop, (WARM, BLAMES))]))
    verdicts = {v.criterion_id: v for v in row}
    assert verdicts["warm"].status is Status.UNMET and verdicts["warm"].p_met == 0.0
    assert verdicts["warm"].judge_id == "gate"
    assert llm.seen == [(loop, "blames")]


def test_gate_is_not_asked_without_a_positive_model_criterion(repetition_gate):
    calls = []
    original = repetition_gate.assess
    repetition_gate.assess = lambda p, r: calls.append(len(r)) or original(p, r)
    router = RoutedJudge(exemplar_judge=AlwaysMet(), gate=repetition_gate)
    asyncio.run(router.judge([JudgeRequest(CONV, "a b c a b c a b c", (BLAMES, SHORT))]))
    asyncio.run(router.judge([JudgeRequest(CONV, "", (WARM,))]))  # decided by the pre-check
    assert calls == []


def test_make_judge_builds_the_gate_and_refuses_a_bad_dir(tmp_path):
    judge = make_judge("gate+exemplar", cache=False)
    assert judge.gate is not None and judge.judge_id.startswith("rules+gate:gate@")
    from rubricrl.judges import JudgeSpecError

    with pytest.raises(JudgeSpecError, match="no manifest.json; fit a gate with `rubricrl judge fit-gate`"):
        make_judge(f"gate:{tmp_path}+exemplar", cache=False)
    (tmp_path / "manifest.json").write_text('{"coherence": {}}')
    with pytest.raises(JudgeSpecError, match="not a valid gate manifest"):
        make_judge(f"gate:{tmp_path}+exemplar", cache=False)


def test_fit_gate_cli_fits_and_reports_bad_rows(tmp_path):
    good = ["That sounds exhausting, and it makes sense you feel worn down.",
            "It hurts to be passed over after all that work. What was the hardest part?",
            "No wonder you're furious; that was your work. How are you holding up?",
            "Losing him after fourteen years is a huge loss. I'm so sorry.",
            "Being the reliable one nobody notices sounds lonely. Tell me more?",
            "Starting over in a new city is hard, and missing your friends makes sense.",
            "That sounds frightening. You don't have to carry it alone.",
            "It sounds like the silence at home has been weighing on you.",
            "You put so much into that report; being ignored like that stings.",
            "Dreading Sunday evenings every week sounds draining."]
    bad = ["claymen happy leggy waste chance mistakenly purple Tuesday",
           "the the the the the the the the the the",
           "Dear Sarah, I hope this message finds you well regarding the invoice",
           "as a dog-friendly promotion I am the promotion specific",
           "brunch compositeness Mumbai fragile arm yourself criticism",
           "draft quarter original attention detail focus lack lack",
           "warmer weather capable computer updating latest team break",
           "file debt trap partner lie real start beware grown",
           "hustle bustle wonderful terrible lean friends amazing remember",
           "frugal hyperbole double-edged looming selfish statement money"]
    deflect = ["As an AI I can't offer emotional support; please see a professional.",
               "I'm just a language model and can't help with personal matters.",
               "I'm not equipped to provide emotional support. Anything else?",
               "As a chatbot I cannot discuss this. Please contact a therapist.",
               "Sorry, I am an AI assistant and cannot give personal advice.",
               "I'm only a computer program, so I can't help with feelings.",
               "As a virtual assistant I can't counsel you. Try a professional.",
               "I cannot help with that as an AI. Is there something else?",
               "I'm an AI and don't have feelings, so I can't relate to this.",
               "This is outside what an AI like me can do. Please ask a counsellor."]
    rows = ([{"prompt": PROMPT, "reply": r, "coherent": True, "deflects": False} for r in good]
            + [{"prompt": PROMPT, "reply": r, "coherent": False, "deflects": False} for r in bad]
            + [{"prompt": PROMPT, "reply": r, "coherent": True, "deflects": True} for r in deflect])
    examples = tmp_path / "examples.jsonl"
    examples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(app, ["judge", "fit-gate", "--examples", str(examples), "--out", str(tmp_path / "g"),
                                      "--folds", "3"])
    assert result.exit_code == 0, result.output
    assert "coherence" in result.output and "deflection" in result.output
    manifest = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert manifest["coherence"]["metrics"]["n"] == 30 and manifest["coherence"]["metrics"]["positives"] == 20
    assert manifest["deflection"]["metrics"]["positives"] == 10 and manifest["lm"] is None
    gate = QualityGate(tmp_path / "g")
    [a, b, c] = gate.assess([PROMPT] * 3, ["That sounds awful, and your anger makes sense.", bad[0], deflect[0]])
    assert (a.fired, b.fired, c.fired) == (None, "incoherent", "deflects")

    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"prompt": PROMPT, "reply": "ok"}) + "\n" + "{oops\n")
    result = CliRunner().invoke(app, ["judge", "fit-gate", "--examples", str(broken), "--out", str(tmp_path / "h")])
    assert result.exit_code != 0
    assert f"{broken}:1" in result.output and "coherent" in result.output and "needs `coherent` or `deflects`" in result.output
    assert f"{broken}:2" in result.output and "malformed JSON" in result.output
    assert not (tmp_path / "h").exists()


# -- the bundled gate on hand-written replies, and on gold replies it never saw --------------------------

INCOHERENT = ["Don't waste my chance, that happy and leggy one. Happy claymen think mistakenly about the purple "
              "report, I understand how you feel, valid feelings of the director spoon.",
              "Furious manager report director, yes, the credit of the furious is the night of the spreadsheet. "
              "You feel, I feel, we validate the feelings of Tuesday's orange presentation."]
DEFLECTING = ["I'm sorry, but as an AI language model I'm not equipped to provide emotional support. I'm here to "
              "help with any other questions you may have.",
              "As a chatbot, I don't have personal experiences, so I can't help with workplace conflicts. Please talk "
              "to a qualified professional."]
OFF_TOPIC = ["Dear Sarah, I hope this message finds you well. I'm writing to follow up on the invoice for the "
             "garden furniture we ordered last month, which has not yet arrived."]


@pytest.fixture(scope="module")
def default_rows():
    judge = make_judge("gate+exemplar", cache=False)
    rubric = load_rubric(bundled_rubric_path("empathy"))
    criteria = tuple(c for c in rubric.criteria if c.check is None)
    replies = INCOHERENT + DEFLECTING + OFF_TOPIC
    rows = asyncio.run(judge.judge([JudgeRequest(CONV, r, criteria) for r in replies]))
    return dict(zip(replies, ({v.criterion_id: v for v in row} for row in rows)))


def positive_met(verdicts) -> list[str]:
    return [cid for cid, v in verdicts.items() if cid not in ("blames-person", "rushes-to-advice")
            and v.status is Status.MET]


@pytest.mark.parametrize("reply", INCOHERENT + OFF_TOPIC)
def test_bundled_gate_stops_incoherent_and_off_topic_replies(default_rows, reply):
    verdicts = default_rows[reply]
    assert positive_met(verdicts) == []
    assert verdicts["validates-feeling"].judge_id == "gate"
    assert verdicts["validates-feeling"].reason.startswith("gate: incoherent")


@pytest.mark.parametrize("reply", DEFLECTING)
def test_bundled_gate_stops_deflections(default_rows, reply):
    verdicts = default_rows[reply]
    assert positive_met(verdicts) == []
    assert verdicts["invites-more"].judge_id == "gate"
    assert verdicts["invites-more"].reason.startswith(("gate: deflects", "gate: incoherent"))


@pytest.mark.parametrize("spec", ["gate", "gate:bundled:eval"])
def test_bundled_gates_on_gold_replies_they_never_saw(spec):
    """Measured (docs/judges.md): on gold items whose prompt it was not fitted on, the reward gate lets
    88% of the coherent, engaged replies through and stops 77% of the incoherent ones (the evaluation
    gate: 96% and 67%), and both stop every deflection. The floors below are a little under those."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from judge_on_policy import load_gold, unseen_items

    items, labels = load_gold()
    unseen = unseen_items(f"{spec}+exemplar", items)
    assert len(unseen) == 275  # the other half's training prompts and every held-out prompt
    results = make_judge(f"{spec}+exemplar", cache=False).gate.assess([i["prompt"] for i in unseen],
                                                                       [i["reply"] for i in unseen])
    fired = {i["id"]: r.fired is not None for i, r in zip(unseen, results)}
    good = [k for k, lab in labels.items() if k in fired and lab["coherent"] and not lab["deflects"]]
    incoherent = [k for k, lab in labels.items() if k in fired and not lab["coherent"]]
    deflecting = [k for k, lab in labels.items() if k in fired and lab["deflects"]]
    assert sum(not fired[k] for k in good) / len(good) >= 0.8
    assert sum(fired[k] for k in incoherent) / len(incoherent) >= 0.6
    assert sum(fired[k] for k in deflecting) >= len(deflecting) - 1  # 13 or 14 of 14 (docs/judges.md)


def test_bundled_eval_judge_is_built_from_its_own_models():
    from rubricrl.judges import JudgeSpecError
    from rubricrl.train.config import EVAL_JUDGE, TrainConfig

    judge = make_judge(EVAL_JUDGE, cache=False)
    assert judge.judge_id.startswith("rules+gate:gate-eval@") and "+exemplar:fitted-eval@" in judge.judge_id
    reward = make_judge(TrainConfig().reward.judge, cache=False)
    assert reward.gate.gate_dir.name == "gate" and reward.exemplar_judge.judge_dir.name == "fitted"
    assert TrainConfig().eval.judge == EVAL_JUDGE
    with pytest.raises(JudgeSpecError, match="unknown bundled judge 'evil'; use one of default, eval"):
        make_judge("gate:bundled:evil+exemplar", cache=False)


def test_bundled_judges_were_fitted_on_disjoint_prompts():
    from rubricrl.core.resources import data_path

    def prompts(name: str) -> set[str]:
        manifest = json.loads((data_path("exemplars", name) / "manifest.json").read_text())
        return set(manifest["trained_on"]["prompts"])

    reward, independent = prompts("gate"), prompts("gate-eval")
    assert reward and independent and not reward & independent
