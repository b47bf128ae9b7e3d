"""Units of the training wiring: config validation, hint schedule, scaffolding, sample buffer."""

import pytest
import torch

from rubricrl.rubrics.model import Criterion, Rubric
from rubricrl.train.buffer import SelectiveSampleBuffer
from rubricrl.train.config import ConfigError, load_config
from rubricrl.train.scaffold import HINT_HEADER, draw, hint_probability, hint_text, with_hint


def test_demo_config_defaults():
    cfg = load_config()
    assert cfg.model == "smollm2-135m" and cfg.rubric == "empathy"
    assert cfg.reward.judge == "gate+exemplar+local" and cfg.eval.judge == "gate:bundled:eval+exemplar:bundled:eval"
    assert cfg.grpo_kwargs()["temperature"] == 0.7 and cfg.grpo_kwargs()["top_p"] == 0.9
    assert cfg.grpo_kwargs()["num_generations"] == 4


def test_overrides_and_types(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: Qwen/Qwen2.5-0.5B-Instruct\ngrpo: {beta: 0.04}\n")
    cfg = load_config(path, ["grpo.loss_type=dr_grpo", "grpo.learning_rate=1e-6", "lora.r=16", "reward.soft=false"])
    assert cfg.grpo_kwargs()["loss_type"] == "dr_grpo" and cfg.grpo_kwargs()["learning_rate"] == 1e-6
    assert cfg.grpo_kwargs()["beta"] == 0.04 and cfg.lora.r == 16 and cfg.reward.soft is False


@pytest.mark.parametrize("override, message", [
    ("grpo.num_generation=4", "unknown GRPOConfig key(s) ['num_generation']"),
    ("reward.judj=local", "reward.judj: unknown key"),
    ("reward.error_policy=ignore", "reward.error_policy"),
    ("grpo.per_device_train_batch_size=6", "must be a multiple of grpo.num_generations"),
    ("grpo.output_dir=/x", "set output_dir at the top level"),
    ("nonsense", "use key=value"),
])
def test_invalid_config_names_the_key(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert message in str(info.value)


def test_unreadable_config(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("grpo: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(bad)


def test_linear_and_exponential_decay():
    assert hint_probability(0, 1.0, 0.0, 10, "linear") == 1.0
    assert hint_probability(5, 1.0, 0.0, 10, "linear") == pytest.approx(0.5)
    assert hint_probability(20, 1.0, 0.0, 10, "linear") == 0.0
    # exponential from 0.8 to 0.2 over 10 steps: 0.8 * (0.2 / 0.8) ** 0.5 = 0.4 at step 5
    assert hint_probability(5, 0.8, 0.2, 10, "exponential") == pytest.approx(0.4)
    assert hint_probability(10, 0.8, 0.0, 10, "exponential") == 0.0
    values = [hint_probability(s, 1.0, 0.0, 10, "exponential") for s in range(11)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    with pytest.raises(ValueError):
        hint_probability(1, 1, 0, 10, "cosine")


def test_hints_use_top_weighted_positive_principles():
    rubric = Rubric(criteria=(
        Criterion(id="a", text="Validates.", weight=3), Criterion(id="b", text="Asks.", weight=1),
        Criterion(id="c", text="Short.", weight=5, check={"type": "length", "max": 9}),
        Criterion(id="d", text="Blames.", weight=-3), Criterion(id="e", text="Reflects.", weight=2)))
    text = hint_text(rubric, max_hints=2)
    assert text == f"{HINT_HEADER}\n- Validates.\n- Reflects.)"
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    hinted = with_hint(messages, text)
    assert hinted[1]["content"] == "u" + text and messages[1]["content"] == "u"


def test_draw_is_fixed_per_group_and_uniform():
    assert draw(0, 3, "p") == draw(0, 3, "p")
    values = [draw(0, s, "p") for s in range(2000)]
    assert 0.45 < sum(values) / len(values) < 0.55


def batch(advantages, widths=(3, 2)):
    n = len(advantages)
    return {
        "prompt_ids": torch.arange(n * widths[0]).view(n, widths[0]),
        "prompt_mask": torch.ones(n, widths[0], dtype=torch.long),
        "completion_ids": torch.arange(n * widths[1]).view(n, widths[1]) + 100,
        "completion_mask": torch.ones(n, widths[1], dtype=torch.long),
        "advantages": torch.tensor(advantages, dtype=torch.float),
        "num_items_in_batch": torch.tensor(n * widths[1]),
    }


def test_buffer_replays_high_advantage_samples_into_zero_spread_groups():
    buf = SelectiveSampleBuffer(num_generations=2, capacity=8, zero_spread_threshold=0.4, min_abs_advantage=0.1,
                                pad_token_id=-1)
    first, m1 = buf.process(batch([1.0, -1.0, 0.05, -0.05]))
    assert m1["buffer/replayed"] == 0.0 and m1["buffer/size"] == 2.0  # only |adv| >= 0.1 kept
    assert first["advantages"].tolist() == pytest.approx([1.0, -1.0, 0.05, -0.05])
    # next step: one of two groups has zero spread (share 0.5 > 0.4): its 2 rows are replaced
    second, m2 = buf.process(batch([0.0, 0.0, 0.7, -0.7], widths=(4, 3)))
    assert m2["buffer/zero_spread_share"] == 0.5 and m2["buffer/replayed"] == 2.0
    assert second["advantages"].tolist() == pytest.approx([1.0, -1.0, 0.7, -0.7])
    # replayed rows came from a narrower batch: left-padded prompts, right-padded completions
    assert second["prompt_ids"][0].tolist() == [-1, 0, 1, 2]
    assert second["prompt_mask"][0].tolist() == [0, 1, 1, 1]
    assert second["completion_ids"][0].tolist() == [100, 101, 0]
    assert second["completion_mask"][0].tolist() == [1, 1, 0]
    # the loss normaliser follows the masks: 12 tokens before, 2 rows now have 2 instead of 3
    assert int(second["num_items_in_batch"]) == 12 - 2


def test_buffer_below_threshold_changes_nothing():
    buf = SelectiveSampleBuffer(num_generations=2, zero_spread_threshold=0.6)
    buf.process(batch([1.0, -1.0, 0.5, -0.5]))
    out, metrics = buf.process(batch([0.0, 0.0, 0.7, -0.7]))
    assert metrics["buffer/replayed"] == 0.0 and out["advantages"].tolist() == pytest.approx([0.0, 0.0, 0.7, -0.7])


def test_buffer_refuses_batches_it_does_not_understand():
    buf = SelectiveSampleBuffer(num_generations=2)
    b = batch([0.0, 0.0])
    b["pixel_values"] = torch.zeros(2, 3)
    out, metrics = buf.process(b)
    assert out is b and metrics == {"buffer/unsupported_batch": 1.0}


def test_exponent_floats_in_yaml_are_numbers(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("grpo: {learning_rate: 5e-6}\n")  # YAML 1.1 alone would give the string '5e-6'
    assert load_config(path).grpo_kwargs()["learning_rate"] == 5e-6


def test_prompt_data_from_user_file(tmp_path):
    from rubricrl.core.problems import RubricError
    from rubricrl.train.data import load_prompt_data

    rows = [{"id": f"r{i}", "prompt": f"message {i}"} for i in range(10)]
    rows[3]["rubric"] = "crisis_safety"
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    data = load_prompt_data(str(path), None, "empathy")
    # no split column: every 5th row (index 4 and 9) is held out
    assert [r.id for r in data.heldout] == ["r4", "r9"] and len(data.train) == 8
    assert len(data.rubrics) == 2
    assert data.train[3].messages == [{"role": "user", "content": "message 3"}]
    assert data.rubrics[data.train[3].rubric_key].id == "crisis-safety-v1"
    assert data.train[0].to_trl()["rubric"] == data.train[0].rubric_key

    rows[5]["rubric"] = {"criteria": [{"id": "a", "text": "x", "weight": -1}]}
    path.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    with pytest.raises(RubricError, match="prompts.jsonl:6: criteria: the rubric has no criterion with a positive"):
        load_prompt_data(str(path), None, "empathy")
    with pytest.raises(RubricError, match="no rubric for this row"):
        load_prompt_data(str(path), None, None)
    with pytest.raises(FileNotFoundError, match="no bundled prompt set"):
        load_prompt_data("bundled:nope", None, "empathy")
