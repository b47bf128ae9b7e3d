"""Tactic novelty: how much a supporter turn's tactics differ from the earlier turns' (MINT).

- `overlap` (default): 1 - |T_t ∩ (T_1 ∪ ... ∪ T_t-1)| / |T_t|, 1.0 when there is no earlier turn.
- `kl`: 1 - exp(-KL(p_t || mean of earlier p_s)) on the classifier's tactic probabilities
  (normalised to distributions): 0 when the turn repeats the earlier mix, towards 1 when new.
`NoveltyReward` is a TRL reward function; weigh it with λ through `reward_weights`, giving
reward = quality + λ · novelty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from rubricrl.rewards.functions import completion_text
from rubricrl.tactics.classifier import TacticClassifier, TurnExample


def overlap_novelty(current: set[str], earlier: Sequence[set[str]]) -> float:
    if not earlier or not current:
        return 1.0
    seen = set().union(*earlier)
    return 1.0 - len(current & seen) / len(current)


def kl_novelty(current: np.ndarray, earlier: Sequence[np.ndarray], eps: float = 1e-6) -> float:
    if not len(earlier):
        return 1.0
    p = np.asarray(current, dtype=float) + eps
    q = np.mean(np.asarray(earlier, dtype=float), axis=0) + eps
    p, q = p / p.sum(), q / q.sum()
    return float(1.0 - np.exp(-np.sum(p * np.log(p / q))))


def supporter_turns(messages: Sequence[dict]) -> list[TurnExample]:
    """Every assistant turn of a chat as a TurnExample with its context (last user message) and
    previous assistant turn."""
    turns, last_user, previous = [], "", ""
    for m in messages:
        if m.get("role") == "user":
            last_user = m.get("content", "")
        elif m.get("role") == "assistant":
            turns.append(TurnExample(m.get("content", ""), frozenset(), last_user, previous))
            previous = m.get("content", "")
    return turns


class NoveltyReward:
    """Novelty of each completion's tactics against the assistant turns already in its prompt."""

    def __init__(self, classifier: TacticClassifier | None = None, mode: Literal["overlap", "kl"] = "overlap",
                 name: str = "novelty"):
        if mode not in ("overlap", "kl"):
            raise ValueError(f"mode must be overlap or kl, not {mode!r}")
        self.classifier = classifier or TacticClassifier.load()
        self.mode = mode
        self.__name__ = name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
        histories = [p if isinstance(p, list) else [{"role": "user", "content": str(p)}] for p in prompts]
        groups = []
        for history, completion in zip(histories, completions):
            earlier = supporter_turns(history)
            last_user = next((m["content"] for m in reversed(history) if m.get("role") == "user"), "")
            groups.append(earlier + [TurnExample(completion_text(completion), frozenset(), last_user,
                                                 earlier[-1].text if earlier else "")])
        every = self.classifier.probabilities([t for group in groups for t in group])  # one batched call
        out, start = [], 0
        for group in groups:
            probs, start = every[start:start + len(group)], start + len(group)
            if self.mode == "kl":
                out.append(kl_novelty(probs[-1], list(probs[:-1])))
            else:
                labels = [self.classifier.labels(row) for row in probs]
                out.append(overlap_novelty(labels[-1], labels[:-1]))
        return out
