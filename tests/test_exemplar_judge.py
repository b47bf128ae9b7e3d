"""Exemplar judge: fitting on a separable hand-written set, save/load, routing, bad input, and the
bundled models for the default rubrics."""

import asyncio
import json

import numpy as np
import pytest

from rubricrl.core.messages import as_conversation
from rubricrl.judge_tools.fit import LabeledExample, best_threshold, collect_examples, fit_exemplars
from rubricrl.judges import make_judge
from rubricrl.judges.base import JudgeRequest, JudgeStats, StatsJudge
from rubricrl.judges.exemplar import ExemplarJudge, criterion_key, load_models
from rubricrl.judges.routing import RoutedJudge
from rubricrl.core.problems import RubricError
from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric
from rubricrl.rubrics.model import Criterion, Rubric
from rubricrl.core.verdicts import Status, Verdict

pytestmark = pytest.mark.slow  # loads the sentence encoder

APOLOGY = ["I'm so sorry this happened to you.", "I am really sorry you are going through that.",
           "Sorry, that sounds awful.", "I'm sorry for your loss.", "So sorry to hear about your job.",
           "I'm deeply sorry, that must hurt.", "Sorry you had such a rough week.", "I'm sorry, that is unfair.",
           "I'm sorry you felt alone.", "Really sorry about the exam.", "I'm sorry it ended like that.",
           "Sorry that your family said that."]
OTHER = ["The weather is nice today.", "Have you tried a budgeting app?", "Trains run every ten minutes.",
         "You could go for a walk.", "My favourite food is pasta.", "What time is it there?",
         "Exercise improves sleep.", "The library opens at nine.", "Try writing a list of tasks.",
         "Cats sleep a lot.", "Interest rates went up.", "Maybe call the bank tomorrow."]
RUBRIC = Rubric(criteria=(
    Criterion(id="apologises", text="The reply expresses sorrow for what happened.", weight=2,
              examples={"met": APOLOGY, "unmet": OTHER}),
    Criterion(id="rare", text="The reply mentions a unicorn.", weight=1,
              examples={"met": ["A unicorn!"], "unmet": ["No."]}),
    Criterion(id="short", text="Short.", weight=1, check={"type": "length", "max": 30}),
))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    out = tmp_path_factory.mktemp("judge")
    examples, warnings = collect_examples(RUBRIC)
    reports = {r.criterion_id: r for r in fit_exemplars(RUBRIC, examples, out, min_per_class=8, folds=4)}
    return out, reports, warnings


def test_fit_separable_signal(fitted):
    _, reports, warnings = fitted
    r = reports["apologises"]
    assert r.status == "fitted" and r.n_met == 12 and r.n_unmet == 12
    assert r.auc > 0.9 and r.balanced_accuracy > 0.8
    assert "short" not in reports  # checked criteria are not fitted
    assert warnings == []


def test_threshold_rules(fitted, tmp_path):
    """The default decides at p_met >= 0.5 on the calibrated probability and says so in the manifest;
    `balanced` keeps the threshold of the best out-of-fold balanced accuracy; anything else is refused."""
    out, reports, _ = fitted
    manifest = json.loads((out / "manifest.json").read_text())
    [model] = manifest["criteria"].values()
    assert reports["apologises"].threshold == 0.5 and model["threshold"] == 0.5
    assert model["metrics"]["threshold_rule"] == "calibrated"
    # 3 of 8 met, so a balanced threshold sits far from 0.5 while the calibrated rule stays there
    examples = {"apologises": [LabeledExample(t, True) for t in APOLOGY[:3]]
                + [LabeledExample(t, False) for t in OTHER[:8]]
                + [LabeledExample(APOLOGY[5], False), LabeledExample(OTHER[9], True)]}
    calibrated, balanced = tmp_path / "c", tmp_path / "b"
    [c] = fit_exemplars(RUBRIC, examples, calibrated, min_per_class=3, folds=3)
    [b] = fit_exemplars(RUBRIC, examples, balanced, min_per_class=3, folds=3, threshold_rule="balanced")
    assert c.threshold == 0.5 and b.threshold != 0.5
    assert b.balanced_accuracy >= c.balanced_accuracy  # the balanced rule maximises exactly this figure
    assert c.auc == b.auc  # the rule changes the decision, never the model
    with pytest.raises(ValueError, match="threshold rule 'f1': use one of calibrated, balanced"):
        fit_exemplars(RUBRIC, examples, tmp_path / "x", threshold_rule="f1")


def test_too_few_examples_fall_back_with_a_warning(fitted):
    out, reports, _ = fitted
    r = reports["rare"]
    assert r.status == "too_few" and "has 1 met, 1 unmet" in r.warnings[0]
    judge = ExemplarJudge(out)
    assert judge.covers(RUBRIC.criteria[0]) and not judge.covers(RUBRIC.criteria[1])


