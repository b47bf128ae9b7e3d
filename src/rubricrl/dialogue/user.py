"""The simulated user: a persona with a hidden emotion in [0, 100] that moves with what the
supporter says (RLVER / SAGE style).

Each turn has two model calls: an *analysis* (hidden; persona, hidden need, history and current
emotion in, JSON `{reasons, change, leave}` out, the change clamped to +-`max_change`) and a
*reply* written in the persona's voice conditioned on the new emotion. An analysis that cannot
be parsed is retried `analysis_retries` times and then recorded as an error turn: the emotion is
never silently left unchanged; the error says when the answer was cut at its token limit or by a
full context, and a prompt too long for the model (`too_long`) is not re-asked. The user never sees
the supporter's `<think>` block.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from rubricrl.llm.chat import ChatModel
from rubricrl.llm.endpoint import ChatResult
from rubricrl.dialogue.persona import Persona

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)


class UserSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start_emotion: float = Field(40, ge=0, le=100, description="40 for evaluation (Sentient-style), 30 for training")
    max_change: int = Field(10, ge=1, le=100, description="bound on the emotion change per turn")
    max_turns: int = Field(8, ge=1, description="supporter turns before the conversation is cut")
    success_at: float = Field(100, description="the conversation ends as a success at this emotion")
    failure_below: float = Field(10, description="the conversation ends as a failure below this emotion")
    analysis_retries: int = Field(2, ge=0, description="re-asks for an unparsable analysis or an empty reply")
    temperature: float = Field(0.7, ge=0)
    max_analysis_tokens: int = Field(160, ge=16)
    max_reply_tokens: int = Field(120, ge=8)


class Analysis(BaseModel):
    reasons: str
    change: int  # as clamped
    raw_change: int  # as the model said it
    leave: bool


def visible_text(supporter_text: str) -> str:
    """What the user sees of a supporter turn: everything outside `<think>...</think>`."""
    text = _THINK.sub("", supporter_text)
    text = re.split(r"</think>", text, flags=re.IGNORECASE)[-1]  # opened in the prompt: only its end was generated
    return re.sub(r"<think>.*", "", text, flags=re.DOTALL | re.IGNORECASE).strip()  # never closed: cut mid-thought


def analysis_schema(max_change: int) -> dict:
    return {"type": "object", "additionalProperties": False, "required": ["reasons", "change", "leave"],
            "properties": {"reasons": {"type": "string", "maxLength": 400},
                           "change": {"type": "integer", "minimum": -max_change, "maximum": max_change},
                           "leave": {"type": "boolean"}}}


def _persona_card(p: Persona) -> str:
    return (f"You are {p.name}. Background: {p.background}\nSituation: {p.situation}\n"
            f"Personality: {p.personality}\nHow you write: {p.speaking_style}\n"
            f"What would really help you (never say this outright): {p.hidden_need}\n"
            + ("Write in Chinese.\n" if p.language == "zh" else ""))


def _transcript(history: list[tuple[str, str]], name: str) -> str:
    return "\n".join(f"{name if role == 'user' else 'Supporter'}: {text}" for role, text in history)


class SimulatedUser:
    """Stateless: the emotion and history live in the conversation, so one user serves many."""

    def __init__(self, model: ChatModel, settings: UserSettings | None = None):
        self.model = model
        self.settings = settings or UserSettings()

    async def analyse(self, persona: Persona, history: list[tuple[str, str]], emotion: float,
                      seed: int | None) -> Analysis | str:
        """The hidden reaction to the supporter's last turn, or an error string after the retries."""
        s = self.settings
        messages = [
            {"role": "system", "content": _persona_card(persona) + (
                "You are talking to a supporter. Judge honestly, as this person, how the supporter's LAST "
                f"message makes you feel. Your current emotion is {emotion:.0f} out of 100 (0 = very distressed, "
                f"100 = relieved and understood). Give a change between -{s.max_change} and +{s.max_change}: "
                "positive if the message meets what would really help you, negative if it is generic, dismissive, "
                "preachy, too fast with advice you did not ask for, or ignores what you said. Set leave to true "
                "only if you want to end the conversation now. Answer with JSON "
                '{"reasons": "...", "change": <integer>, "leave": true/false}.')},
            {"role": "user", "content": f"Conversation so far:\n{_transcript(history, persona.name)}\n\n"
                                        "Your hidden reaction to the supporter's last message, as JSON:"},
        ]
        problem = ""
        for attempt in range(s.analysis_retries + 1):
            result = await self.model.chat(messages, max_tokens=s.max_analysis_tokens, temperature=s.temperature,
                                           seed=None if seed is None else seed + 7919 * attempt,
                                           json_schema=analysis_schema(s.max_change))
            if result.error:
                problem = f"analysis call failed: {result.error}"
                if result.error.startswith("too_long"):  # the same prompt would not fit on a re-ask either
                    return f"{problem}; not re-asked"
                continue
            parsed = parse_analysis(result.text, s.max_change)
            if isinstance(parsed, Analysis):
                return parsed
            problem = f"analysis unparsable ({parsed}{_cut(result, s.max_analysis_tokens, 'max_analysis_tokens')}); " \
                      f"answer began {result.text[:80]!r}"
        return f"{problem} after {s.analysis_retries + 1} attempt(s)"

    async def reply(self, persona: Persona, history: list[tuple[str, str]], emotion: float, leave: bool,
                    seed: int | None) -> str | UserError:
        """The user's next message in the persona's voice, or a UserError if it stays empty (or its
        calls fail) after the retries."""
        s = self.settings
        mood = ("you feel much better and understood" if emotion >= 80 else "you feel somewhat better" if emotion >= 60
                else "you still feel low" if emotion >= 30 else "you feel worse and frustrated")
        goal = "Say goodbye in one or two sentences." if leave else "Reply with your next message (1-3 sentences)."
        messages = [
            {"role": "system", "content": _persona_card(persona) + (
                f"You are talking to a supporter. Right now {mood} (emotion {emotion:.0f}/100). Stay in character, "
                f"write only your own message, no labels or quotes. {goal}")},
            {"role": "user", "content": f"Conversation so far:\n{_transcript(history, persona.name)}\n\n"
                                        f"{persona.name}'s next message:"},
        ]
        failed = ""
        for attempt in range(s.analysis_retries + 1):
            result = await self.model.chat(messages, max_tokens=s.max_reply_tokens, temperature=s.temperature,
                                           seed=None if seed is None else seed + 104729 * (attempt + 1))
            if result.error:
                failed = result.error
                if failed.startswith("too_long"):
                    return UserError(f"reply call failed: {failed}; not re-asked")
                continue
            text = clean_reply(result.text, persona.name)
            if text:
                return text
            failed = ""
        return UserError(f"reply call failed: {failed} after {s.analysis_retries + 1} attempt(s)" if failed
                         else "the reply stayed empty after the retries")


