"""Rewards from simulated-user transcripts (the `transcript` column the dialogue rollout adds).

Modes, all in [0, 1], with d_t the emotion change after supporter turn t (t = 0..T-1), bound B:
- `final`: final emotion / 100 (RLVER);
- `step`: mean_t r_t with r_t = d_t / (2B) + 1/2, the per-turn emotion change;
- `mixed`: (1 - alpha) * step + alpha * G, with G = sum_t gamma^t r_t / sum_t gamma^t the discounted
  return of the per-turn rewards, normalised so it stays in [0, 1].
A conversation that ended in an error gets None (TRL masks it) and is counted, never a silent 0.
Both rewards keep their last call's scalars (`last_rewards`) and per-turn scores (`last_turn_scores`)
for utterance-level credit (dialogue/credit.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from rubricrl.dialogue.credit import turn_attribution
from rubricrl.dialogue.rollout import Transcript

RewardMode = Literal["final", "step", "mixed"]


def step_rewards(changes: Sequence[int], max_change: int) -> list[float]:
    return [d / (2 * max_change) + 0.5 for d in changes]


def emotion_reward(transcript: Transcript, mode: RewardMode, *, max_change: int = 10, alpha: float = 0.5,
                   gamma: float = 0.9) -> float | None:
    if transcript.end_reason == "error":
        return None
    if mode == "final":
        return transcript.final_emotion / 100
    rewards = step_rewards(transcript.changes, max_change)
    if not rewards:
        return None
    step = sum(rewards) / len(rewards)
    if mode == "step":
        return step
    discounts = [gamma ** t for t in range(len(rewards))]
    ret = sum(d * r for d, r in zip(discounts, rewards)) / sum(discounts)
    return (1 - alpha) * step + alpha * ret


def render_transcript(t: Transcript) -> str:
    """Supporter and user turns after the opening message, with the user's emotion after each."""
    lines = []
    for turn in t.turns[1:]:
        if turn.role == "supporter":
            lines.append(f"Supporter: {turn.text}")
        else:
            mood = f" [{turn.change:+d} -> {turn.emotion:.0f}]" if turn.change is not None else ""
            lines.append(f"User{mood}: {turn.text}" + (f" (error: {turn.error})" if turn.error else ""))
    return "\n".join(lines)


class EmotionReward:
    """TRL reward function over the dialogue rollout's transcripts."""

    def __init__(self, mode: RewardMode = "final", *, max_change: int = 10, alpha: float = 0.5, gamma: float = 0.9,
                 name: str = "emotion"):
        if mode not in ("final", "step", "mixed"):
            raise ValueError(f"unknown dialogue reward mode {mode!r}; use final, step or mixed")
        self.mode, self.max_change, self.alpha, self.gamma = mode, max_change, alpha, gamma
        self.__name__ = name
        self.totals: Counter = Counter()
        self.last_records: list[dict] = []
        self.last_rewards: list[float | None] = []
        self.last_turn_scores: list[list[float] | None] = []  # each turn's emotion change mapped to [0, 1]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        transcripts = columns.get("transcript")
        if transcripts is None or len(transcripts) != len(completions):
            raise ValueError("EmotionReward needs the `transcript` column of the dialogue rollout "
                             "(train with a `dialogue:` section)")
        parsed = [t if isinstance(t, Transcript) else Transcript.model_validate(t) for t in transcripts]
        rewards = [emotion_reward(t, self.mode, max_change=self.max_change, alpha=self.alpha, gamma=self.gamma)
                   for t in parsed]
        self.last_rewards = rewards
        self.last_turn_scores = [turn_attribution(t, self.max_change) for t in parsed]
        self.totals["conversations"] += len(parsed)
        self.totals["errors"] += sum(t.end_reason == "error" for t in parsed)
        self.last_records = [{"trajectory_id": t.trajectory_id, "persona": t.persona_id, "reward": r,
                              "prompt": t.turns[0].text, "completion": render_transcript(t), "verdicts": [],
                              "note": f"{t.end_reason}, final emotion {t.final_emotion:.0f}",
                              "final_emotion": t.final_emotion, "end_reason": t.end_reason,
                              "turns": [x.model_dump(mode="json") for x in t.turns]} for t, r in zip(parsed, rewards)]
        log = columns.get("log_metric")
        if log is not None:
            finals = [t.final_emotion for t in parsed if t.end_reason != "error"]
            log(f"{self.__name__}/final_emotion", sum(finals) / len(finals) if finals else float("nan"))
            log(f"{self.__name__}/errors", float(sum(t.end_reason == "error" for t in parsed)))
            log(f"{self.__name__}/turns", sum(t.supporter_turns for t in parsed) / len(parsed))
        return rewards


