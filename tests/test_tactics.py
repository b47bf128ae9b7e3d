"""Tactic diversity: stickiness and Jaccard by hand, ESConv gold stickiness computed independently,
classifier fit/classify round trip, novelty values, CLI, and the novelty reward in training."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from rubricrl.tactics.metrics import stickiness
from rubricrl.tactics.novelty import kl_novelty, overlap_novelty
from rubricrl.tactics.taxonomy import load_taxonomy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from esconv import DEFAULT_PATH as ESCONV  # noqa: E402  (../shared beside the checkout, or $ESCONV_TSV)


def test_stickiness_single_labels_by_hand():
    # conversation 1: Q Q S Q -> pairs (Q,Q) same, (Q,S) no, (S,Q) no; conversation 2: A A -> same
    s = stickiness([[{"Q"}, {"Q"}, {"S"}, {"Q"}], [{"A"}, {"A"}], [{"Q"}]])
    assert s.pairs == 4
    assert s.overall == pytest.approx(2 / 4)  # with single labels: share of pairs with the same tactic
    assert s.per_tactic == {"A": 1.0, "Q": pytest.approx(1 / 2), "S": 0.0}
    assert s.jaccard == pytest.approx(2 / 4)
    assert s.distribution["Q"] == pytest.approx(4 / 7)


def test_stickiness_multi_labels_by_hand():
    # pair 1: {Q,R} -> {Q}: Q kept (1 of 2 tactics at t); Jaccard 1/2
    # pair 2: {Q} -> {S,A}: nothing kept (0 of 1); Jaccard 0
    s = stickiness([[{"Q", "R"}, {"Q"}, {"S", "A"}]])
    assert s.overall == pytest.approx(1 / 3)
    assert s.per_tactic == {"Q": pytest.approx(1 / 2), "R": 0.0}
    assert s.jaccard == pytest.approx(0.25)
    assert stickiness([[{"Q"}]]).overall is None


def test_esconv_gold_stickiness_matches_an_independent_count():
    from esconv import load_esconv, previous_supporter

    assert ESCONV.is_file(), f"ESConv data not found at {ESCONV}: shared/ must sit beside the checkout"
    pairs = []
    for ex in load_esconv(ESCONV):
        prev = previous_supporter(ex)
        if prev is not None and prev.strategy is not None:
            pairs.append([{prev.strategy}, {ex.target.strategy}])
    library = stickiness(pairs)
    # independent: raw text, the last two "[Strategy]" markers of supporter segments on each line
    same = total = 0
    with open(ESCONV, encoding="utf-8") as handle:
        for line in handle:
            supporter = [seg for seg in line.rstrip("\r\n").split(" EOS ") if seg.strip().split(" ")[1] == "1"]
            labels = [re.match(r"\S+ 1 \d+ \[([^\]]+)\]", seg.strip()) for seg in supporter]
            labels = [m.group(1) for m in labels if m]
            if len(supporter) >= 2 and len(labels) == len(supporter):
                total += 1
                same += labels[-1] == labels[-2]
    assert library.pairs == total
    assert library.overall == pytest.approx(same / total)
    assert 0.1 < library.overall < 0.35  # human supporters rarely repeat the previous tactic


def test_novelty_values_by_hand():
    assert overlap_novelty({"Q"}, []) == 1.0
    assert overlap_novelty({"Q"}, [{"Q"}]) == 0.0
    assert overlap_novelty({"Q", "S"}, [{"Q"}, {"A"}]) == 0.5
    assert overlap_novelty({"S"}, [{"Q"}, {"A"}]) == 1.0
    same = np.array([0.7, 0.2, 0.1])
    assert kl_novelty(same, [same]) == pytest.approx(0.0, abs=1e-9)
    # KL([0.9, 0.1] || [0.1, 0.9]) = 0.9 ln 9 + 0.1 ln(1/9) = 0.8 ln 9 -> 1 - exp(-0.8 ln 9) = 1 - 9**-0.8
    assert kl_novelty(np.array([0.9, 0.1]), [np.array([0.1, 0.9])]) == pytest.approx(1 - 9 ** -0.8, abs=1e-4)
    assert kl_novelty(same, []) == 1.0


def test_bundled_taxonomies():
    esconv8, mint10 = load_taxonomy("esconv8"), load_taxonomy("mint10")
    assert esconv8.names[0] == "Question" and len(esconv8.names) == 8
    assert len(mint10.names) == 10 and "reappraisal" in mint10.names
    assert all(len(t.examples) >= 15 for t in esconv8.tactics + mint10.tactics)
    with pytest.raises(FileNotFoundError, match="bundled"):
        load_taxonomy("nope")


@pytest.mark.slow
def test_fit_classify_round_trip_and_cli(tmp_path):
    from typer.testing import CliRunner

    from rubricrl.cli import app
    from rubricrl.tactics.classifier import TacticClassifier, TurnExample

    runner = CliRunner()
    out = tmp_path / "clf"
    result = runner.invoke(app, ["tactics", "fit", "--data", "mint10", "--out", str(out), "--folds", "3"])
    assert result.exit_code == 0, result.output
    accuracy = float(re.search(r"accuracy (\d\.\d+)", result.output).group(1))
    assert accuracy > 0.5  # 10 classes: chance is 0.1
    model = TacticClassifier.load(out)
    again = TacticClassifier.load(out)
    turns = [TurnExample("Have you talked to anyone about this?", frozenset()),
             TurnExample("I went through the same thing last year when I lost my job.", frozenset())]
    assert np.allclose(model.probabilities(turns), again.probabilities(turns))
    assert "questioning" in model.predict(turns)[0] and "self-disclosure" in model.predict(turns)[1]

    conversations = tmp_path / "c.jsonl"
    conversations.write_text(json.dumps({"id": "x", "messages": [
        {"role": "user", "content": "I failed my exam."}, {"role": "assistant", "content": "How do you feel?"},
        {"role": "user", "content": "Bad."}, {"role": "assistant", "content": "What made it feel so bad?"},
    ]}) + "\n")
    labeled = tmp_path / "l.jsonl"
    result = runner.invoke(app, ["tactics", "classify", "--in", str(conversations), "--out", str(labeled)])
    assert result.exit_code == 0, result.output
    messages = json.loads(labeled.read_text())["messages"]
    assert messages[1]["tactics"] == ["Question"] and set(messages[1]["tactic_probs"]) == set(
        load_taxonomy("esconv8").names)
    result = runner.invoke(app, ["tactics", "stickiness", "--in", str(labeled)])
    assert result.exit_code == 0 and "stickiness 1.000 over 1" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "assistant", "content": "hi"}]}) + "\n")
    result = runner.invoke(app, ["tactics", "stickiness", "--in", str(bad)])
    assert result.exit_code == 2 and "bad.jsonl:1: tactics: an assistant message has no `tactics`" in result.output


@pytest.mark.slow
def test_novelty_reward_on_histories():
    from rubricrl.tactics.novelty import NoveltyReward

    reward = NoveltyReward()
    history = [{"role": "user", "content": "I lost my job."},
               {"role": "assistant", "content": "What happened? How did they tell you?"},
               {"role": "user", "content": "They just called me in."}]
    values = reward([history, history, history[:1]],
                    [[{"role": "assistant", "content": "And how did you feel when they told you?"}],
                     [{"role": "assistant", "content": "I lost a job once too, it knocked me flat for weeks."}],
                     [{"role": "assistant", "content": "What happened?"}]])
    assert values == [0.0, 1.0, 1.0]  # repeats the question tactic / a new tactic / no earlier turn
    kl = NoveltyReward(mode="kl")
    repeat, new, _ = kl([history] * 3, [[{"role": "assistant", "content": "What did they say to you?"}],
                                        [{"role": "assistant", "content": "I went through this too last year."}],
                                        [{"role": "assistant", "content": "x"}]])
    assert repeat < new


def test_judge_based_classifier_uses_any_judge(tmp_path):
    from typer.testing import CliRunner

    from rubricrl.cli import app
    from rubricrl.judges.base import JudgeStats
    from rubricrl.tactics.classifier import TurnExample
    from rubricrl.tactics.judge_classifier import JudgeTacticClassifier
    from rubricrl.core.verdicts import Status, Verdict

    class KeywordJudge:  # a stand-in backend: 'met' when the tactic's name appears in the reply
        judge_id, stats = "kw", JudgeStats()

        async def judge(self, requests):
            return [[Verdict(criterion_id=c.id, status=Status.MET if c.text.split(": ")[1].split(".")[0].lower()
                             in r.response.lower() else Status.UNMET,
                             p_met=0.9 if c.text.split(": ")[1].split(".")[0].lower() in r.response.lower()
                             else 0.1, judge_id="kw") for c in r.criteria] for r in requests]

    clf = JudgeTacticClassifier(load_taxonomy("mint10"), KeywordJudge())
    probs = clf.probabilities([TurnExample("some advice for you", frozenset())])
    assert probs.shape == (1, 10) and probs[0][clf.tactics.index("advice")] == 0.9
    assert clf.predict([TurnExample("some advice for you", frozenset())]) == [{"advice"}]
    conversations = tmp_path / "c.jsonl"
    conversations.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                                      {"role": "assistant", "content": "Do you have a question?"}]}) + "\n")
    result = CliRunner().invoke(app, ["tactics", "classify", "--in", str(conversations), "--out",
                                      str(tmp_path / "o.jsonl"), "--judge", "rules"])
    # the rules judge cannot decide principles: refused, not read as "no tactic"
    assert result.exit_code == 2 and "did not decide the tactic criteria" in result.output


def test_judge_classifier_refuses_error_verdicts():
    from rubricrl.judges.base import JudgeStats
    from rubricrl.tactics.classifier import TurnExample
    from rubricrl.tactics.judge_classifier import JudgeTacticClassifier
    from rubricrl.core.verdicts import error_verdict

    class FailingJudge:
        judge_id, stats = "failing", JudgeStats()

        async def judge(self, requests):
            return [[error_verdict(c.id, "failing", "http: 500") for c in r.criteria] for r in requests]

    clf = JudgeTacticClassifier(load_taxonomy("esconv8"), FailingJudge())
    with pytest.raises(ValueError, match="failed on tactic criteria: http: 500"):
        clf.probabilities([TurnExample("hello", frozenset())])
