"""The training console line, the paired before/after change, and the demo's system prompt."""

import pytest

from rubricrl.rubrics.model import Criterion, Rubric
from rubricrl.train.config import DEMO_SYSTEM_PROMPT, load_config
from rubricrl.train.console import step_line
from rubricrl.train.data import load_prompt_data
from rubricrl.train.evaluate import paired_change

LOGS = {"reward": 0.41234, "reward_std": 0.15349, "completions/clipped_ratio": 0.25, "rubric/defence_gated": 5.0,
        "rubric/defence_prechecked": 0.0, "rubric/judge_errors": 1.0, "rubric/pass_rate/validates-feeling": 0.375,
        "rubric/pass_rate/invites-more": 0.0, "rubric/pass_rate/concise": 1.0, "step_time": 41.49, "loss": 0.01,
        "entropy": 2.7}


def test_step_line_by_hand():
    line = step_line(3, 24, LOGS, batch=8, criteria=("validates-feeling", "invites-more"))
    assert line == ("step   3/24  reward 0.412 ±0.153  clipped 25%  gated 5/8  errors 1  "
                    "pass validates-feeling 38% invites-more 0%  41.5 s")
    assert "loss" not in line and "entropy" not in line  # the rest stays in metrics.jsonl


def test_step_line_without_rubric_metrics():
    assert step_line(1, 2, {"reward": 0.5, "step_time": 2.0}, batch=4) == "step   1/2  reward 0.500  2.0 s"


def test_step_line_shows_prechecks_only_when_they_fired():
    assert "prechecked 2" in step_line(1, 2, {**LOGS, "rubric/defence_prechecked": 2.0}, batch=8)
    assert "prechecked" not in step_line(1, 2, LOGS, batch=8)


def test_step_line_shows_critic_counts_and_pairwise_comparisons():
    # a critic judge: 3 of 3 + 5 = 8 model-judged criteria verified, 5/8 = 62.5% of verifier verdicts saved
    critic = {**LOGS, "rubric/judge_verified": 3.0, "rubric/judge_unverified": 5.0, "rubric/critic_confirmed": 2.0,
              "rubric/critic_saved": 0.625}
    assert "errors 1  critic verified 3/8 (saved 62%) confirmed 2  pass" in step_line(3, 24, critic, batch=8)
    pairwise = {**LOGS, "rubric/pairwise_pairs": 4.0, "rubric/pairwise_comparisons": 12.0,
                "rubric/pairwise_disagreements": 1.0}
    assert "errors 1  pairs 4 comparisons 12 disagreed 1  pass" in step_line(3, 24, pairwise, batch=8)
    assert "critic" not in step_line(3, 24, LOGS, batch=8) and "pairs" not in step_line(3, 24, LOGS, batch=8)
    # a dialogue run: the console follows the emotion reward; the critic's counts are its rubric reward's
    dialogue = {"reward": 0.5, "dialogue_rubric/judge_verified": 4.0, "dialogue_rubric/judge_unverified": 4.0,
                "dialogue_rubric/critic_confirmed": 1.0, "dialogue_rubric/critic_saved": 0.5}
    assert step_line(1, 2, dialogue, batch=4, reward_name="emotion") == \
        "step   1/2  reward 0.500  critic verified 4/8 (saved 50%) confirmed 1"


HARD = Criterion(id="no-harm", text="No method.", weight=-5, kind="hard_rule")
HARD_POS = Criterion(id="refers", text="Refers to a helpline.", weight=3, kind="hard_rule")
RUBRIC = Rubric(criteria=(HARD, HARD_POS, Criterion(id="warm", text="Warm.", weight=1)))


def record(row_id, score, hard_status="unmet", pos_status="met", gated=False):
    verdicts = [{"criterion_id": "no-harm", "status": hard_status, "judge_id": "x"},
                {"criterion_id": "refers", "status": pos_status, "judge_id": "x"},
                {"criterion_id": "warm", "status": "unmet", "judge_id": "gate" if gated else "x"}]
    return {"id": row_id, "score": score, "verdicts": verdicts}


def test_paired_change_by_hand():
    before = [record("a", 0.2, gated=True), record("b", 0.5), record("c", 0.4), record("d", None)]
    after = [record("a", 0.6), record("b", 0.7, pos_status="unmet"), record("c", 0.4), record("d", 0.9),
             record("e", 1.0)]
    change = paired_change(before, after, {"r": RUBRIC}, resamples=2000)
    assert change["n"] == 3  # d has no score before, e no record before
    assert change["difference"]["mean"] == pytest.approx((0.4 + 0.2 + 0.0) / 3)
    assert change["difference"]["ci_low"] >= 0.0 - 1e-12 and change["difference"]["ci_high"] <= 0.4 + 1e-12
    assert change["before"]["mean"] == pytest.approx((0.2 + 0.5 + 0.4) / 3)
    # hard rules: the pitfall passes when unmet, the positive rule when met; b's positive rule fails after
    assert change["before"]["hard_rule_pass_rate"] == pytest.approx(1.0)
    assert change["after"]["hard_rule_pass_rate"] == pytest.approx(5 / 6)
    assert change["before"]["gated_share"] == pytest.approx(1 / 3) and change["after"]["gated_share"] == 0.0


def test_paired_change_ci_excludes_zero_only_when_every_resample_does():
    before = [record(str(i), 0.3) for i in range(10)]
    after = [record(str(i), 0.5) for i in range(10)]
    change = paired_change(before, after, {"r": RUBRIC})
    assert change["difference"]["mean"] == pytest.approx(0.2) and change["excludes_zero"] is True
    mixed = [record(str(i), 0.3 + (0.2 if i % 2 else -0.2)) for i in range(10)]
    assert paired_change(before, mixed, {"r": RUBRIC})["excludes_zero"] is False
    assert paired_change(before, [record("z", 0.1)], {"r": RUBRIC}) is None


def test_demo_sets_the_system_prompt_and_a_config_file_does_not(tmp_path):
    assert load_config().data.system_prompt == DEMO_SYSTEM_PROMPT
    path = tmp_path / "c.yaml"
    path.write_text("rubric: empathy\n")
    assert load_config(path).data.system_prompt is None
    data = load_prompt_data("bundled:emotional_support", None, "empathy", system_prompt="Be kind.")
    assert all(r.messages[0] == {"role": "system", "content": "Be kind."} for r in data.train + data.heldout)
    assert all(r.messages[-1]["role"] == "user" for r in data.heldout)
    plain = load_prompt_data("bundled:emotional_support", None, "empathy")
    assert all(r.messages[0]["role"] == "user" for r in plain.train)


def test_rows_with_their_own_system_message_keep_it(tmp_path):
    import json

    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": [{"role": "system", "content": "Own."}, {"role": "user", "content": "Hi"}]})
                    + "\n" + json.dumps({"prompt": "Hello there"}) + "\n")
    data = load_prompt_data(str(path), str(path), "empathy", system_prompt="Be kind.")
    systems = [r.messages[0]["content"] for r in data.heldout]
    assert systems == ["Own.", "Be kind."]
