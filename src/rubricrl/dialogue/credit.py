"""Utterance-level credit for multi-turn GRPO (Sotopia-RL style): every supporter turn of a
simulated conversation gets its own reward and its own advantage.

Per-turn reward of supporter turn t (t = 0..T-1) of conversation i:

    r_{i,t} = alpha * R_i + (1 - alpha) * a_{i,t}

- R_i, the episode reward: sum_k w_k R_{k,i} over the reward functions k with their weights w_k,
  exactly the scalar TRL gives the conversation (a None counts 0, as in TRL's nansum; a
  conversation for which every function returned None is masked);
- a_{i,t}, the turn's attribution: sum_k w_k s_{k,i,t}, with s the function's own score of that
  turn where it has one (emotion: the turn's emotion change mapped to [0, 1], `turn_attribution`;
  a rubric judged per turn: that turn's rubric score), else its episode score R_{k,i} (a function
  without a per-turn view gives every turn its episode score).

R and a are on the same scale (for the emotion reward alone both are in [0, 1]), so alpha is a
plain mixing weight: alpha 1 gives every turn the episode reward, alpha 0 only its attribution.

Advantages: the per-turn samples of a GRPO group (the G conversations of one persona against
identically seeded users) form one group. A = (r - mean) / (std + 1e-4), mean and std (Bessel,
as TRL's nanstd) over all the group's turns (`scale` "group"); "batch": the std over every turn of
the batch; "none": no division. A group with fewer than two scored turns, or whose turns all have
the same reward, has zero spread (no learning signal) and gives advantage 0.

Training uses these advantages per token (`token_advantages`): each policy turn's tokens carry
that turn's advantage inside the one trajectory sequence. Because the policy is causal, this is
the per-turn sample `turn_samples` builds (prompt = everything before the turn, completion = the
turn) trained with its own advantage, without a forward pass per turn (docs/dialogue.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rubricrl.dialogue.rollout import Transcript

Scale = Literal["group", "batch", "none"]
EPS = 1e-4  # TRL's: advantages = (r - mean) / (std + 1e-4)
ZERO_SPREAD = 1e-8


def turn_attribution(transcript: Transcript, max_change: int) -> list[float] | None:
    """Per supporter turn: (emotion after - emotion before) / (2B) + 1/2, in [0, 1]; None for an
    error conversation. The emotions are the transcript's (clamped to [0, 100]), so a +10 change
    from 95 counts as the +5 it caused."""
    if transcript.end_reason == "error":
        return None
    emotions = transcript.emotions
    if len(emotions) != transcript.supporter_turns + 1:
        raise ValueError(f"{transcript.trajectory_id}: {transcript.supporter_turns} supporter turn(s) but "
                         f"{len(emotions) - 1} emotion(s) after them")
    return [(after - before) / (2 * max_change) + 0.5 for before, after in zip(emotions, emotions[1:])]


def combine(episode: float, attributions: Sequence[float], alpha: float) -> list[float]:
    """r_t = alpha * episode + (1 - alpha) * attribution_t."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], not {alpha}")
    return [alpha * episode + (1 - alpha) * a for a in attributions]


@dataclass(frozen=True)
class RewardView:
    """One reward function's output on a batch: its scalar per conversation and, when it has
    one, its score per supporter turn (None for a conversation it masked)."""

    weight: float
    episode: Sequence[float | None]
    turns: Sequence[Sequence[float] | None] | None = None


def turn_rewards(views: Sequence[RewardView], turn_counts: Sequence[int], alpha: float) -> list[list[float] | None]:
    """r_{i,t} for every conversation i (None when every function masked it)."""
    out: list[list[float] | None] = []
    for i, n in enumerate(turn_counts):
        episodes = [v.episode[i] for v in views]
        if all(e is None for e in episodes):
            out.append(None)
            continue
        episode = sum(v.weight * e for v, e in zip(views, episodes) if e is not None)
        attribution = [0.0] * n
        for v, e in zip(views, episodes):
            per_turn = v.turns[i] if v.turns is not None else None
            if per_turn is None:
                per_turn = [0.0 if e is None else e] * n
            if len(per_turn) != n:
                raise ValueError(f"conversation {i}: {len(per_turn)} per-turn score(s) for {n} supporter turn(s)")
            attribution = [a + v.weight * s for a, s in zip(attribution, per_turn)]
        out.append(combine(episode, attribution, alpha))
    return out


def _std(values: Sequence[float]) -> float:
    if len(values) < 2:
        return math.nan
    mean = sum(values) / len(values)
    return math.sqrt(sum((x - mean) ** 2 for x in values) / (len(values) - 1))


def group_advantages(values: Sequence[Sequence[float] | None], group_size: int,
                     scale: Scale = "group") -> tuple[list[list[float] | None], list[bool]]:
    """Advantages of every value (a conversation's per-turn rewards, or `[R_i]` for episode
    credit) against its group's pooled mean, and per group whether it has zero spread.
    Consecutive `group_size` conversations are a group (TRL's order)."""
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be group, batch or none, not {scale!r}")
    if group_size < 1 or len(values) % group_size:
        raise ValueError(f"{len(values)} conversations do not split into groups of {group_size}")
    batch_std = _std([x for v in values if v is not None for x in v])
    advantages: list[list[float] | None] = []
    zero_spread: list[bool] = []
    for g in range(0, len(values), group_size):
        rows = values[g:g + group_size]
        pooled = [x for v in rows if v is not None for x in v]
        spread = _std(pooled)
        zero_spread.append(not spread > ZERO_SPREAD)  # NaN (fewer than two values) is no spread either
        mean = sum(pooled) / len(pooled) if pooled else 0.0
        std = batch_std if scale == "batch" else spread
        for v in rows:
            if v is None:
                advantages.append(None)
                continue
            adv = [x - mean for x in v]
            if scale != "none":
                adv = [a / (std + EPS) for a in adv]
            advantages.append([0.0 if math.isnan(a) else a for a in adv])
    return advantages, zero_spread


