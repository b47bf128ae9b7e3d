"""Training configuration: one YAML file, validated completely before any model loads.

`grpo:` keys are passed unchanged to TRL's `GRPOConfig` (checked against its fields), so every
TRL option (loss_type, beta, num_generations, use_vllm, ...) works as documented by TRL.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rubricrl.core.extras import require
from rubricrl.core.jsonl import read_text

_STRICT = ConfigDict(extra="forbid")
# What training imports, all from the 'train' extra (which includes 'local' for the default reward judge
# and 'reports' for the run's report).
TRAINING_MODULES = ("torch", "transformers", "trl", "datasets", "peft", "accelerate", "matplotlib")


def require_training() -> None:
    """Raise `MissingExtraError` naming `pip install 'rubricrl[train]'` unless training's libraries are there."""
    require(*TRAINING_MODULES, extra="train", feature="GRPO training (`rubricrl train`)")


# rubricrl's defaults for GRPOConfig: sized for the embedded demo on a 2-core CPU.
DEMO_GRPO = {
    "num_generations": 4,
    "per_device_train_batch_size": 8,
    "max_completion_length": 96,
    "max_steps": 24,
    "learning_rate": 1.0e-5,
    "beta": 0.0,
    # issue 15: at temperature 1.0 the 135M policy writes word salad (7 of 280 sampled gold replies were
    # coherent), so the reward had nothing sensible to compare; 0.7 with nucleus 0.9 keeps GRPO's spread
    "temperature": 0.7,
    "top_p": 0.9,
    "logging_steps": 1,
    "save_steps": 8,
    "save_total_limit": 2,
    "report_to": "none",
    "seed": 0,
}


# The demo's system message (our own text): the embedded 135M policy writes shorter, more focused
# replies with it, so fewer completions are cut off at max_completion_length.
# bench/clipping.py, embedded policy, 120 samples of the training prompts: with "two or three short sentences:
# acknowledge the feeling, reflect what happened, ..." 69% were not finished by 96 tokens; with this one, 27.5%.
DEMO_SYSTEM_PROMPT = ("You are a warm, attentive listener. Reply in one or two short sentences (under 40 words): "
                      "name the feeling, mention what happened, and ask one gentle question.")
# What `rubricrl train` without a config file sets on top of the defaults (docs/training.md).
DEMO_SETTINGS: dict[str, Any] = {"data": {"system_prompt": DEMO_SYSTEM_PROMPT}}


# The held-out judge: the quality gate and exemplar models fitted on half `b` of the bundled examples,
# which share no prompt with the reward judge's half `a` (bench/gold/fit_bundled.py).
EVAL_JUDGE = "gate:bundled:eval+exemplar:bundled:eval"


class ConfigError(ValueError):
    pass


class DataConfig(BaseModel):
    model_config = _STRICT
    train: str = Field("bundled:emotional_support", description="JSONL/JSON/CSV/Parquet file or bundled:NAME")
    heldout: str | None = Field(None, description="file for held-out prompts; default: rows of `train` whose "
                                                  "`split` column is 'heldout'")
    prompt_field: str = "prompt"
    limit_train: int | None = Field(None, ge=1)
    limit_heldout: int | None = Field(None, ge=1)
    system_prompt: str | None = Field(None, description="system message put first in every prompt that has none "
                                                        "(the demo sets one, see DEMO_SYSTEM_PROMPT)")


