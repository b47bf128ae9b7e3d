"""Request and response bodies of the reward server (they are its OpenAPI schema), and how a JSON
body is read: with no NaN or infinity in it (FiniteJSONRoute)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Literal

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

from rubricrl.core.messages import Role
from rubricrl.core.verdicts import Verdict

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


_FINITE = ConfigDict(allow_inf_nan=False)  # a NaN reward is a bug to fail on, never a `null` to send


class OpenRLHFResponse(BaseModel):
    model_config = _FINITE
    rewards: list[float] = Field(description="reward per row (unclipped points score, or the win rate in pairwise "
                                             "mode; 0.0 on a judge error under error policy `zero`, flagged in "
                                             "extra_logs.rubric_scored)")
    scores: list[float] = Field(description="the reward clipped to [0, 1] (OpenRLHF's dynamic filtering)")
    extra_logs: dict[str, list[float]] = Field(
        description="one number per row under fixed keys (rubric_scored, rubric_points, rubric_coverage, "
                    "rubric_judge_errors, rubric_skipped, rubric_gated, rubric_verified, rubric_unverified, "
                    "rubric_confirmed, rubric_pairs): the same for every row and every request, whatever the "
                    "row's rubric or outcome, the judge or the mode")


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
    model_config = _FINITE
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


# -- JSON bodies without NaN or infinity -----------------------------------------------------------
# Python's JSON parser reads the non-standard literals NaN, Infinity and -Infinity, and reads a number
# like 1e999 as infinity. No field of these bodies can use such a number, and an error that echoed one
# back could not be serialised (FastAPI answered 500). So a body is parsed with every such number
# marked, and each mark is replaced by null where that means "missing" (a NaN label: OpenRLHF sends NaN
# for a row without a label), dropped where the server ignores the field, and refused (422) elsewhere.

Action = Literal["missing", "ignore", "refuse"]


class NonFiniteNumbers(HTTPException):
    """422 naming each NaN or infinity in a request body (detail items like RowError)."""

    def __init__(self, problems: list[dict]):
        super().__init__(422, problems)


class _Mark:
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def refuse_all(path: tuple, text: str) -> Action:
    return "refuse"


def openrlhf_numbers(path: tuple, text: str) -> Action:
    """OpenRLHF's body: a NaN label (or NaN for all labels) is a missing label; fields the server
    ignores are ignored whatever they hold."""
    if path and path[0] not in OpenRLHFRequest.model_fields:
        return "ignore"
    if text == "NaN" and path[:1] == ("labels",) and len(path) <= 2:
        return "missing"
    return "refuse"


def loads_finite(body: bytes | str, policy: Callable[[tuple, str], Action] = refuse_all) -> Any:
    """`json.loads(body)` with every NaN/Infinity/-Infinity literal and overflowing number handled by
    `policy(path, literal)`; NonFiniteNumbers lists the refused ones (json.JSONDecodeError as usual)."""
    marks = 0

    def mark(text: str) -> Any:
        nonlocal marks
        marks += 1
        return _Mark(text)

    def number(text: str) -> Any:
        value = float(text)
        return value if math.isfinite(value) else mark(text)

    data = json.loads(body, parse_constant=mark, parse_float=number)
    if not marks:
        return data
    problems: list[dict] = []

    def settle(path: tuple, found: _Mark) -> None:
        """Refused marks are listed; the others become null (missing, or in a field nobody reads)."""
        if policy(path, found.text) == "refuse":
            missing = path[:1] == ("labels",) and len(path) == 2
            problems.append({"type": "non_finite_number", "loc": ["body", *path],
                             "msg": f"{found.text} is not a finite number (JSON has no NaN or infinity, and a "
                                    "float overflows past 1.8e308)",
                             "fix": "send an empty label (or NaN) for a row without a label, or a rubric"
                                    if missing else "send a finite number"})

    if isinstance(data, _Mark):
        settle((), data)
        data = None
    stack: list[tuple[Any, tuple]] = [(data, ())]
    while stack:  # iterative: a body may nest deeply
        node, path = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in list(items):
            if isinstance(value, _Mark):
                settle((*path, key), value)
                node[key] = None
            elif isinstance(value, (dict, list)):
                stack.append((value, (*path, key)))
    if problems:
        problems.sort(key=lambda p: [(0, x, "") if isinstance(x, int) else (1, 0, x) for x in p["loc"]])
        raise NonFiniteNumbers(problems)
    return data


class FiniteJSONRequest(Request):
    """A request whose `json()` is `loads_finite` under the route's policy."""

    def __init__(self, scope, receive, policy: Callable[[tuple, str], Action]):
        super().__init__(scope, receive)
        self.policy = policy

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_finite(await self.body(), self.policy)
        return self._json


NUMBER_POLICIES: dict[str, Callable[[tuple, str], Action]] = {"/": openrlhf_numbers, "/get_reward": openrlhf_numbers}


class FiniteJSONRoute(APIRoute):
    """An API route that reads JSON bodies with `loads_finite` (policy by path: NUMBER_POLICIES)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        policy = NUMBER_POLICIES.get(self.path, refuse_all)

        async def finite(request: Request) -> Response:
            return await handler(FiniteJSONRequest(request.scope, request.receive, policy))

        return finite


def json_safe(value: Any, depth: int = 0) -> Any:
    """`value` as plain JSON data that always serialises: NaN and infinities as the strings "NaN",
    "Infinity", "-Infinity", bytes decoded, other objects by FastAPI's encoder or else as repr, and
    anything nested past 64 levels as a short repr. For validation errors, which echo the input."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else "NaN" if math.isnan(value) else \
            ("Infinity" if value > 0 else "-Infinity")
    if depth > 64:
        return repr(value)[:200]
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v, depth + 1) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    try:
        from fastapi.encoders import jsonable_encoder

        return json_safe(jsonable_encoder(value), depth + 1)
    except Exception:  # noqa: BLE001 - anything the encoder cannot take is shown, not raised
        return repr(value)[:200]