def turn_spans(mask: Sequence[int]) -> list[tuple[int, int]]:
    """[start, stop) of every maximal run of 1s in an env mask: the policy's turns, in order."""
    spans, start = [], None
    for k, m in enumerate(mask):
        if m and start is None:
            start = k
        elif not m and start is not None:
            spans.append((start, k))
            start = None
    if start is not None:
        spans.append((start, len(mask)))
    return spans


@dataclass(frozen=True)
class TurnSample:
    """One supporter turn as a sample of its own: the prompt is everything before the turn (the
    rollout's prompt, earlier turns and the user's replies), the completion is the turn."""

    turn: int
    prompt_ids: list[int]
    completion_ids: list[int]
    mask: list[int]  # 1 on the policy's tokens; 0 on the end token that closes a turn cut at its limit


def turn_samples(prompt_ids: Sequence[int], completion_ids: Sequence[int], env_mask: Sequence[int],
                 eos_token_id: int) -> list[TurnSample]:
    """The per-turn samples of one trajectory (dialogue/grpo.py's prompt_ids, completion_ids, env_mask)."""
    if len(env_mask) != len(completion_ids):
        raise ValueError(f"env_mask has {len(env_mask)} entries for {len(completion_ids)} completion tokens")
    out = []
    for k, (start, stop) in enumerate(turn_spans(env_mask)):
        if (completion_ids[stop - 1] != eos_token_id and stop < len(completion_ids)
                and completion_ids[stop] == eos_token_id):
            stop += 1  # the closing end token of a cut turn belongs to the turn, with mask 0
        out.append(TurnSample(k, list(prompt_ids) + list(completion_ids[:start]), list(completion_ids[start:stop]),
                              list(env_mask[start:stop])))
    return out


def token_advantages(masks: Sequence[Sequence[int]], advantages: Sequence[Sequence[float] | None]) -> list[list[float]]:
    """Per-token advantages: every token of policy turn t (a run of 1s in the mask) gets the
    turn's advantage; every other token, and every token of a masked conversation, 0."""
    if len(masks) != len(advantages):
        raise ValueError(f"{len(masks)} token rows for {len(advantages)} conversations")
    rows = []
    for i, (mask, adv) in enumerate(zip(masks, advantages)):
        row = [0.0] * len(mask)
        spans = turn_spans(mask)
        if adv is not None and spans:
            if len(spans) != len(adv):
                raise ValueError(f"conversation {i}: {len(spans)} policy turn(s) in the tokens but {len(adv)} in "
                                 "its transcript")
            for (start, stop), value in zip(spans, adv):
                row[start:stop] = [value] * (stop - start)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class CreditResult:
    rewards: list[list[float] | None]      # r_{i,t}
    advantages: list[list[float] | None]   # per turn
    zero_spread: list[bool]                # per group

    def metrics(self) -> dict[str, float]:
        flat = [x for r in self.rewards if r for x in r]
        return {"credit/turn_reward": sum(flat) / len(flat) if flat else math.nan,
                "credit/turn_reward_std": _std(flat),
                "credit/zero_spread_share": sum(self.zero_spread) / len(self.zero_spread)}


class TurnCredit:
    """Per-turn rewards and advantages from the reward functions' last call. Each function keeps
    `last_rewards` (its scalar per conversation) and may keep `last_turn_scores` (per turn)."""

    def __init__(self, reward_funcs: Sequence[Any], weights: Sequence[float], alpha: float = 0.5):
        missing = [getattr(f, "__name__", repr(f)) for f in reward_funcs if not hasattr(f, "last_rewards")]
        if missing:
            raise ValueError(f"turn credit needs reward functions that keep last_rewards; {missing} do not")
        if len(weights) != len(reward_funcs):
            raise ValueError(f"{len(weights)} weights for {len(reward_funcs)} reward functions")
        combine(0.0, [], alpha)  # validates alpha
        self.funcs, self.weights, self.alpha = list(reward_funcs), list(weights), alpha
        self.last: CreditResult | None = None

    def compute(self, transcripts: Sequence[Transcript], group_size: int, scale: Scale = "group") -> CreditResult:
        views = []
        for f, w in zip(self.funcs, self.weights):
            if len(f.last_rewards) != len(transcripts):
                raise ValueError(f"{f.__name__} scored {len(f.last_rewards)} conversations, the rollout has "
                                 f"{len(transcripts)}")
            views.append(RewardView(w, f.last_rewards, getattr(f, "last_turn_scores", None)))
        rewards = turn_rewards(views, [t.supporter_turns for t in transcripts], self.alpha)
        advantages, zero = group_advantages(rewards, group_size, scale)
        self.last = CreditResult(rewards, advantages, zero)
        for f in self.funcs:  # samples.jsonl: the per-turn rewards beside each conversation
            records = getattr(f, "last_records", None)
            if records is not None and len(records) == len(transcripts):
                for record, r, a in zip(records, rewards, advantages):
                    record["turn_rewards"], record["turn_advantages"] = r, a
        return self.last