class RewardConfig(BaseModel):
    model_config = _STRICT
    judge: str = Field("gate+exemplar+local", description="reward judge spec (docs/judges.md)")
    mode: Literal["pointwise", "pairwise"] = Field("pointwise", description="pointwise: each completion's rubric "
                                                   "score; pairwise: its criterion-weighted win rate against the "
                                                   "other completions of its group (rewards/pairwise.py)")
    pairwise_max_pairs: int | None = Field(None, ge=1, description="pairwise: at most this many pairs per group "
                                                                   "(default: every pair, round robin)")
    error_policy: Literal["mask", "zero", "raise"] = "mask"
    soft: bool = Field(True, description="score model verdicts by p_met (expected points) instead of 0/1")
    threshold: float = Field(0.5, ge=0.0, le=1.0)
    structured: bool = Field(False, description="completions use <understanding>/<reasoning>/<emotion>/<response> "
                                                "spans; only <response> is judged; adds a format reward")
    format_weight: float = 0.5
    length_max_words: int | None = Field(None, ge=1, description="add a length penalty beyond this many words")
    length_weight: float = 0.5
    novelty_weight: float = Field(0.0, ge=0.0, description="λ: add λ · tactic novelty vs earlier assistant turns")
    novelty_mode: Literal["overlap", "kl"] = "overlap"
    tactic_classifier: str | None = Field(None, description="fitted tactic classifier dir (default: bundled)")

    @model_validator(mode="after")
    def _pairwise(self) -> RewardConfig:
        if self.mode != "pairwise":
            if self.pairwise_max_pairs is not None:
                raise ValueError("pairwise_max_pairs applies only with reward.mode: pairwise")
            return self
        from rubricrl.judges.pairwise import pairwise_spec_problem

        problem = pairwise_spec_problem(self.judge)
        if problem:
            raise ValueError(f"reward.mode pairwise: {problem}")
        return self


class EvalConfig(BaseModel):
    model_config = _STRICT
    judge: str = Field(EVAL_JUDGE, description="held-out judge, independent of the reward judge: by default the "
                                               "bundled models fitted on prompt-disjoint examples (docs/training.md)")
    max_new_tokens: int = Field(96, ge=1)
    enabled: bool = True


class LoraConfig(BaseModel):
    model_config = _STRICT
    r: int = Field(8, ge=1)
    alpha: int = Field(16, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] | str = "all-linear"


class BufferConfig(BaseModel):
    """Selective Sample Buffer (Skywork R1V2)."""

    model_config = _STRICT
    enabled: bool = False
    zero_spread_threshold: float = Field(0.5, ge=0.0, le=1.0, description="replay when this share of groups "
                                                                          "has zero reward spread")
    capacity: int = Field(64, ge=1)
    min_abs_advantage: float = Field(0.1, ge=0.0)


class ScaffoldConfig(BaseModel):
    """Rubric items as hints in rollout prompts (RuscaRL), with a decaying probability."""

    model_config = _STRICT
    enabled: bool = False
    start_prob: float = Field(1.0, ge=0.0, le=1.0)
    end_prob: float = Field(0.0, ge=0.0, le=1.0)
    schedule: Literal["linear", "exponential"] = "linear"
    decay_steps: int | None = Field(None, ge=1, description="steps to reach end_prob (default: max_steps)")
    max_hints: int = Field(3, ge=1)


DEFAULT_CREDIT_ALPHA = 0.5  # dialogue.credit turn: weight of the episode reward in a turn's reward


class DialogueConfig(BaseModel):
    """Multi-turn GRPO against simulated users (docs/dialogue.md)."""

    model_config = _STRICT
    enabled: bool = False
    personas: str = Field("support_seekers", description="persona file (rubricrl or SAGE format) or bundled name")
    limit: int | None = Field(None, ge=1, description="use only the first N personas")
    user_model: str = Field("llamacpp", description="chat model playing the users: local[:MODEL], "
                                                    "llamacpp[:FILE.gguf] or openai:URL?model=NAME")
    max_turns: int = Field(3, ge=1, description="supporter turns per conversation")
    start_emotion: float = Field(30, ge=0, le=100)
    max_change: int = Field(10, ge=1)
    max_new_tokens: int = Field(64, ge=1, description="tokens per policy turn")
    reward_mode: Literal["final", "step", "mixed"] = "final"
    alpha: float = Field(0.5, ge=0.0, le=1.0, description="mixed: weight of the discounted return")
    gamma: float = Field(0.9, gt=0.0, le=1.0, description="mixed: discount per turn")
    rubric_per: Literal["turn", "conversation"] | None = Field(None, description="add a rubric reward per turn "
                                                                                   "or per conversation")
    rubric_weight: float = Field(0.5, ge=0.0)
    credit: Literal["episode", "turn"] = Field("episode", description="episode: one reward and advantage per "
                                               "conversation; turn: each supporter turn its own (dialogue/credit.py)")
    credit_alpha: float | None = Field(None, ge=0.0, le=1.0, description="credit turn: r_t = alpha * episode reward "
                                       "+ (1 - alpha) * the turn's attribution (default 0.5)")

    @model_validator(mode="after")
    def _credit(self) -> DialogueConfig:
        if self.credit_alpha is not None and self.credit != "turn":
            raise ValueError("credit_alpha applies only with dialogue.credit: turn")
        return self

    @property
    def credit_alpha_or_default(self) -> float:
        return DEFAULT_CREDIT_ALPHA if self.credit_alpha is None else self.credit_alpha