def test_round_trip_and_verdicts(fitted):
    out, _, _ = fitted
    judge = ExemplarJudge(out)
    conv = as_conversation("I lost my job.")
    [row] = asyncio.run(judge.judge([JudgeRequest(conv, "I'm so sorry, losing a job is hard.", RUBRIC.criteria[:2])]))
    assert row[0].status is Status.MET and row[0].p_met > 0.5 and "nearest examples: met" in row[0].evidence
    assert row[1].status is Status.SKIPPED and "no exemplar model" in row[1].reason
    [neg] = asyncio.run(judge.judge([JudgeRequest(conv, "Buses are cheaper than trains.", RUBRIC.criteria[:1])]))
    assert neg[0].status is Status.UNMET
    encoder, models = load_models(out)
    again = ExemplarJudge(out)
    [row2] = again.judge_sync([JudgeRequest(conv, "I'm so sorry, losing a job is hard.", RUBRIC.criteria[:1])])
    assert row2[0].p_met == pytest.approx(row[0].p_met, abs=1e-6)
    assert criterion_key("The reply  EXPRESSES sorrow for what happened.") in models  # text, not id


class YesJudge(StatsJudge):
    judge_id = "yes"

    def __init__(self):
        self.stats = JudgeStats()
        self.seen: list[str] = []

    async def judge(self, requests):
        self.seen += [c.id for r in requests for c in r.criteria]
        return [[Verdict(criterion_id=c.id, status=Status.MET, p_met=1.0, judge_id="yes") for c in r.criteria]
                for r in requests]


def test_routing_per_criterion(fitted):
    out, _, _ = fitted
    llm = YesJudge()
    router = RoutedJudge(llm, ExemplarJudge(out))
    [row] = asyncio.run(router.judge([JudgeRequest(as_conversation("hi"), "I'm so sorry.", RUBRIC.criteria)]))
    assert [v.judge_id.split(":")[0] for v in row] == ["exemplar", "yes", "rules"]
    assert llm.seen == ["rare"]  # only the criterion without a fitted model reached the LLM judge
    assert router.judge_id.startswith("rules+exemplar:")
    # a criterion may prefer the LLM judge even when an exemplar model covers it
    prefers_llm = RUBRIC.criteria[0].model_copy(update={"judge": "llm"})
    [row] = asyncio.run(router.judge([JudgeRequest(as_conversation("hi"), "I'm so sorry.", (prefers_llm,))]))
    assert row[0].judge_id == "yes" and llm.seen[-1] == "apologises"


def test_bad_labels_are_reported(tmp_path):
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"criterion_id": "apologises", "response": "x", "label": "yes"}) + "\n" +
                      json.dumps({"criterion_id": "nope", "response": "x", "label": True}) + "\n")
    with pytest.raises(RubricError) as info:
        collect_examples(RUBRIC, labels)
    text = str(info.value)
    assert "labels.jsonl:1: label: must be true or false" in text
    assert "labels.jsonl:2: criterion_id: 'nope' is not a model-judged criterion" in text
    labels.write_text(json.dumps({"criterion_id": "apologises", "response": "Sorry, that sounds awful.",
                                  "label": False}) + "\n")
    with pytest.raises(RubricError, match="labelled both met and unmet"):
        collect_examples(RUBRIC, labels)
    labels.write_text(json.dumps({"criterion_id": "apologises", "response": "I'm sorry for your loss.",
                                  "label": True}) + "\n")
    _, warnings = collect_examples(RUBRIC, labels)
    assert warnings == ["apologises: dropped 1 duplicate example(s)"]


def test_non_latin_examples_warn(tmp_path):
    greek = Rubric(criteria=(Criterion(id="a", text="Greek apology.", examples={
        "met": [f"Λυπάμαι πολύ για αυτό {i}" for i in range(8)],
        "unmet": [f"Ο καιρός είναι ωραίος {i}" for i in range(8)]}),))
    examples, _ = collect_examples(greek)
    [report] = fit_exemplars(greek, examples, tmp_path, folds=2)
    assert any("covers English only" in w for w in report.warnings)


def test_best_threshold_by_hand():
    p = np.array([0.1, 0.4, 0.35, 0.8])
    y = np.array([False, False, True, True])
    # t=0.35 -> predicted [F, T, T, T]: tpr 1, tnr 0.5 -> 0.75; t=0.8 -> tpr 0.5, tnr 1 -> 0.75;
    # t=0.4 -> [F, T, F, T]: 0.5/0.5 -> 0.5; t=0.5 (always a candidate) -> [F, F, F, T]: 0.75.
    # Ties go to the threshold closest to 0.5: 0.5 itself.
    assert best_threshold(p, y) == (pytest.approx(0.5), pytest.approx(0.75))
    # without the tie at 0.5, the best cut wins: y = [F, T, F, T] is separated at 0.4 exactly
    assert best_threshold(np.array([0.1, 0.4, 0.35, 0.8]), np.array([False, True, False, True])) == (
        pytest.approx(0.4), pytest.approx(1.0))


