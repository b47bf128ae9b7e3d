"""TRL reward functions: small callables `reward(prompts, completions, **columns) -> list[float | None]`.

`rubricrl.rewards` is a public import path (docs, examples, users' TRL scripts)."""

from rubricrl.rewards.functions import ErrorPolicy, STRUCTURED_SPANS, JudgeFailure, completion_text, RubricReward, FormatReward, LengthPenalty  # noqa: F401

__all__ = ['ErrorPolicy', 'STRUCTURED_SPANS', 'JudgeFailure', 'completion_text', 'RubricReward', 'FormatReward', 'LengthPenalty']