class TrainConfig(BaseModel):
    model_config = _STRICT
    model: str = Field("smollm2-135m", description="policy: embedded name, hub id, directory or .gguf")
    rubric: str | None = Field("empathy", description="shared rubric (bundled name or file) for rows without one")
    output_dir: str = "runs/demo"
    data: DataConfig = DataConfig()
    reward: RewardConfig = RewardConfig()
    eval: EvalConfig = EvalConfig()
    lora: LoraConfig | None = None
    buffer: BufferConfig = BufferConfig()
    scaffold: ScaffoldConfig = ScaffoldConfig()
    dialogue: DialogueConfig = DialogueConfig()
    grpo: dict[str, Any] = Field(default_factory=dict)

    @field_validator("grpo")
    @classmethod
    def _known_grpo_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        require_training()
        from trl import GRPOConfig

        value = {k: _number_or_value(v) for k, v in value.items()}
        known = {f.name for f in dataclasses.fields(GRPOConfig)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown GRPOConfig key(s) {unknown}; see TRL's GRPOConfig documentation")
        if "output_dir" in value:
            raise ValueError("set output_dir at the top level, not under grpo")
        return value

    @model_validator(mode="after")
    def _batch_divides(self) -> TrainConfig:
        grpo = self.grpo_kwargs()
        gens, batch = grpo["num_generations"], grpo["per_device_train_batch_size"]
        if gens < 2:
            raise ValueError("grpo.num_generations must be >= 2 (GRPO needs a group to compare)")
        if batch % gens:
            raise ValueError(f"grpo.per_device_train_batch_size ({batch}) must be a multiple of "
                             f"grpo.num_generations ({gens})")
        if self.dialogue.enabled:
            if self.reward.mode == "pairwise":
                raise ValueError("reward.mode: pairwise does not apply to dialogue training: it compares completions "
                                 "of one prompt with the single-turn rubric reward, while dialogue training rewards "
                                 "whole conversations (the emotion reward, and dialogue.rubric_per with "
                                 "reward.judge) pointwise; set reward.mode: pointwise (docs/dialogue.md)")
            clashes = [name for name, on in (("scaffold", self.scaffold.enabled), ("buffer", self.buffer.enabled),
                                             ("reward.structured", self.reward.structured),
                                             ("reward.novelty_weight", self.reward.novelty_weight > 0)) if on]
            if clashes:
                raise ValueError(f"dialogue training does not combine with {', '.join(clashes)} yet; turn them off")
        if self.dialogue.credit == "turn":
            if not self.dialogue.enabled:
                raise ValueError("dialogue.credit: turn applies only to dialogue training (dialogue.enabled: true)")
            if grpo.get("multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
                raise ValueError("dialogue.credit: turn combines the weighted rewards before normalising; it needs "
                                 "grpo.multi_objective_aggregation: sum_then_normalize")
        return self

    def grpo_kwargs(self) -> dict[str, Any]:
        return {**DEMO_GRPO, **self.grpo}


_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _number_or_value(value: Any) -> Any:
    """YAML 1.1 reads `5e-6` as a string; every config value that looks like a float is one."""
    return float(value) if isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value.strip()) else value


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: use key=value, e.g. --set grpo.beta=0.04")
    key, _, raw = item.partition("=")
    return key.strip().split("."), _number_or_value(yaml.safe_load(raw)) if raw.strip() else ""


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML config (or the demo defaults), apply `key=value` overrides, validate."""
    data: dict[str, Any] = copy.deepcopy(DEMO_SETTINGS) if path is None else {}
    source = "the demo defaults"
    if path is not None:
        source = str(path)
        try:
            data = yaml.safe_load(read_text(path)) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read config: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a config must be a mapping of keys to values")
    for item in overrides or []:
        keys, value = _parse_override(item)
        node = data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {key} is not a section")
        node[keys[-1]] = value
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            lines.append(f"{source}: {key or '(top level)'}: {msg}")
        raise ConfigError("\n".join(lines)) from None
