"""The reward server: rubric rewards over HTTP (FastAPI app; `rubricrl serve` runs it with uvicorn).

Routes: OpenRLHF's remote reward API at `POST /` and `POST /get_reward`; the native `POST /v1/score`
(rows in, scores and verdicts out); `GET /health`; Prometheus `GET /metrics`; the OpenAPI spec at
`/openapi.json`. Rules (docs/scaling.md): a bearer token (header, or `?token=` for clients that
cannot set headers) guards every route but /health and the spec; bodies over `max_body` get 413;
`concurrency` requests are judged at once and `queue` more wait, beyond that 503 + Retry-After;
a request not answered within `timeout` seconds (queueing included) gets 504; a request whose
headers or body do not arrive within the read timeout gets 408 and its connection closed; unusable
rows get 422 naming every bad row and field, as does a NaN or infinity anywhere in a body (except a
NaN label: no label); judge errors follow the error policy (row_rewards.py). Every refusal is
logged at WARNING with its reason. With `mode` pairwise, OpenRLHF's rewards are win rates within each
prompt's group of `group_size` rows, gathered across requests (serve/groups.py); /v1/score stays pointwise.
"""

from __future__ import annotations

import itertools
import logging
import re
import secrets
from collections.abc import Sequence

from fastapi import Depends, FastAPI, HTTPException, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import APIKeyQuery, HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from rubricrl import __version__
from rubricrl.core.messages import as_conversation
from rubricrl.judges.base import Judge, verifier_ids
from rubricrl.serve.openrlhf import RequestProblems, RowProblem, parse_request
from rubricrl.rewards.rows import LOG_KEYS, RowInput, RowReward, failures, judge_rows, row_reward
from rubricrl.rubrics.values import RubricValueError, bundled_names, rubric_value
from rubricrl.serve.api import (ErrorMessage, FiniteJSONRoute, Health, NonFiniteNumbers, OpenRLHFRequest, OpenRLHFResponse,
                         RowErrors, RowResult, ScoreRequest, ScoreResponse, json_safe)
from rubricrl.serve.groups import GroupIncomplete, PromptGroups
from rubricrl.serve.limits import Admission, BodyLimit, QueueFull, ReadDeadline, RequestTimeout, read_timeout_protocol
from rubricrl.serve.metrics import RejectionLog, RequestMetrics, ServerMetrics
from rubricrl.serve.settings import ServerSettings

log = logging.getLogger("rubricrl.serve")
ROUTES = ("/", "/get_reward", "/v1/score", "/health", "/metrics")


class JudgeFailures(Exception):
    """Rows whose reward is not a judgement, under error policy `raise` (answered with 502)."""

    def __init__(self, failed: list[tuple[int, RowReward]]):
        self.failed = failed


def _errors(description: str, model=ErrorMessage) -> dict:
    return {"model": model, "description": description}


ERROR_RESPONSES = {
    400: _errors("the body could not be read (e.g. not UTF-8)"),
    401: _errors("missing or wrong bearer token"),
    408: _errors("the request's headers or body did not arrive within the server's read timeout"),
    413: _errors("request body larger than the server's --max-body"),
    422: _errors("invalid request: schema errors, or rows that cannot be judged (each with loc "
                 "[body, field, row], msg and fix)", RowErrors),
    502: _errors("error policy `raise`: some rows got judge errors or could not be scored"),
    503: _errors("the queue is full; retry after the Retry-After header's seconds"),
    504: _errors("not answered within the server's --timeout (queueing included)"),
}


