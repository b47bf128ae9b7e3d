"""Conversations between a supporter policy and simulated users, run concurrently and keyed by
trajectory id (never by list position), with GRPO groups: G policy samples per persona against
identically seeded users.

The policy is any `PolicyTurn` callable: `simulate` wraps a chat model (`chat_policy`), training
wraps the model being trained (`dialogue/grpo.py`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from rubricrl.llm.chat import ChatModel
from rubricrl.dialogue.persona import Persona
from rubricrl.dialogue.user import SimulatedUser, UserError, visible_text

EndReason = Literal["goodbye", "success", "failure", "max_turns", "error"]
SUPPORTER_SYSTEM = ("You are a warm, attentive emotional-support listener. Reply to the person in a few sentences. "
                    "Understand before advising.")


class Turn(BaseModel):
    role: Literal["user", "supporter"]
    text: str = ""
    emotion: float | None = None  # user turns: the emotion after this turn's analysis
    change: int | None = None
    raw_change: int | None = None
    reasons: str = ""  # the user's hidden analysis
    error: str | None = None


class Transcript(BaseModel):
    trajectory_id: str
    persona_id: str
    group: str
    seed: int
    start_emotion: float
    turns: list[Turn]
    final_emotion: float
    end_reason: EndReason
    notes: list[str] = []  # counted events that are not errors, e.g. empty supporter replies

    @property
    def emotions(self) -> list[float]:
        """Start emotion, then the emotion after every supporter turn."""
        return [self.start_emotion] + [t.emotion for t in self.turns[1:] if t.role == "user" and t.emotion is not None]

    @property
    def supporter_turns(self) -> int:
        return sum(t.role == "supporter" for t in self.turns)

    @property
    def changes(self) -> list[int]:
        return [t.change for t in self.turns if t.role == "user" and t.change is not None]


@dataclass(frozen=True)
class Slot:
    """One conversation to run: its id, persona, GRPO group and the user's seed."""

    trajectory_id: str
    persona: Persona
    group: str
    seed: int


@dataclass
class PolicyReply:
    text: str = ""
    error: str | None = None


PolicyTurn = Callable[[Slot, list[dict[str, str]]], Awaitable[PolicyReply]]


def user_seed(base: int, persona_id: str, group: str) -> int:
    digest = hashlib.sha256(f"{base}|{persona_id}|{group}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def plan(personas: list[Persona], *, repeats: int = 1, group_size: int = 1, seed: int = 0) -> list[Slot]:
    """`repeats` groups per persona, `group_size` samples per group; one seed per group."""
    slots = []
    for p in personas:
        for r in range(repeats):
            group = f"{p.id}/r{r}"
            for s in range(group_size):
                tid = group if group_size == 1 else f"{group}/s{s}"
                slots.append(Slot(tid, p, group, user_seed(seed, p.id, group)))
    return slots


def chat_policy(model: ChatModel, *, system: str = SUPPORTER_SYSTEM, max_tokens: int = 160,
                temperature: float = 0.7) -> PolicyTurn:
    async def turn(slot: Slot, messages: list[dict[str, str]]) -> PolicyReply:
        result = await model.chat([{"role": "system", "content": system}] + messages, max_tokens=max_tokens,
                                  temperature=temperature, seed=slot.seed + len(messages))
        return PolicyReply(result.text, result.error)
    return turn


async def converse(slot: Slot, policy: PolicyTurn, user: SimulatedUser) -> Transcript:
    s, persona = user.settings, slot.persona
    emotion = float(s.start_emotion)
    turns = [Turn(role="user", text=persona.first_message, emotion=emotion)]
    history: list[tuple[str, str]] = [("user", persona.first_message)]
    notes: list[str] = []
    end: EndReason | None = None
    for t in range(s.max_turns):
        messages = [{"role": "user" if r == "user" else "assistant", "content": x} for r, x in history]
        reply = await policy(slot, messages)
        if reply.error:
            turns.append(Turn(role="supporter", error=f"policy: {reply.error}"))
            end = "error"
            break
        turns.append(Turn(role="supporter", text=reply.text))
        seen = visible_text(reply.text)
        if not seen:
            notes.append("empty_supporter_reply")
            seen = "(the supporter said nothing)"
        history.append(("supporter", seen))
        turn_seed = slot.seed + 1000 * (t + 1)
        analysis = await user.analyse(persona, history, emotion, turn_seed)
        if isinstance(analysis, str):
            turns.append(Turn(role="user", emotion=None, error=f"user: {analysis}"))
            end = "error"
            break
        emotion = min(100.0, max(0.0, emotion + analysis.change))
        record = Turn(role="user", emotion=emotion, change=analysis.change, raw_change=analysis.raw_change,
                      reasons=analysis.reasons)
        end = ("success" if emotion >= s.success_at else "failure" if emotion < s.failure_below
               else "goodbye" if analysis.leave else "max_turns" if t == s.max_turns - 1 else None)
        if end in (None, "goodbye"):
            text = await user.reply(persona, history, emotion, end == "goodbye", turn_seed)
            if isinstance(text, UserError):
                turns.append(record.model_copy(update={"error": f"user: {text.reason}"}))
                end = "error"
                break
            record = record.model_copy(update={"text": text})
            history.append(("user", text))
        turns.append(record)
        if end is not None:
            break
    return Transcript(trajectory_id=slot.trajectory_id, persona_id=persona.id, group=slot.group, seed=slot.seed,
                      start_emotion=float(s.start_emotion), turns=turns, final_emotion=emotion,
                      end_reason=end or "max_turns", notes=notes)


async def run_conversations(slots: list[Slot], policy: PolicyTurn, user: SimulatedUser, *, concurrency: int = 4,
                            on_done: Callable[[Transcript], None] | None = None) -> dict[str, Transcript]:
    """Every slot's transcript by trajectory id. A conversation that raises becomes an `error`
    transcript; the others complete."""
    if len({s.trajectory_id for s in slots}) != len(slots):
        raise ValueError("trajectory ids must be unique")
    gate = asyncio.Semaphore(concurrency)

    async def one(slot: Slot) -> Transcript:
        async with gate:
            try:
                transcript = await converse(slot, policy, user)
            except Exception as exc:  # noqa: BLE001 - one broken conversation must not stop the run
                transcript = Transcript(
                    trajectory_id=slot.trajectory_id, persona_id=slot.persona.id, group=slot.group, seed=slot.seed,
                    start_emotion=user.settings.start_emotion, final_emotion=user.settings.start_emotion,
                    turns=[Turn(role="user", text=slot.persona.first_message, error=f"{type(exc).__name__}: {exc}")],
                    end_reason="error")
        if on_done:
            on_done(transcript)
        return transcript

    done = await asyncio.gather(*(one(s) for s in slots))
    return {t.trajectory_id: t for t in done}