def test_bundled_models_cover_the_default_rubrics_offline():
    judge = make_judge("exemplar")  # no model directory given: the models shipped in the package
    for name in ("empathy", "crisis_safety"):
        rubric = load_rubric(bundled_rubric_path(name))
        model_judged = [c for c in rubric.criteria if c.check is None]
        assert all(judge.exemplar_judge.covers(c) for c in model_judged)
    rubric = load_rubric(bundled_rubric_path("empathy"))
    conv = as_conversation("My manager shouted at me in front of everyone and I feel humiliated.")
    warm = ("That sounds humiliating, being shouted at in front of the whole team. It makes sense you feel "
            "shaken. What happened afterwards?")
    cold = "You should just find a new job. Update your CV tonight and apply to five places tomorrow."
    good, bad = asyncio.run(judge.judge([JudgeRequest(conv, warm, rubric.criteria),
                                         JudgeRequest(conv, cold, rubric.criteria)]))
    p = {v.criterion_id: v.p_met for v in good}
    q = {v.criterion_id: v.p_met for v in bad}
    for cid in ("validates-feeling", "invites-more"):
        assert p[cid] > q[cid], cid
    assert p["rushes-to-advice"] < q["rushes-to-advice"]  # the pitfall: the cold reply opens with advice
    assert all(v.status is not Status.SKIPPED for v in good)  # every criterion decided, no LLM needed


def test_cli_fit_then_score_with_the_fitted_judge(tmp_path):
    from typer.testing import CliRunner

    from rubricrl.cli import app

    rubric = tmp_path / "r.yaml"
    rubric.write_text(json.dumps(RUBRIC.model_dump(mode="json")))
    runner = CliRunner()
    out = tmp_path / "judge"
    result = runner.invoke(app, ["judge", "fit", "--rubric", str(rubric), "--out", str(out), "--folds", "3"])
    assert result.exit_code == 0, result.output
    assert "fitted 1 of 2" in result.output and "apologises" in result.output
    assert "rare: needs >= 8 examples of each class" in result.output
    assert json.loads((out / "manifest.json").read_text())["criteria"].popitem()[1]["threshold"] == 0.5
    balanced = runner.invoke(app, ["judge", "fit", "--rubric", str(rubric), "--out", str(tmp_path / "bal"),
                                   "--folds", "3", "--threshold-rule", "balanced"])
    assert balanced.exit_code == 0, balanced.output
    bad = runner.invoke(app, ["judge", "fit", "--rubric", str(rubric), "--out", str(tmp_path / "bad"),
                              "--threshold-rule", "f1"])
    assert bad.exit_code == 2 and "f1" in bad.output
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "a", "prompt": "I failed.", "response": "I'm so sorry, that hurts."}) + "\n")
    scored = tmp_path / "scored.jsonl"
    result = runner.invoke(app, ["score", "--data", str(rows), "--out", str(scored), "--rubric", str(rubric),
                                 "--judge", f"exemplar:{out}"])
    assert result.exit_code == 0, result.output
    record = json.loads(scored.read_text())
    statuses = {v["criterion_id"]: v["status"] for v in record["verdicts"]}
    assert statuses == {"apologises": "met", "rare": "skipped", "short": "met"}
    assert record["score"] == 1.0  # (2 + 1) / (2 + 1): the skipped criterion is left out


TOPICS = [("I lost my job at the factory today.", "Losing your job at the factory is a real blow."),
          ("My dog died this morning.", "Your dog dying this morning must leave the house feeling empty."),
          ("I failed my driving test again.", "Failing the driving test a second time is so discouraging."),
          ("We moved to a new city and I know nobody.", "Moving to a city where you know nobody is lonely."),
          ("My sister stopped talking to me.", "Your sister going silent on you must hurt."),
          ("I can't pay my rent this month.", "Not being able to cover the rent is frightening."),
          ("My knee surgery went badly.", "A knee surgery that went badly is a lot to carry."),
          ("My best friend forgot my birthday.", "Having your best friend forget your birthday stings."),
          ("I got rejected from every university.", "Being turned down by every university is crushing."),
          ("My father is in hospital with pneumonia.", "Your father being in hospital with pneumonia is scary.")]
SITUATION = Rubric(criteria=(Criterion(id="situation", text="The reply refers to what the person described.",
                                       weight=2),))


