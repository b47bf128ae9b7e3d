"""Utterance-level credit (dialogue/credit.py): per-turn attribution from the transcript's
emotions, the combination with the episode reward, pooled group advantages, per-turn samples
and per-token advantages, all by hand; the config switch; the trainer hook on a hand-made
batch; the per-turn samples are what the per-token advantages train (a tiny random model); and
a real 2-step training run with `credit: turn` (slow)."""

from __future__ import annotations

import json
import math
import shutil
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from rubricrl.dialogue.credit import (
    RewardView,
    TurnCredit,
    combine,
    group_advantages,
    token_advantages,
    turn_attribution,
    turn_rewards,
    turn_samples,
    turn_spans,
)
from rubricrl.dialogue.rewards import DialogueRubricReward, EmotionReward
from rubricrl.dialogue.rollout import Transcript, Turn


def transcript(changes, start=40.0, end_reason="max_turns", tid="t", texts=None) -> Transcript:
    turns, emotion = [Turn(role="user", text="I lost my job.", emotion=start)], start
    for k, d in enumerate(changes):
        emotion = min(100.0, max(0.0, emotion + d))
        turns += [Turn(role="supporter", text=texts[k] if texts else f"reply {k}"),
                  Turn(role="user", text="more", emotion=emotion, change=d, raw_change=d)]
    return Transcript(trajectory_id=tid, persona_id="p", group="g", seed=0, start_emotion=start, turns=turns,
                      final_emotion=emotion, end_reason=end_reason)


# ---------------------------------------------------------------- attribution and the formula


def test_attribution_is_each_turns_emotion_change_mapped_to_0_1():
    t = transcript([10, -5, 5])  # emotions 40 -> 50 -> 45 -> 50
    # (after - before) / (2 * 10) + 1/2: +10 -> 1.0, -5 -> 0.25, +5 -> 0.75
    assert turn_attribution(t, 10) == pytest.approx([1.0, 0.25, 0.75])
    # B = 5 on the same emotions: +10 -> 1.5, -5 -> 0.0, +5 -> 1.0 (the bound is the user's max_change)
    assert turn_attribution(t, 5) == pytest.approx([1.5, 0.0, 1.0])
    # the emotion is clamped at 100: a +10 from 95 caused +5 -> 0.75 (the recorded change says +10)
    top = transcript([10, -10], start=95)  # 95 -> 100 -> 90
    assert top.changes == [10, -10] and turn_attribution(top, 10) == pytest.approx([0.75, 0.0])
    assert turn_attribution(transcript([10], end_reason="error"), 10) is None
    broken = transcript([10, 5])
    broken.turns[-1].emotion = None  # a supporter turn without an emotion after it
    with pytest.raises(ValueError, match="2 supporter turn"):
        turn_attribution(broken, 10)


def test_combination_formula():
    # r_t = alpha * R + (1 - alpha) * a_t, R = 0.5, a = [1.0, 0.25, 0.75]
    assert combine(0.5, [1.0, 0.25, 0.75], 0.5) == pytest.approx([0.75, 0.375, 0.625])
    assert combine(0.5, [1.0, 0.25, 0.75], 0.2) == pytest.approx([0.9, 0.3, 0.7])  # 0.1 + 0.8 a_t
    assert combine(0.5, [1.0, 0.25, 0.75], 1.0) == pytest.approx([0.5, 0.5, 0.5])  # episode credit per turn
    assert combine(0.5, [1.0, 0.25, 0.75], 0.0) == pytest.approx([1.0, 0.25, 0.75])  # attribution only
    with pytest.raises(ValueError, match="alpha"):
        combine(0.5, [1.0], 1.5)


