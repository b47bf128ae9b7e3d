"""Dataset rows to score: a conversation, the response to judge, and the rubric that applies.

Rows come from JSONL. The prompt is `prompt` (a string or a list of {role, content} messages,
HealthBench style) or `question` (Rubrics-as-Rewards style); the response is `response` or
`completion` (a string, or a list holding one assistant message, TRL's conversational format).
A row that cannot be used becomes an `InvalidRow` with the reason, so it is reported, not lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from rubricrl.core.messages import Conversation, as_conversation
from rubricrl.core.jsonl import iter_jsonl
from rubricrl.core.problems import Problem, RubricError
from rubricrl.rubrics.loading import rubric_from_row
from rubricrl.rubrics.model import Rubric

PROMPT_FIELDS = ("prompt", "question")
RESPONSE_FIELDS = ("response", "completion")
ID_FIELDS = ("id", "prompt_id")


@dataclass(frozen=True)
class ScoringRow:
    id: str
    line: int
    conversation: Conversation
    response: str
    rubric: Rubric | None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class InvalidRow:
    id: str
    line: int
    problem: Problem


def row_id(raw: dict, line: int) -> str:
    for key in ID_FIELDS:
        if isinstance(raw.get(key), (str, int)) and not isinstance(raw.get(key), bool):
            return str(raw[key])
    return f"line-{line}"


def parse_row(raw: object, source: str, line: int, *, need_response: bool = True) -> ScoringRow | InvalidRow:
    """Validate one decoded JSONL value into a row (or an InvalidRow naming what is wrong).
    With `need_response=False` (prompts to generate for, `rubricrl eval`) any response field is
    ignored and the row's `response` is empty."""
    if not isinstance(raw, dict):
        return InvalidRow(f"line-{line}", line, Problem(source, line, "", f"row must be a JSON object, got "
                                                                          f"{type(raw).__name__}"))
    rid = row_id(raw, line)

    def invalid(field_name: str, message: str, fix: str = "") -> InvalidRow:
        return InvalidRow(rid, line, Problem(source, line, field_name, message, fix))

    prompt_key = next((k for k in PROMPT_FIELDS if k in raw), None)
    if prompt_key is None:
        return invalid("prompt", "missing", "add `prompt` (string or list of {role, content} messages)")
    try:
        conversation = as_conversation(raw[prompt_key])
    except (ValidationError, TypeError, ValueError) as exc:
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        return invalid(prompt_key, f"not a string or a list of {{role, content}} messages ({first})")

    response_key = next((k for k in RESPONSE_FIELDS if k in raw), None)
    if response_key is None and need_response:
        return invalid("response", "missing", "add `response` with the text to judge")
    response = _response_text(raw[response_key]) if need_response else ""
    if response is None:
        return invalid(response_key, f"must be a string (or [{{role: assistant, content: str}}]), got "
                                     f"{type(raw[response_key]).__name__}")
    try:
        rubric = rubric_from_row(raw, source, line)
    except RubricError as exc:
        return InvalidRow(rid, line, exc.problems[0] if len(exc.problems) == 1 else Problem(
            source, line, "rubric", "; ".join(f"{p.field}: {p.message}" for p in exc.problems)))
    used = {prompt_key, response_key, "rubric", "rubrics", *ID_FIELDS}
    return ScoringRow(rid, line, conversation, response, rubric, {k: v for k, v in raw.items() if k not in used})


def _response_text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if (isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict)
            and value[0].get("role", "assistant") == "assistant" and isinstance(value[0].get("content"), str)):
        return value[0]["content"]
    return None


def read_rows(path: str | Path, *, need_response: bool = True) -> Iterator[ScoringRow | InvalidRow]:
    """Yield every line of a JSONL file as a row or an InvalidRow; blank lines are ignored.
    Duplicate row ids are reported as invalid (resuming relies on ids being unique)."""
    source = str(path)
    seen: set[str] = set()
    for line_no, text in iter_jsonl(path, errors="replace"):  # split on \n only, a BOM dropped
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            yield InvalidRow(f"line-{line_no}", line_no, Problem(source, line_no, "", f"malformed JSON: {reason}",
                                                                 "one JSON object per line"))
            continue
        row = parse_row(raw, source, line_no, need_response=need_response)
        if row.id in seen:
            row = InvalidRow(f"line-{line_no}", line_no, Problem(
                source, line_no, "id", f"duplicate row id {row.id!r}", "give every row a unique id"))
        seen.add(row.id)
        yield row