def _situation_labels(path):
    """Each reply is met with its own message and unmet with two others': the reply alone cannot tell."""
    rows = []
    for i, (context, _) in enumerate(TOPICS):
        for shift, label in ((0, True), (1, False), (3, False)):
            rows.append({"criterion_id": "situation", "context": context,
                         "response": TOPICS[(i + shift) % len(TOPICS)][1], "label": label})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_pair_aware_models_see_the_conversation(tmp_path):
    """With a context on every example the models are pair-aware: the same reply scores higher with the
    message it answers than with another; a reply-only model cannot separate these labels."""
    from rubricrl.judges.exemplar import PAIR_AWARE, REPLY_ONLY, load_features

    examples, warnings = collect_examples(SITUATION, _situation_labels(tmp_path / "labels.jsonl"))
    assert warnings == [] and len(examples["situation"]) == 30  # same reply, other context: not a duplicate
    [pair] = fit_exemplars(SITUATION, examples, tmp_path / "pair", min_per_class=8, folds=5)
    [alone] = fit_exemplars(SITUATION, examples, tmp_path / "alone", min_per_class=8, folds=5, features=REPLY_ONLY)
    assert load_features(tmp_path / "pair") == PAIR_AWARE and load_features(tmp_path / "alone") == REPLY_ONLY
    assert pair.auc > 0.9 and alone.auc < 0.7 and pair.auc - alone.auc > 0.3
    manifest = json.loads((tmp_path / "pair" / "manifest.json").read_text())
    assert manifest["features"] == list(PAIR_AWARE)
    assert manifest["criteria"].popitem()[1]["metrics"]["cv_grouped"] is True  # folds by conversation
    judge = ExemplarJudge(tmp_path / "pair")
    reply = TOPICS[1][1]
    own, other = judge.judge_sync([JudgeRequest(as_conversation(TOPICS[1][0]), reply, SITUATION.criteria),
                                   JudgeRequest(as_conversation(TOPICS[6][0]), reply, SITUATION.criteria)])
    assert own[0].p_met > other[0].p_met + 0.2
    assert own[0].status is Status.MET and other[0].status is Status.UNMET
    assert "nearest examples: met" in own[0].evidence  # evidence still compares replies
    # a manifest written before pair-aware models has no `features`: read as the reply alone
    old = tmp_path / "alone" / "manifest.json"
    legacy = json.loads(old.read_text())
    del legacy["features"]
    old.write_text(json.dumps(legacy))
    assert ExemplarJudge(tmp_path / "alone").features == REPLY_ONLY


def test_pair_aware_needs_every_context(tmp_path):
    """Examples without a context (a rubric's inline `examples`, label rows without `context`) make the
    models reply-only, with a warning naming the count and the fix; asking for pair-aware models then fails."""
    from rubricrl.judge_tools.fit import choose_features
    from rubricrl.judges.exemplar import PAIR_AWARE, REPLY_ONLY

    labels = _situation_labels(tmp_path / "labels.jsonl")
    with labels.open("a") as f:
        f.write(json.dumps({"criterion_id": "situation", "response": "That sounds hard.", "label": False}) + "\n")
    examples, _ = collect_examples(SITUATION, labels)
    features, why = choose_features(examples)
    assert features == REPLY_ONLY and why.startswith("1 of 31 examples have no context")
    assert "give every label row a `context`" in why
    with pytest.raises(ValueError, match="pair-aware models need a context on every example; 1 of 31"):
        fit_exemplars(SITUATION, examples, tmp_path / "x", features=PAIR_AWARE)
    assert choose_features(collect_examples(RUBRIC)[0]) == (REPLY_ONLY, None)  # no context at all: no warning
    with pytest.raises(ValueError, match="exemplar features"):
        fit_exemplars(SITUATION, examples, tmp_path / "y", features=("embedding", "lm_mean"))


def test_cli_fit_says_what_the_models_see(tmp_path):
    from typer.testing import CliRunner

    from rubricrl.cli import app

    rubric = tmp_path / "r.yaml"
    rubric.write_text(json.dumps(SITUATION.model_dump(mode="json")))
    labels = _situation_labels(tmp_path / "labels.jsonl")
    result = CliRunner().invoke(app, ["judge", "fit", "--rubric", str(rubric), "--labels", str(labels),
                                      "--out", str(tmp_path / "j"), "--folds", "3"])
    assert result.exit_code == 0, result.output
    assert "the reply and its similarity to what the person said (pair-aware)" in result.output
    with labels.open("a") as f:
        f.write(json.dumps({"criterion_id": "situation", "response": "That sounds hard.", "label": False}) + "\n")
    result = CliRunner().invoke(app, ["judge", "fit", "--rubric", str(rubric), "--labels", str(labels),
                                      "--out", str(tmp_path / "k"), "--folds", "3"])
    assert result.exit_code == 0, result.output
    assert "(the models see the reply alone)" in result.output and "1 of 31 examples have no context" in result.output