def create_app(settings: ServerSettings, judge: Judge | None = None) -> FastAPI:
    """The reward server app; `judge` defaults to the one `settings.judge` names (built here, before serving)."""
    if judge is None:
        from rubricrl.judges import make_judge

        judge = make_judge(settings.judge, cache=settings.cache, cache_path=settings.cache_path)
    metrics = ServerMetrics(judge, ROUTES)
    admission = Admission(settings.concurrency, settings.queue)
    metrics.in_flight.set_function(lambda: admission.active)
    metrics.queued.set_function(lambda: admission.waiting)
    app = FastAPI(title="rubricrl reward server", version=__version__, description=__doc__.split("\n\n", 1)[1])
    app.state.settings, app.state.judge, app.state.metrics, app.state.admission = settings, judge, metrics, admission
    app.router.route_class = FiniteJSONRoute  # bodies are read without NaN or infinity (server_api.py)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body,
                       on_reject=lambda: metrics.rejected.labels("body_too_large").inc())
    app.add_middleware(ReadDeadline, seconds=settings.read_seconds,
                       on_timeout=lambda: metrics.rejected.labels("read_timeout").inc())
    app.add_middleware(RejectionLog, log=log)
    app.add_middleware(RequestMetrics, metrics=metrics)  # outermost: counts 413s too
    authorized = _token_check(settings, metrics)
    _error_handlers(app, metrics)

    verifiers = verifier_ids(judge.report())  # a critic judge's verifiers: their verdicts are the verified ones

    async def pointwise(rows: Sequence[RowInput]) -> list[RowReward]:
        async def work():
            metrics.judge_batches.inc()
            return await judge_rows(judge, rows)

        verdicts = await admission.run(work, settings.timeout)
        return [row_reward(r.rubric, v, soft=settings.soft, verifiers=verifiers) for r, v in zip(rows, verdicts)]

    rewarded = pointwise
    if settings.mode == "pairwise":
        rewarded = _pairwise_groups(app, judge, settings, admission, metrics, verifiers).rewards

    async def judged(rows: Sequence[RowInput], reward_rows=pointwise) -> list[RowReward]:
        if not rows:
            return []
        rewards = await reward_rows(rows)
        for r in rewards:
            metrics.rows.labels(r.status).inc()
            for v in r.verdicts:
                metrics.verdicts.labels(v.status.value).inc()
        failed = failures(rewards)
        if failed:
            log.warning("%d of %d rows not scored (%s): first: row %d: %s", len(failed), len(rewards),
                        "request fails: error policy raise" if settings.error_policy == "raise" else "reward 0.0",
                        failed[0][0], failed[0][1].problem)
            if settings.error_policy == "raise":
                raise JudgeFailures(failed)
        return rewards

    async def openrlhf_reward(body: OpenRLHFRequest) -> OpenRLHFResponse:
        rows = parse_request(body.query, body.prompts, body.labels, settings.rubric)
        rewards = await judged(rows, rewarded)
        return OpenRLHFResponse(rewards=[r.reward for r in rewards],
                                scores=[min(1.0, max(0.0, r.reward)) for r in rewards],
                                extra_logs=_extra_logs(rewards))

    for path in ("/", "/get_reward"):
        app.add_api_route(path, openrlhf_reward, methods=["POST"], response_model=OpenRLHFResponse,
                          dependencies=[Depends(authorized)], responses=ERROR_RESPONSES,
                          summary="OpenRLHF remote reward (--remote_rm_url / --reward.remote_url)",
                          operation_id="openrlhf_reward" + path.replace("/", "_").rstrip("_"))

    @app.post("/v1/score", response_model=ScoreResponse, dependencies=[Depends(authorized)],
              responses=ERROR_RESPONSES, summary="Score rows: verdicts, scores and rewards")
    async def score(body: ScoreRequest) -> ScoreResponse:
        rows = _score_rows(body, settings)
        rewards = await judged(rows)
        results = [_result(item.id, row, r, body.verdicts) for item, row, r in zip(body.rows, rows, rewards)]
        return ScoreResponse(judge=judge.judge_id, results=results)

    @app.get("/health", response_model=Health, summary="Liveness and what the server judges with (no token)")
    async def health() -> Health:
        rubric = settings.rubric
        return Health(status="ok", judge=judge.judge_id,
                      rubric=(rubric.id or rubric.content_hash()[:12]) if rubric else None,
                      in_flight=admission.active, queued=admission.waiting)

    @app.get("/metrics", response_class=PlainTextResponse, dependencies=[Depends(authorized)],
             responses={401: ERROR_RESPONSES[401]}, summary="Prometheus metrics")
    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _pairwise_groups(app: FastAPI, judge: Judge, settings: ServerSettings, admission: Admission,
                     metrics: ServerMetrics, verifiers: frozenset[str]) -> PromptGroups:
    """OpenRLHF rewards in pairwise mode (serve/groups.py): a prompt's rows gathered across requests, each
    complete group judged in one admission slot (win rates, rewards/pairwise.py)."""
    from rubricrl.judges.pairwise import PairwiseRubricJudge
    from rubricrl.rewards.pairwise import PairwiseRow, pairwise_results, pairwise_row_reward

    pairwise = PairwiseRubricJudge(judge, soft=settings.soft)
    judged_groups = itertools.count()

    async def judge_group(rows: list[RowInput]) -> list[RowReward]:
        async def work():
            metrics.judge_batches.inc()
            found, cost = await pairwise_results(pairwise, [PairwiseRow(r.conversation, r.response, r.rubric)
                                                            for r in rows], [list(range(len(rows)))],
                                                 max_pairs=settings.pairwise_max_pairs, seed=str(next(judged_groups)))
            metrics.count_pairwise(cost)
            return found

        found = await admission.run(work, settings.timeout)
        return [pairwise_row_reward(r.rubric, f, soft=settings.soft, verifiers=verifiers) for r, f in zip(rows, found)]

    groups = PromptGroups(settings.group_size, judge_group, settings.timeout)
    metrics.group_rows_waiting.set_function(lambda: groups.waiting)
    app.state.pairwise, app.state.groups = pairwise, groups
    return groups


