"""Transcript files produced elsewhere, read as `Transcript`s so one summary (dialogue/summary.py)
serves them all (`rubricrl simulate summarize`). Two formats, detected per file from its first row:

- `rubricrl`: the `transcripts.jsonl` of `rubricrl simulate`, one `Transcript` per line;
- `sage`: SAGE's released `*_result.jsonl` files, one conversation per line: `id`, the final
  emotion `emo_point`, and `history`, the turns in order (`role` user or assistant, `content`; user
  turns carry the emotion after them as `emotion-point` and the simulator's hidden reaction in
  `planning`, with the emotion `change` and the `analyse` text).

A SAGE conversation starts at the first user turn's `emotion-point` (SAGE starts at 40) and ends at
`emo_point`. Its end reason follows SAGE's loop (test_npc.py): `success` at or above the success
threshold, `failure` below the failure threshold, else `goodbye` when the user spoke last (SAGE
stops after a user turn only when the user says goodbye), else `max_turns` (SAGE stops after the
supporter's 10th turn). A row that fits neither format, or not the file's format, is a
`TranscriptFileError` naming the file, the line and the formats expected.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rubricrl.core.jsonl import iter_jsonl
from rubricrl.core.problems import Problem
from rubricrl.dialogue.rollout import Transcript, Turn

Format = Literal["rubricrl", "sage"]
FORMATS: dict[str, str] = {
    "rubricrl": "a rubricrl transcript (trajectory_id, persona_id, turns, final_emotion, end_reason, ...: the "
                "transcripts.jsonl of `rubricrl simulate`)",
    "sage": "a SAGE result row (id, emo_point, history of {role, content, emotion-point}: SAGE's *_result.jsonl)",
}
SAGE_START = 40.0  # SAGE's starting emotion, when the first user turn does not carry it


class TranscriptFileError(ValueError):
    """A transcript file that cannot be read; `problem` locates it (file, line, field)."""

    def __init__(self, problem: Problem):
        self.problem = problem
        super().__init__(str(problem))


class SageTurn(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    role: Literal["user", "assistant"]
    content: str
    emotion_point: float | None = Field(None, alias="emotion-point", allow_inf_nan=False)
    planning: dict[str, Any] | None = None


class SageResult(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1)
    emo_point: float = Field(allow_inf_nan=False)
    history: list[SageTurn] = Field(min_length=1)


def detect(row: dict) -> Format | None:
    """The format a row is written in, or None."""
    if "trajectory_id" in row and "turns" in row:
        return "rubricrl"
    if "emo_point" in row and "history" in row:
        return "sage"
    return None


def read_transcript_file(path: str | Path, *, success_at: float = 100,
                         failure_below: float = 10) -> tuple[Format, list[Transcript]]:
    """(format, transcripts in file order) of a rubricrl or SAGE transcript file; the thresholds give
    SAGE conversations their end reasons (rubricrl transcripts carry their own)."""
    path = Path(path)
    expected = " or ".join(FORMATS.values())
    fmt: Format | None = None
    first = 0
    transcripts: list[Transcript] = []
    try:
        lines = list(iter_jsonl(path))
    except ValueError as exc:  # not UTF-8; the message names the file and line
        raise TranscriptFileError(Problem(str(path), None, "", str(exc))) from None
    for line, text in lines:
        try:
            row = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise TranscriptFileError(Problem(str(path), line, "", f"not JSON ({exc}); expected {expected}")) from None
        kind = detect(row) if isinstance(row, dict) else None
        if kind is None:
            got = f"keys {sorted(row)[:8]}" if isinstance(row, dict) else f"a JSON {type(row).__name__}"
            raise TranscriptFileError(Problem(str(path), line, "", f"neither a rubricrl transcript nor a SAGE result "
                                                                   f"row ({got}); expected {expected}"))
        if fmt is None:
            fmt, first = kind, line
        elif kind != fmt:
            raise TranscriptFileError(Problem(
                str(path), line, "", f"{FORMATS[kind].split(' (')[0]} in a file whose line {first} is "
                                     f"{FORMATS[fmt].split(' (')[0]}; expected {FORMATS[fmt]}",
                fix="keep one format per file"))
        try:
            transcripts.append(Transcript.model_validate(row) if kind == "rubricrl"
                               else sage_transcript(SageResult.model_validate(row), success_at, failure_below))
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in error["loc"])
            raise TranscriptFileError(Problem(str(path), line, where, f"{error['msg']}; expected {FORMATS[kind]}")) \
                from None
    if fmt is None:
        raise TranscriptFileError(Problem(str(path), None, "", f"no rows; expected lines of {expected}"))
    return fmt, transcripts


def sage_transcript(row: SageResult, success_at: float = 100, failure_below: float = 10) -> Transcript:
    """One SAGE result row as a Transcript (see the module docstring for the start and end)."""
    turns = []
    for turn in row.history:
        if turn.role == "assistant":
            turns.append(Turn(role="supporter", text=turn.content))
            continue
        planning = turn.planning or {}
        change = planning.get("change")
        change = round(change) if isinstance(change, (int, float)) and not isinstance(change, bool) \
            and math.isfinite(change) else None
        turns.append(Turn(role="user", text=turn.content, emotion=turn.emotion_point, change=change,
                          raw_change=change, reasons=str(planning.get("analyse") or "")))
    opening = row.history[0]
    start = opening.emotion_point if opening.role == "user" and opening.emotion_point is not None else SAGE_START
    final = row.emo_point
    end = ("success" if final >= success_at else "failure" if final < failure_below
           else "goodbye" if row.history[-1].role == "user" else "max_turns")
    return Transcript(trajectory_id=row.id, persona_id=row.id, group=row.id, seed=0, start_emotion=start,
                      turns=turns, final_emotion=final, end_reason=end)