@dataclass(frozen=True)
class UserError:
    """Why the user could not write its message (the conversation ends as an `error`)."""

    reason: str


def _cut(result: ChatResult, limit: int, setting: str) -> str:
    """What a `length` stop means for an unparsable answer: the token limit, or a full context."""
    if result.finish_reason != "length":
        return ""
    if result.completion_tokens and result.completion_tokens < limit:
        return (f"; the answer was cut after {result.completion_tokens} tokens because the model's context was full "
                f"({result.prompt_tokens} prompt tokens); give the model a longer context (llamacpp?context=N)")
    return f"; the answer was cut at {setting}={limit} tokens"


def parse_analysis(text: str, max_change: int) -> Analysis | str:
    """Analysis from the model's JSON, change clamped to +-max_change; else a short problem string."""
    start, end = text.find("{"), text.rfind("}")
    if not 0 <= start < end:
        return "no JSON object"
    try:
        obj = json.loads(text[start:end + 1])
    except (ValueError, RecursionError):
        return "invalid JSON"
    change = obj.get("change") if isinstance(obj, dict) else None
    if (isinstance(change, bool) or not isinstance(change, (int, float))
            or (isinstance(change, float) and not math.isfinite(change))):  # NaN, Infinity, 1e999
        return 'no numeric "change"'
    raw = int(round(change))
    leave = obj.get("leave", False)
    return Analysis(reasons=str(obj.get("reasons", ""))[:500], change=max(-max_change, min(max_change, raw)),
                    raw_change=raw, leave=leave is True)


def clean_reply(text: str, name: str) -> str:
    """Strip a speaker label or surrounding quotes a model may add to the user's message."""
    text = text.strip()
    for speaker in ("Supporter:", f"{name}:", "User:"):  # the model went on to write the next turns too
        cut = text.find("\n" + speaker)
        text = text[:cut].strip() if cut > 0 else text
    for label in (f"{name}:", "User:", "Me:"):
        if text.startswith(label):
            text = text[len(label):].strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].strip()
    return text