def _extra_logs(rewards: Sequence[RowReward]) -> dict[str, list[float]]:
    """One number per row under LOG_KEYS: the same keys for every row of every request, whatever the
    row's rubric, outcome or the server's settings. OpenRLHF keeps each row's keys in its own
    Experience and merges them key by key, so rows with different key sets break the step."""
    return {key: [r.logs()[key] for r in rewards] for key in LOG_KEYS}


def _score_rows(body: ScoreRequest, settings: ServerSettings) -> list[RowInput]:
    rows, problems = [], []
    for i, item in enumerate(body.rows):
        try:
            rubric = rubric_value(item.rubric, f"rows[{i}].rubric") if item.rubric not in (None, "") \
                else settings.rubric
        except RubricValueError as exc:
            problems.append(RowProblem("rows", i, str(exc), "send a valid rubric (docs/rubrics.md) or one of the "
                                                            f"bundled names {bundled_names()}"))
            continue
        if rubric is None:
            problems.append(RowProblem("rows", i, "has no rubric and the server has none",
                                       "add `rubric` to the row or start the server with --rubric"))
            continue
        prompt = item.prompt if isinstance(item.prompt, str) else [m.model_dump() for m in item.prompt]
        try:
            conversation = as_conversation(prompt)
        except ValidationError as exc:  # pragma: no cover - MessageIn already validated the messages
            problems.append(RowProblem("rows", i, f"prompt: {exc.errors()[0]['msg']}", "fix the messages"))
            continue
        rows.append(RowInput(conversation, item.response, rubric))
    if problems:
        raise RequestProblems(problems)
    return rows


def _result(row_id: str | None, row: RowInput, r: RowReward, with_verdicts: bool) -> RowResult:
    s = r.score
    return RowResult(id=row_id, status=r.status, reward=r.reward, score=s.score, points=r.points,
                     raw_score=s.raw_score, coverage=s.coverage, gated=s.gated,
                     failed_hard_rules=list(s.failed_hard_rules), judge_errors=s.n_error, skipped=s.n_skipped,
                     tag_scores=s.tag_scores, rubric_hash=row.rubric.content_hash(), problem=r.problem,
                     verdicts=list(r.verdicts) if with_verdicts else None)


def _token_check(settings: ServerSettings, metrics: ServerMetrics):
    """A dependency that accepts the bearer token from the Authorization header or `?token=`."""
    bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer TOKEN (when the server has a token)")
    in_query = APIKeyQuery(name="token", auto_error=False,
                           description="the token as a query parameter, for clients that cannot set headers "
                                       "(OpenRLHF's reward client); redacted from the access log")
    expected = settings.token.encode() if settings.token else None

    async def authorized(credentials: HTTPAuthorizationCredentials | None = Security(bearer),
                         token: str | None = Security(in_query)) -> None:
        if expected is None:
            return
        given = credentials.credentials if credentials is not None else token
        if not given or not secrets.compare_digest(given.encode(), expected):
            metrics.rejected.labels("unauthorized").inc()
            raise HTTPException(401, "missing or wrong bearer token: send `Authorization: Bearer TOKEN` "
                                     "(or `?token=TOKEN`)", headers={"WWW-Authenticate": "Bearer"})

    return authorized


