"""Chat messages and the conversation that precedes the response being judged."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Role = Literal["system", "developer", "user", "assistant", "tool"]


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    role: Role
    content: str


Conversation = tuple[Message, ...]


def as_conversation(prompt: str | list[dict] | tuple) -> Conversation:
    """A plain string prompt becomes one user message; a list of {role, content} is validated."""
    if isinstance(prompt, str):
        return (Message(role="user", content=prompt),)
    return tuple(m if isinstance(m, Message) else Message.model_validate(m) for m in prompt)


def render_transcript(conversation: Conversation) -> str:
    """Plain-text transcript used inside judge prompts ("user: ...")."""
    return "\n".join(f"{m.role}: {m.content}" for m in conversation)


def last_user_text(conversation: Conversation) -> str:
    """What the person said last: the text a response answers (empty when there is no user turn)."""
    for message in reversed(conversation):
        if message.role == "user":
            return message.content
    return ""