def test_turn_rewards_weight_every_reward_function_like_trl():
    emotion = RewardView(1.0, [0.5, 0.5, None, 0.3], [[1.0, 0.25, 0.75], [1.0, 0.25, 0.75], None, [0.4]])
    rubric_turns = RewardView(0.5, [0.6, 0.6, None, None], [[0.4, 0.8, 0.6], [0.4, 0.8, 0.6], None, None])
    rubric_whole = RewardView(0.5, [0.6, 0.6, None, None])  # per conversation: no per-turn view
    [per_turn, whole_a, masked, judge_failed] = turn_rewards([emotion, rubric_turns], [3, 3, 2, 1], alpha=0.5)
    # R = 0.5 + 0.5 * 0.6 = 0.8; a = [1.0 + 0.2, 0.25 + 0.4, 0.75 + 0.3] = [1.2, 0.65, 1.05]
    # r = 0.4 + 0.5 a = [1.0, 0.725, 0.925]
    assert per_turn == pytest.approx([1.0, 0.725, 0.925]) and whole_a == pytest.approx(per_turn)
    assert masked is None  # every function masked it
    # the rubric's None counts 0 (TRL's nansum): R = 0.3, a = [0.4], r = 0.15 + 0.2
    assert judge_failed == pytest.approx([0.35])
    [whole, *_] = turn_rewards([emotion, rubric_whole], [3, 3, 2, 1], alpha=0.5)
    # a function without a per-turn view gives each turn its episode score: a = [1.3, 0.55, 1.05]
    assert whole == pytest.approx([0.4 + 0.65, 0.4 + 0.275, 0.4 + 0.525])
    with pytest.raises(ValueError, match="2 per-turn score"):
        turn_rewards([RewardView(1.0, [0.5], [[0.1, 0.2]])], [3], alpha=0.5)


def test_group_advantages_pool_the_turns_of_a_group():
    values = [[1.0, 0.5], [0.0], [0.3], [0.3], None, [0.9]]
    adv, zero = group_advantages(values, 2, "none")
    # group 0 pools [1.0, 0.5, 0.0]: mean 0.5
    assert adv[0] == pytest.approx([0.5, 0.0]) and adv[1] == pytest.approx([-0.5])
    # group 1: [0.3, 0.3] has no spread; group 2 has one scored turn (a masked conversation): no spread
    assert adv[2:4] == [[0.0], [0.0]] and adv[4] is None and adv[5] == [0.0]
    assert zero == [False, True, True]
    adv, _ = group_advantages(values, 2, "group")
    # Bessel std of [1.0, 0.5, 0.0] = sqrt((0.25 + 0 + 0.25) / 2) = 0.5; A = (r - 0.5) / (0.5 + 1e-4)
    assert adv[0] == pytest.approx([0.5 / 0.5001, 0.0]) and adv[1] == pytest.approx([-0.5 / 0.5001])
    assert adv[2:4] == [[0.0], [0.0]] and adv[5] == [0.0]  # fewer than two values: NaN -> 0, as TRL
    adv, _ = group_advantages(values, 2, "batch")
    # batch std over [1.0, 0.5, 0.0, 0.3, 0.3, 0.9]: mean 0.5, squares 0.25 0 0.25 0.04 0.04 0.16 = 0.74,
    # / 5 = 0.148, sqrt = 0.384708
    assert adv[0] == pytest.approx([0.5 / (0.384708 + 1e-4), 0.0], abs=1e-5)
    # episode credit is the same computation on one value per conversation: TRL's advantages
    episode, zero = group_advantages([[0.5], [0.5], [0.2], [0.6]], 2, "group")
    # group 1: mean 0.4, std sqrt((0.04 + 0.04) / 1) = 0.282843
    assert episode[:2] == [[0.0], [0.0]] and episode[2] == pytest.approx([-0.2 / (0.282843 + 1e-4)], abs=1e-6)
    assert zero == [True, False]
    with pytest.raises(ValueError, match="groups of 4"):
        group_advantages(values, 4)


# ---------------------------------------------------------------- per-turn samples and per-token advantages

EOS = 99
PROMPT = [1, 2, 3]
# policy turn 0 ends itself; the user's segment; turn 1 is cut at its limit and closed with EOS (mask 0)
COMPLETION = [10, 11, EOS, 20, 21, 22, 12, 13, EOS]
ENV_MASK = [1, 1, 1, 0, 0, 0, 1, 1, 0]


def test_per_turn_samples_are_the_history_then_the_turn():
    assert turn_spans(ENV_MASK) == [(0, 3), (6, 8)]
    first, second = turn_samples(PROMPT, COMPLETION, ENV_MASK, EOS)
    assert (first.turn, first.prompt_ids, first.completion_ids, first.mask) == (0, [1, 2, 3], [10, 11, EOS], [1, 1, 1])
    # the second turn's prompt is the whole history before it, the user's reply included
    assert second.prompt_ids == [1, 2, 3, 10, 11, EOS, 20, 21, 22]
    assert second.completion_ids == [12, 13, EOS] and second.mask == [1, 1, 0]  # the closing EOS is not trained
    # prompt + completion of the last turn is the whole trajectory
    assert second.prompt_ids + second.completion_ids == PROMPT + COMPLETION
    with pytest.raises(ValueError, match="env_mask"):
        turn_samples(PROMPT, COMPLETION, ENV_MASK[:-1], EOS)


