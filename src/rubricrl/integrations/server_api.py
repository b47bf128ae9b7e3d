"""Request and response bodies of the reward server (they are its OpenAPI schema)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..conversation import Role
from ..verdict import Verdict

Label = str | dict[str, Any] | list[Any] | None


class OpenRLHFRequest(BaseModel):
    """OpenRLHF's remote reward request. Fields OpenRLHF may add later are ignored, not refused,
    so a trainer upgrade cannot break the reward server."""

    model_config = ConfigDict(extra="ignore")
    query: list[str] = Field(description="prompt + response per row, decoded with special tokens kept")
    prompts: list[str] = Field(description="the prompt of each row, exactly as it starts the query")
    labels: list[Label] | None = Field(default=None, description=(
        "per row: empty (the server's rubric), a rubric (object, list, JSON string or bundled name), or "
        "{\"rubric\": ..., \"prompt\": ...} where `prompt` (string or messages) overrides the conversation"))


class OpenRLHFResponse(BaseModel):
    rewards: list[float] = Field(description="reward per row (unclipped points score; 0.0 on a judge error "
                                             "under error policy `zero`, flagged in extra_logs.rubric_scored)")
    scores: list[float] = Field(description="the reward clipped to [0, 1] (OpenRLHF's dynamic filtering)")
    extra_logs: dict[str, list[float]] = Field(description="per-row numbers, the same keys for every request")


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Role
    content: str


class ScoreRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(default=None, max_length=256, description="echoed back")
    prompt: str | Annotated[list[MessageIn], Field(min_length=1)] = Field(
        description="the conversation before the response: a user message, or messages")
    response: str
    rubric: dict[str, Any] | list[Any] | str | None = Field(default=None, description=(
        "a rubric (object, list, JSON string) or a bundled rubric name; default: the server's rubric"))


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rows: list[ScoreRow]
    verdicts: bool = Field(default=True, description="include each row's verdicts")


class RowResult(BaseModel):
    id: str | None
    status: Literal["scored", "unscored", "judge_error"]
    reward: float = Field(description="the score used as reward; 0.0 unless scored (error policy `zero`)")
    score: float | None = Field(description="points score with the server's softness; null when unscored")
    points: float | None = Field(description="met/unmet points score")
    raw_score: float | None = Field(description="score before the hard-rule gate")
    coverage: float
    gated: bool
    failed_hard_rules: list[str]
    judge_errors: int
    skipped: int
    tag_scores: dict[str, float]
    rubric_hash: str
    problem: str = Field(description="why the reward is not a judgement (empty when scored)")
    verdicts: list[Verdict] | None = None


class ScoreResponse(BaseModel):
    judge: str
    results: list[RowResult]


class Health(BaseModel):
    status: Literal["ok"]
    judge: str
    rubric: str | None = Field(description="the default rubric's id (or hash), if any")
    in_flight: int
    queued: int


class ErrorMessage(BaseModel):
    detail: str


class RowError(BaseModel):
    type: str
    loc: list[str | int]
    msg: str
    fix: str = ""


class RowErrors(BaseModel):
    detail: list[RowError]