class DialogueRubricReward:
    """Rubric reward over a transcript: `turn` judges every supporter turn against the rubric given
    the conversation before it and averages the scores; `conversation` judges the whole transcript
    as one response to the opening message. Any judge error masks the conversation (None), counted. Each
    call logs the judge's spend as RubricReward does (`NAME/judge_calls`, the defences, and a critic
    judge's `NAME/judge_verified`, `judge_unverified`, `critic_confirmed`, `critic_saved`)."""

    def __init__(self, judge, rubric, per: Literal["turn", "conversation"] = "turn", *, soft: bool = True,
                 name: str = "dialogue_rubric"):
        if per not in ("turn", "conversation"):
            raise ValueError(f"per must be turn or conversation, not {per!r}")
        self.judge, self.rubric, self.per, self.soft = judge, rubric, per, soft
        self.__name__ = name
        self.totals: Counter = Counter()
        self.last_rewards: list[float | None] = []
        # per turn: that turn's rubric score (`turn` only; `conversation` has no per-turn view: None)
        self.last_turn_scores: list[list[float] | None] | None = [] if per == "turn" else None

    def requests(self, transcript: Transcript) -> list:
        from rubricrl.core.messages import as_conversation
        from rubricrl.judges.base import JudgeRequest
        from rubricrl.dialogue.user import visible_text

        said = [("user" if t.role == "user" else "assistant", t.text if t.role == "user" else visible_text(t.text))
                for t in transcript.turns if t.text or t.role == "supporter"]
        if self.per == "conversation":
            body = "\n".join(f"{'Supporter' if r == 'assistant' else 'User'}: {x}" for r, x in said[1:])
            return [JudgeRequest(as_conversation(said[0][1]), body, self.rubric.criteria)]
        out = []
        for k, (role, text) in enumerate(said):
            if role == "assistant":
                history = [{"role": r, "content": x} for r, x in said[:k]]
                out.append(JudgeRequest(as_conversation(history), text, self.rubric.criteria))
        return out

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        import asyncio

        from rubricrl.scoring.formulas import score_row
        from rubricrl.core.verdicts import Status

        parsed = [t if isinstance(t, Transcript) else Transcript.model_validate(t) for t in columns["transcript"]]
        # an error conversation is masked here too: with another reward function beside this one, TRL's
        # weighted nansum would otherwise count the missing emotion reward as 0 and keep this one
        per_transcript = [self.requests(t) if t.end_reason != "error" else [] for t in parsed]
        flat = [r for rs in per_transcript for r in rs]
        log_metric = columns.get("log_metric")
        before = self.judge.report() if log_metric is not None else None
        answers = asyncio.run(self.judge.judge(flat)) if flat else []
        if log_metric is not None:  # judge spend, defences, a critic judge's counts (as RubricReward)
            from rubricrl.rewards.functions import log_judge_spend

            log_judge_spend(log_metric, self.__name__, before, self.judge.report())
        rewards, per_turn, k = [], [], 0
        for requests in per_transcript:
            verdict_sets, k = answers[k:k + len(requests)], k + len(requests)
            if not requests or any(v.status is Status.ERROR for vs in verdict_sets for v in vs):
                self.totals["masked"] += 1
                rewards.append(None)
                per_turn.append(None)
                continue
            all_scores = [score_row(self.rubric, vs, soft=self.soft).score for vs in verdict_sets]
            scores = [s for s in all_scores if s is not None]
            mean = sum(scores) / len(scores) if scores else None
            rewards.append(mean)
            # a turn without a score (nothing applicable) gets the conversation's mean
            per_turn.append(None if mean is None else [mean if s is None else s for s in all_scores])
        self.last_rewards = rewards
        if self.per == "turn":
            self.last_turn_scores = per_turn
        return rewards
