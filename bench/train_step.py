"""Step time of rubricrl's GRPO wiring vs a plain TRL GRPOTrainer, and the share spent on rewards.

    python bench/train_step.py [--steps 4] [--repeats 2]

Both trainers run the demo GRPO settings on the embedded model, alternating in one process:
- plain: trl.GRPOTrainer with a trivial reward (completion length);
- rubricrl: RubricGRPOTrainer + RubricReward with the local judge (no cache) on the empathy rubric.
Prints the median step time of each (first step of every run excluded as warm-up), the share of
rubricrl's step spent in the reward, and the wiring overhead: (rubricrl step - its reward time) /
(plain step - its reward time) - 1. Generation lengths differ between runs, so the tokens
generated per step are printed too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from rubricrl.judges import make_judge  # noqa: E402
from rubricrl.rewards import RubricReward  # noqa: E402
from rubricrl.train.config import DEMO_GRPO  # noqa: E402
from rubricrl.train.data import load_prompt_data  # noqa: E402
from rubricrl.train.run import load_policy  # noqa: E402
from rubricrl.train.trainer import RubricGRPOTrainer  # noqa: E402


class Timed:
    """Wraps a reward function and adds up the seconds spent in it."""

    def __init__(self, fn):
        self.fn, self.seconds, self.__name__ = fn, 0.0, getattr(fn, "__name__", "reward")

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


class StepClock(TrainerCallback):
    def __init__(self, reward: Timed):
        self.reward, self.steps, self._start, self._reward_start = reward, [], 0.0, 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start, self._reward_start = time.perf_counter(), self.reward.seconds

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append((time.perf_counter() - self._start, self.reward.seconds - self._reward_start))


def trivial_reward(prompts, completions, **kwargs):
    return [len(c[0]["content"]) / 100 for c in completions]


def run(kind: str, steps: int, data, rubrics) -> tuple[list[tuple[float, float]], float]:
    model, tokenizer = load_policy(None)
    grpo = {**DEMO_GRPO, "max_steps": steps, "save_strategy": "no", "bf16": False}
    grpo.pop("save_steps"), grpo.pop("save_total_limit")
    args = GRPOConfig(output_dir=tempfile.mkdtemp(prefix=f"bench-{kind}-"), **grpo)
    dataset = Dataset.from_list([r.to_trl() for r in data.train])
    if kind == "plain":
        reward = Timed(trivial_reward)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=dataset,
                              processing_class=tokenizer)
    else:
        reward = Timed(RubricReward(make_judge("local", cache=False), rubrics=rubrics))
        trainer = RubricGRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=dataset,
                                    processing_class=tokenizer, rubrics=rubrics)
    clock = StepClock(reward)
    trainer.add_callback(clock)
    trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    return clock.steps[1:], statistics.mean(lengths) if lengths else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    data = load_prompt_data("bundled:emotional_support", None, "empathy")
    make_judge("local", cache=False)  # load the judge model before timing
    results: dict[str, list[tuple[float, float]]] = {"plain": [], "rubricrl": []}
    lengths: dict[str, list[float]] = {"plain": [], "rubricrl": []}
    for _ in range(args.repeats):
        for kind in ("plain", "rubricrl"):
            steps, length = run(kind, args.steps, data, data.rubrics)
            results[kind] += steps
            lengths[kind].append(length)
    step = {k: statistics.median(s for s, _ in v) for k, v in results.items()}
    reward = {k: statistics.median(r for _, r in v) for k, v in results.items()}
    batch = DEMO_GRPO["per_device_train_batch_size"]
    for kind in ("plain", "rubricrl"):
        print(f"{kind:9s}: step {step[kind]:6.2f} s  reward {reward[kind]:5.2f} s  "
              f"mean completion {statistics.mean(lengths[kind]):.0f} tokens x {batch}  ({len(results[kind])} steps)")
    print(f"reward share of rubricrl step: {reward['rubricrl'] / step['rubricrl']:.0%}  (target <= 25%)")
    overhead = (step["rubricrl"] - reward["rubricrl"]) / (step["plain"] - reward["plain"]) - 1
    print(f"wiring overhead beyond the judge: {overhead:+.1%}  (target <= 10%)")


if __name__ == "__main__":
    main()