def _error_handlers(app: FastAPI, metrics: ServerMetrics) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        metrics.rejected.labels("invalid_request").inc()  # the errors echo the input: made JSON-safe
        return JSONResponse({"detail": json_safe(exc.errors())}, status_code=422)

    @app.exception_handler(NonFiniteNumbers)
    async def non_finite(request: Request, exc: NonFiniteNumbers) -> JSONResponse:
        metrics.rejected.labels("invalid_request").inc()
        return JSONResponse({"detail": exc.detail}, status_code=422)

    @app.exception_handler(RequestProblems)
    async def invalid_rows(request: Request, exc: RequestProblems) -> JSONResponse:
        metrics.rejected.labels("invalid_rows").inc()
        return JSONResponse({"detail": [p.detail() for p in exc.problems]}, status_code=422)

    @app.exception_handler(QueueFull)
    async def queue_full(request: Request, exc: QueueFull) -> JSONResponse:
        metrics.rejected.labels("queue_full").inc()
        return JSONResponse({"detail": f"the server is busy (queue full); retry in {exc.retry_after} s"},
                            status_code=503, headers={"Retry-After": str(exc.retry_after)})

    @app.exception_handler(RequestTimeout)
    async def timeout(request: Request, exc: RequestTimeout) -> JSONResponse:
        metrics.rejected.labels("timeout").inc()
        seconds = request.app.state.settings.timeout
        return JSONResponse({"detail": f"not answered within {seconds:g} s (queueing included); send fewer rows "
                                       "per request, add replicas, or raise --timeout"}, status_code=504)

    @app.exception_handler(GroupIncomplete)
    async def group_incomplete(request: Request, exc: GroupIncomplete) -> JSONResponse:
        metrics.rejected.labels("group_incomplete").inc()
        return JSONResponse({"detail": exc.detail()}, status_code=504)

    @app.exception_handler(JudgeFailures)
    async def judge_failures(request: Request, exc: JudgeFailures) -> JSONResponse:
        metrics.rejected.labels("judge_failure").inc()
        shown = "; ".join(f"row {i}: {r.problem}" for i, r in exc.failed[:5])
        return JSONResponse({"detail": f"{len(exc.failed)} row(s) not scored (error policy raise; judge errors are "
                                       f"never cached, so a retry judges them again): {shown}"}, status_code=502)


class RedactToken(logging.Filter):
    """Hide `token=...` in uvicorn's access log lines (the path is the third argument)."""

    pattern = re.compile(r"(token=)[^&\s]*")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) >= 3 and isinstance(record.args[2], str):
            args = list(record.args)
            args[2] = self.pattern.sub(r"\1REDACTED", args[2])
            record.args = tuple(args)
        return True


def serve(settings: ServerSettings, judge: Judge | None = None) -> None:
    """Build the app (loading the judge) and serve it with uvicorn until interrupted; a judge that
    cannot be built raises ValueError."""
    import uvicorn

    from rubricrl.judges import JudgeSpecError
    from rubricrl.llm.models import ModelNotFoundError

    try:
        app = create_app(settings, judge)
    except (JudgeSpecError, ModelNotFoundError, OSError) as exc:
        raise ValueError(f"--judge {settings.judge}: {exc}") from None
    config = uvicorn_config(app, log_level="info")
    logging.getLogger("uvicorn.access").addFilter(RedactToken())
    logging.getLogger("rubricrl").setLevel(logging.INFO)
    uvicorn.Server(config).run()


def uvicorn_config(app: FastAPI, **overrides):
    """uvicorn's config for the app: its settings' host and port, and the h11 protocol that also
    times out request headers (server_limits.read_timeout_protocol; the body is ReadDeadline's)."""
    import uvicorn

    settings: ServerSettings = app.state.settings
    options = {"host": settings.host, "port": settings.port,
               "http": read_timeout_protocol(settings.read_seconds, log), **overrides}
    return uvicorn.Config(app, **options)