def test_token_advantages_put_each_turns_advantage_on_its_tokens():
    padded = ENV_MASK + [0, 0]  # right padding
    rows = token_advantages([padded, [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], [0] * 11], [[0.7, -0.2], None, [0.5]])
    assert rows[0] == [0.7, 0.7, 0.7, 0, 0, 0, -0.2, -0.2, 0, 0, 0]
    assert rows[1] == [0.0] * 11  # a masked conversation moves nothing
    assert rows[2] == [0.0] * 11  # a row with no policy token (e.g. masked as truncated) gets nothing
    with pytest.raises(ValueError, match="2 policy turn"):
        token_advantages([padded], [[0.7]])


def test_per_token_advantages_train_exactly_the_per_turn_samples():
    """The mechanism: a causal model gives a turn's tokens the same log-probabilities inside the
    whole trajectory as in the per-turn sample (prompt = history), so the token-level loss with
    per-token advantages equals the loss over the per-turn samples, value and gradient."""
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64))
    turn_adv = [0.7, -0.2]

    def logps(prompt, completion):
        ids = torch.tensor([prompt + completion])
        logits = model(ids).logits[0, len(prompt) - 1:-1]
        return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None])[:, 0]

    def grads(loss):
        model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    per_token = torch.tensor(token_advantages([ENV_MASK], [turn_adv])[0])
    mask = torch.tensor(ENV_MASK, dtype=torch.float32)
    whole = logps(PROMPT, COMPLETION)
    loss_whole = -(per_token * whole * mask).sum() / mask.sum()  # TRL's dapo loss on one sequence
    samples = turn_samples(PROMPT, COMPLETION, ENV_MASK, EOS)
    parts = [logps(s.prompt_ids, s.completion_ids) for s in samples]
    for (start, _), sample, part in zip(turn_spans(ENV_MASK), samples, parts):
        assert torch.allclose(part, whole[start:start + len(part)], atol=1e-5)
    loss_samples = -sum(a * (p * torch.tensor(s.mask)).sum() for a, s, p in zip(turn_adv, samples, parts)) / sum(
        sum(s.mask) for s in samples)
    assert loss_whole.item() == pytest.approx(loss_samples.item(), abs=1e-6)
    for a, b in zip(grads(loss_whole), grads(loss_samples)):
        assert torch.allclose(a, b, atol=1e-6)


# ---------------------------------------------------------------- reward functions and TurnCredit


class QuestionJudge:
    """Met when the reply asks a question."""

    async def judge(self, requests):
        from rubricrl.core.verdicts import Status, Verdict

        return [[Verdict(criterion_id=c.id, status=Status.MET if "?" in r.response else Status.UNMET, judge_id="q")
                 for c in r.criteria] for r in requests]


def question_rubric(tmp_path):
    from rubricrl.rubrics.loading import load_rubric

    path = tmp_path / "q.yaml"
    path.write_text("id: q\ncriteria:\n  - id: asks\n    text: Asks a question.\n    weight: 1\n"
                    "    check: {type: contains, any_of: ['?']}\n")
    return load_rubric(path)


def test_reward_functions_keep_their_per_turn_scores(tmp_path):
    a = transcript([10, -5, 5], tid="a", texts=["How are you?", "I see.", "Why?"])
    b = transcript([3], end_reason="error", tid="b")
    rows = [a.model_dump(mode="json"), b.model_dump(mode="json")]
    emotion = EmotionReward("final", max_change=10)
    assert emotion([None] * 2, [None] * 2, transcript=rows) == [pytest.approx(0.5), None]
    assert emotion.last_rewards == [pytest.approx(0.5), None]
    assert emotion.last_turn_scores == [pytest.approx([1.0, 0.25, 0.75]), None]
    per_turn = DialogueRubricReward(QuestionJudge(), question_rubric(tmp_path), "turn", soft=False)
    assert per_turn([None] * 2, [None] * 2, transcript=rows) == [pytest.approx(2 / 3), None]
    assert per_turn.last_turn_scores == [[1.0, 0.0, 1.0], None]
    whole = DialogueRubricReward(QuestionJudge(), question_rubric(tmp_path), "conversation", soft=False)
    whole([None] * 2, [None] * 2, transcript=rows)
    assert whole.last_rewards == [1.0, None] and whole.last_turn_scores is None


