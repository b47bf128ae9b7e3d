"""TRL's GRPOTrainer with three rubricrl additions hooked around its batch builder: rubric
scaffolding (hints in rollout prompts), the Selective Sample Buffer, and utterance-level credit
for dialogue rollouts (per-token advantages, one per policy turn). Everything else — generation,
the loss, optimisation, checkpoints — is TRL's own."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from transformers import TrainerCallback
from trl import GRPOTrainer

from rubricrl.core.jsonl import append_lines
from rubricrl.dialogue.credit import TurnCredit, token_advantages
from rubricrl.rubrics.model import Rubric
from rubricrl.train.buffer import SelectiveSampleBuffer
from rubricrl.train.config import ScaffoldConfig
from rubricrl.train.scaffold import draw, hint_probability, hint_text, with_hint


class RubricGRPOTrainer(GRPOTrainer):
    def __init__(self, *args, scaffold: ScaffoldConfig | None = None, rubrics: dict[str, Rubric] | None = None,
                 sample_buffer: SelectiveSampleBuffer | None = None, turn_credit: TurnCredit | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaffold = scaffold if scaffold and scaffold.enabled else None
        self.rubric_table = rubrics or {}
        self.sample_buffer = sample_buffer
        self.turn_credit = turn_credit
        if turn_credit is not None:
            if not hasattr(self.rollout_func, "last_transcripts"):
                raise ValueError("turn credit needs the dialogue rollout (rollout_func=DialogueRollout(...))")
            if self.accelerator.num_processes > 1:
                # TRL spreads a group's rows over processes and gathers their rewards; the per-turn
                # rewards are computed from this process's conversations only
                raise ValueError("dialogue.credit: turn runs in one process only; use credit: episode with "
                                 f"{self.accelerator.num_processes} processes")

    def _generate_and_score_completions(self, inputs):
        inputs = self._with_scaffold(inputs)
        batch = super()._generate_and_score_completions(inputs)
        if self.turn_credit is not None:
            batch = self._with_turn_credit(batch)
        if self.sample_buffer is not None and self.model.training:
            batch, metrics = self.sample_buffer.process(batch)
            for name, value in metrics.items():
                self._metrics["train"][name].append(value)
        return batch

    def _with_turn_credit(self, batch: dict) -> dict:
        """Replace TRL's one advantage per conversation by one per policy turn, on that turn's
        tokens ((B, T) advantages, which TRL's loss accepts as they are)."""
        import torch

        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        result = self.turn_credit.compute(self.rollout_func.last_transcripts, group, self.scale_rewards)
        mask = batch["completion_mask"] * batch["tool_mask"]  # 1 exactly on the policy's own tokens
        advantages = batch["advantages"]
        batch["advantages"] = torch.tensor(token_advantages(mask.tolist(), result.advantages),
                                           dtype=advantages.dtype, device=advantages.device)
        for name, value in result.metrics().items():
            self._metrics[mode][name].append(value)
        return batch

    def _with_scaffold(self, inputs: list[dict]) -> list[dict]:
        out = []
        step = self.state.global_step
        if self.scaffold is not None and self.model.training:
            s = self.scaffold
            p = hint_probability(step, s.start_prob, s.end_prob, s.decay_steps or self.args.max_steps, s.schedule)
            self._metrics["train"]["scaffold/probability"].append(p)
        hinted = 0
        for x in inputs:
            x = {**x, "original_prompt": x["prompt"]}
            if self.scaffold is not None and self.model.training and x.get("rubric") in self.rubric_table:
                if draw(self.args.seed, step, json.dumps(x["prompt"], sort_keys=True)) < p:
                    hint = hint_text(self.rubric_table[x["rubric"]], self.scaffold.max_hints)
                    x["prompt"] = with_hint(x["prompt"], hint)
                    hinted += 1
            out.append(x)
        if self.scaffold is not None and self.model.training:
            self._metrics["train"]["scaffold/hinted_share"].append(hinted / max(len(inputs), 1))
        return out


class SampleSource(Protocol):
    """A reward function that keeps what its last call judged: `last_records`, one JSON-ready dict
    per completion, replaced (a new list) on every call. RubricReward (rewards/functions.py,
    `SampleRecord`) and the dialogue rewards have it.

    Why not TRL's `log_extra`: TRL 1.16 keeps those columns in the trainer's private `_logs` (for its
    completions table, only with `log_completions`), with no public way for a callback to read them."""

    @property
    def last_records(self) -> Sequence[Mapping[str, Any]]: ...


class RunFilesCallback(TrainerCallback):
    """Appends every log line to metrics.jsonl and every newly judged batch to samples.jsonl."""

    def __init__(self, run_dir: Path, reward: SampleSource | None = None):
        self.metrics_path = run_dir / "metrics.jsonl"
        self.samples_path = run_dir / "samples.jsonl"
        self.reward = reward
        self._last_written = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and state.is_world_process_zero:
            # allow_nan: a NaN loss is logged as it is, never a crash
            append_lines(self.metrics_path, [{"step": state.global_step, **logs}], allow_nan=True)

    def on_step_end(self, args, state, control, **kwargs):
        if self.reward is None:
            return
        records = self.reward.last_records
        if not records or records is self._last_written or not state.is_world_process_zero:
            return
        self._last_written = records
        append_lines(self.samples_path, ({"step": state.global_step, **record} for record in records), allow_nan=True)
