"""Rubric scaffolding (RuscaRL): during rollouts, rubric items are added to the prompt as hints
with a probability that decays over training. Never used at evaluation. The reward still judges
the completion against the original prompt."""

from __future__ import annotations

import hashlib
import math

from rubricrl.rubrics.model import Rubric

HINT_HEADER = "\n\n(Guidance for your reply:"


def hint_probability(step: int, start: float, end: float, decay_steps: int, schedule: str = "linear") -> float:
    """Probability of adding hints at `step`: from `start` at step 0 to `end` at `decay_steps`."""
    t = min(max(step, 0) / max(decay_steps, 1), 1.0)
    if schedule == "linear":
        return start + (end - start) * t
    if schedule == "exponential":  # geometric interpolation; an end of 0 is approached as 1% of start
        floor = end if end > 0 else start * 0.01
        value = start * math.pow(floor / start, t) if start > 0 else 0.0
        return end if t >= 1.0 else value
    raise ValueError(f"unknown schedule {schedule!r}")


def hint_text(rubric: Rubric, max_hints: int) -> str:
    """The highest-weight positive principles, as a short bulleted hint."""
    items = sorted((c for c in rubric.criteria if c.weight > 0 and c.check is None), key=lambda c: -c.weight)
    lines = "".join(f"\n- {c.text}" for c in items[:max_hints])
    return f"{HINT_HEADER}{lines})" if lines else ""


def with_hint(messages: list[dict], hint: str) -> list[dict]:
    """A copy of the chat with the hint appended to the last user message."""
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m["role"] == "user":
            m["content"] = m["content"] + hint
            break
    return out


def draw(seed: int, step: int, key: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, step, prompt): the same for a whole GRPO group."""
    digest = hashlib.sha256(f"{seed}|{step}|{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