def test_turn_credit_from_the_reward_functions_annotates_the_samples(tmp_path):
    group = [transcript([10, -5], tid="s0"), transcript([0], tid="s1")]  # 40 -> 50 -> 45; 40 -> 40
    rows = [t.model_dump(mode="json") for t in group]
    emotion = EmotionReward("final", max_change=10)
    emotion([None] * 2, [None] * 2, transcript=rows)  # R = [0.45, 0.40]; a = [[1.0, 0.25], [0.5]]
    credit = TurnCredit([emotion], [1.0], alpha=0.5)
    result = credit.compute(group, group_size=2, scale="none")
    # r = 0.5 R + 0.5 a: s0 [0.225 + 0.5, 0.225 + 0.125] = [0.725, 0.35]; s1 [0.2 + 0.25] = [0.45]
    assert result.rewards[0] == pytest.approx([0.725, 0.35]) and result.rewards[1] == pytest.approx([0.45])
    # pooled mean (0.725 + 0.35 + 0.45) / 3 = 0.508333
    assert result.advantages[0] == pytest.approx([0.216667, -0.158333], abs=1e-6)
    assert result.advantages[1] == pytest.approx([-0.058333], abs=1e-6)
    metrics = result.metrics()
    assert metrics["credit/turn_reward"] == pytest.approx(0.508333, abs=1e-6)
    assert metrics["credit/zero_spread_share"] == 0.0
    # Bessel std of [0.725, 0.35, 0.45]: squares 0.046944 + 0.025069 + 0.003403 = 0.075417, / 2, sqrt = 0.194187
    assert metrics["credit/turn_reward_std"] == pytest.approx(0.194187, abs=1e-6)
    assert emotion.last_records[0]["turn_rewards"] == pytest.approx([0.725, 0.35])
    assert emotion.last_records[1]["turn_advantages"] == pytest.approx([-0.058333], abs=1e-6)
    with pytest.raises(ValueError, match="scored 2 conversations"):
        credit.compute(group[:1], group_size=1)
    with pytest.raises(ValueError, match="last_rewards"):
        TurnCredit([lambda **kw: []], [1.0])


def test_trainer_hook_replaces_advantages_per_token():
    torch = pytest.importorskip("torch")
    from rubricrl.train.trainer import RubricGRPOTrainer

    group = [transcript([10, -5], tid="s0"), transcript([0], tid="s1")]
    emotion = EmotionReward("final", max_change=10)
    emotion([None] * 2, [None] * 2, transcript=[t.model_dump(mode="json") for t in group])
    metrics = defaultdict(lambda: defaultdict(list))
    fake = SimpleNamespace(model=SimpleNamespace(training=True), num_generations=2, num_generations_eval=2,
                           turn_credit=TurnCredit([emotion], [1.0], alpha=0.5), scale_rewards="none",
                           rollout_func=SimpleNamespace(last_transcripts=group), _metrics=metrics)
    batch = {"completion_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]),
             # env_mask as TRL pads it (1s on the right): s0 = turn, user, turn; s1 = one turn
             "tool_mask": torch.tensor([[1, 1, 0, 0, 1, 1], [1, 1, 0, 1, 1, 1]]),
             "advantages": torch.tensor([0.3, -0.3])}
    out = RubricGRPOTrainer._with_turn_credit(fake, batch)
    a, b, c = 0.216667, -0.158333, -0.058333  # the per-turn advantages of the test above
    assert out["advantages"].shape == (2, 6)
    assert torch.allclose(out["advantages"], torch.tensor([[a, a, 0, 0, b, b], [c, c, 0, 0, 0, 0]]), atol=1e-5)
    assert metrics["train"]["credit/turn_reward"] == [pytest.approx(0.508333, abs=1e-6)]


# ---------------------------------------------------------------- config


def dialogue_config(*overrides):
    from rubricrl.train.config import load_config

    return load_config(None, ["dialogue.enabled=true", *overrides])


def test_credit_config_defaults_and_alpha():
    from rubricrl.train.config import load_config

    d = load_config().dialogue
    assert d.credit == "episode" and d.credit_alpha is None
    d = dialogue_config("dialogue.credit=turn").dialogue
    assert d.credit == "turn" and d.credit_alpha_or_default == 0.5
    assert dialogue_config("dialogue.credit=turn", "dialogue.credit_alpha=0.3").dialogue.credit_alpha_or_default == 0.3


@pytest.mark.parametrize("overrides, message", [
    (["dialogue.credit=token"], "dialogue.credit: Input should be 'episode' or 'turn'"),
    (["dialogue.credit=turn", "dialogue.credit_alpha=1.5"], "dialogue.credit_alpha: Input should be less than or "
                                                            "equal to 1"),
    (["dialogue.credit=turn", "dialogue.credit_alpha=-0.1"], "dialogue.credit_alpha: Input should be greater than"),
    (["dialogue.credit_alpha=0.3"], "credit_alpha applies only with dialogue.credit: turn"),
    (["dialogue.credit=turn", "grpo.multi_objective_aggregation=normalize_then_sum"],
     "it needs grpo.multi_objective_aggregation: sum_then_normalize"),
])
def test_bad_credit_settings_fail_before_any_model_loads(overrides, message):
    from rubricrl.train.config import ConfigError

    with pytest.raises(ConfigError) as info:
        dialogue_config(*overrides)
    assert message in str(info.value)


def test_turn_credit_needs_dialogue_training():
    from rubricrl.train.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"applies only to dialogue training \(dialogue.enabled: true\)"):
        load_config(None, ["dialogue.credit=turn"])


# ---------------------------------------------------------------- a real run


@pytest.mark.slow
def test_turn_credit_training_run(tmp_path_factory, llama_url):
    import torch
    import yaml
    from safetensors.torch import load_file

    from rubricrl.llm.models import resolve
    from rubricrl.train.config import load_config
    from rubricrl.train.run import run_training

    tmp = tmp_path_factory.mktemp("credit-train")
    try:
        config = {"output_dir": str(tmp / "run"),
                  "dialogue": {"enabled": True, "limit": 2, "max_turns": 2, "max_new_tokens": 24,
                               "user_model": f"openai:{llama_url}", "credit": "turn", "credit_alpha": 0.5},
                  "grpo": {"max_steps": 2, "per_device_train_batch_size": 4, "num_generations": 2,
                           "max_completion_length": 512, "save_steps": 1000, "learning_rate": 1e-4}}
        (tmp / "c.yaml").write_text(yaml.safe_dump(config))
        logs: list[str] = []
        summary = run_training(load_config(tmp / "c.yaml"), log=logs.append)
        run_dir = Path(config["output_dir"])
        assert summary["steps"] == 2 and summary["credit"] == "turn"
        assert any("credit per turn (alpha 0.5)" in line for line in logs)
        before = load_file(str(Path(resolve(None)) / "model.safetensors"))
        after = load_file(str(run_dir / "final" / "model.safetensors"))
        assert sum(not torch.equal(before[k], after[k]) for k in before if k in after) > len(before) // 2
        metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
        assert [m["step"] for m in metrics] == [1, 2]
        for m in metrics:
            assert 0.0 <= m["credit/zero_spread_share"] <= 1.0
            assert math.isnan(m["credit/turn_reward"]) or 0.0 <= m["credit/turn_reward"] <= 1.0
        samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
        assert len(samples) == 8
        for s in samples:
            supporter = sum(t["role"] == "supporter" for t in s["turns"])
            if s["end_reason"] == "error":
                assert s["turn_rewards"] is None
                continue
            assert len(s["turn_rewards"]) == len(s["turn_advantages"]) == supporter
            # alpha 0.5, emotion reward alone (final mode): r_t = 0.5 final / 100 + 0.5 (d_t / 20 + 1/2)
            emotions = [s["turns"][0]["emotion"]] + [t["emotion"] for t in s["turns"][1:] if t["role"] == "user"]
            expected = [0.5 * s["final_emotion"] / 100 + 0.5 * ((b - a) / 20 + 0.5)
                        for a, b in zip(emotions, emotions[1:])]
            assert s["turn_rewards"] == pytest.approx(expected)
        # transformers' Trainer saves a checkpoint at the last step whatever save_steps says
        assert [c.name for c in run_dir.glob("checkpoints/checkpoint-*")] == ["checkpoint-2"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the final model is large; a small CI disk runs out
