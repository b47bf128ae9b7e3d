"""A client for one OpenAI-compatible chat endpoint (vLLM, llama.cpp, Ollama, a hosted API) that
survives real servers: a global concurrency limit, requests- and tokens-per-minute budgets,
per-call timeouts that bound the whole attempt (connect, send and the full body), bounded retries
with exponential backoff and jitter (honouring Retry-After), and a circuit breaker. `complete` never
raises for a failed call: it returns a `ChatResult` whose `error` names the reason (`timeout`,
`http_429`, `http_500`, `connection`, `invalid_response`, `refusal`, `length`, `circuit_open`, ...),
so a judge turns it into a counted `error` verdict.

A 200 is read through `ChatCompletion`, a pydantic model of the fields this client uses: any body
that does not fit it (not JSON, no choices, a message or usage of the wrong type, odd logprobs,
token counts that are not non-negative integers, ...) is `invalid_response: <where>: <what>`.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import httpx
from aiolimiter import AsyncLimiter
from pydantic import (AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError,
                      model_validator)
from tenacity import AsyncRetrying, RetryError, retry_if_exception, stop_after_attempt, wait_exponential_jitter

RETRYABLE = ("timeout", "connection", "http_429", "invalid_response", "schema_refused")


class EndpointConfig(BaseModel):
    """Settings for one endpoint; every field can be given as a query parameter of an `openai:` spec."""

    model_config = ConfigDict(extra="forbid")
    base_url: str = Field(description="ends in /v1, e.g. http://127.0.0.1:8000/v1")
    model: str = Field("default", description="model name sent to the server (llama.cpp ignores it)")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the bearer token, if any")
    concurrency: int = Field(8, ge=1, description="calls in flight at once, across all users of this client")
    rpm: float | None = Field(None, gt=0, description="requests-per-minute budget")
    tpm: float | None = Field(None, gt=0, description="tokens-per-minute budget (prompt estimate + max_tokens)")
    timeout: float = Field(60.0, gt=0, description="seconds per HTTP attempt: connect, send and the whole answer")
    max_retries: int = Field(3, ge=0, description="extra attempts after a retryable failure")
    backoff: float = Field(0.5, ge=0, description="first backoff in seconds; doubles per attempt, with jitter")
    backoff_max: float = Field(20.0, ge=0, description="longest wait between attempts, Retry-After included")
    breaker_failures: int = Field(8, ge=1, description="consecutive failed calls that open the circuit")
    breaker_cooldown: float = Field(30.0, ge=0, description="seconds the open circuit fails calls fast")
    structured_output: Literal["auto", "json_schema", "off"] = Field(
        "auto", description="send a JSON schema as response_format; auto falls back to plain JSON if the server refuses it")
    cost_per_1k_prompt: float = Field(0.0, ge=0, description="price per 1,000 prompt tokens, for the cost counter")
    cost_per_1k_completion: float = Field(0.0, ge=0, description="price per 1,000 completion tokens")


def parse_endpoint_spec(spec: str, **defaults: Any) -> tuple[EndpointConfig, dict[str, str]]:
    """`URL?key=value&...` -> (EndpointConfig, the keys EndpointConfig does not know, for the caller).

    Example: `http://127.0.0.1:8000/v1?model=Qwen/Qwen2.5-7B-Instruct&concurrency=32&mode=batched`."""
    parts = urlsplit(spec)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"endpoint {spec!r} is not an http(s) URL; write e.g. openai:http://127.0.0.1:8000/v1")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    own = {k: v for k, v in query.items() if k in EndpointConfig.model_fields and k != "base_url"}
    rest = {k: v for k, v in query.items() if k not in own}
    url = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") or "/v1", "", ""))
    try:
        return EndpointConfig(base_url=url, **{**defaults, **own}), rest
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"endpoint {spec!r}: {problems}") from None


@dataclass
class ChatResult:
    """One chat call. `error` is None on success, else `reason` or `reason: detail`."""

    text: str = ""
    finish_reason: str | None = None
    top_logprobs: list[dict[str, float]] = field(default_factory=list)  # per generated token: token -> logprob
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 0
    error: str | None = None
    has_logprobs: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class EndpointStats:
    """Running totals: `calls` are logical calls (`complete` invocations), `attempts` the HTTP requests
    sent, `retries` those of them that re-attempted a call (its 2nd, 3rd, ... request). A call the open
    circuit fails fast counts as a call and as a `circuit_open` error, but sends no request."""

    calls: int = 0
    attempts: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)


# -- the shape of a chat completion, as far as this client reads it -------------------------------
# Lenient where OpenAI-compatible servers legitimately differ: unknown fields are ignored, and usage,
# its counts, logprobs, finish_reason, content and refusal may be missing or null. Anything else
# that is not the documented shape fails validation, which the client reports as `invalid_response`.

_LOGPROB_SLACK = 1e-3  # a server's rounding may put log(1.0) a hair above 0


def _logprob(value: float) -> float:
    if math.isnan(value) or value > _LOGPROB_SLACK:
        raise ValueError("a log-probability must be a number <= 0")
    return min(value, 0.0)


LogProb = Annotated[float, AfterValidator(_logprob)]
TokenCount = Annotated[int, Field(ge=0, strict=True)]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class TopLogprob(_Shape):
    token: str
    logprob: LogProb


class TokenLogprob(_Shape):
    top_logprobs: list[TopLogprob] | None = None  # the sampled token's own `token`/`logprob` are not read


class Logprobs(_Shape):
    content: list[TokenLogprob] | None = None


class ContentPart(_Shape):
    """One part of a `content` list: text parts are read, other kinds (image, audio, ...) ignored."""

    type: str
    text: Any = None

    @model_validator(mode="after")
    def _text_is_a_string(self) -> "ContentPart":
        if self.type == "text" and not isinstance(self.text, str):
            raise ValueError("a text part needs a string `text`")
        return self


def _content_kind(value: Any) -> str | None:
    return "string" if isinstance(value, str) else "parts" if isinstance(value, list) else None


Content = Annotated[
    Union[Annotated[str, Tag("string")], Annotated[list[ContentPart], Tag("parts")]],
    Discriminator(_content_kind, custom_error_type="content_type",
                  custom_error_message="Input should be a string, a list of content parts or null")]


class Message(_Shape):
    content: Content | None = None
    refusal: str | None = None

    @property
    def text(self) -> str:
        """The answer: `content`, or its text parts joined; empty for null content or no text part."""
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content if part.type == "text")
        return self.content or ""


class Choice(_Shape):
    message: Message
    finish_reason: str | None = None
    logprobs: Logprobs | None = None


class Usage(_Shape):
    prompt_tokens: TokenCount | None = None
    completion_tokens: TokenCount | None = None


class ChatCompletion(_Shape):
    choices: list[Choice] = Field(min_length=1)
    usage: Usage | None = None


_JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}


def _shape_problem(exc: ValidationError) -> str:
    """`where: what` for the first validation error (and, for a wrong type, what was there instead),
    and how many more problems there are."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    what = first["msg"].removeprefix("Value error, ")
    got = _JSON_KINDS.get(type(first.get("input"))) if first["type"].endswith("_type") else None
    detail = f"{where}: {what}" + (f" (got {got})" if got else "")
    return detail + (f" (+{len(errors) - 1} more problem(s))" if len(errors) > 1 else "")


class _AttemptFailed(Exception):
    def __init__(self, reason: str, detail: str = "", retry_after: float | None = None):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail, self.retry_after = reason, detail, retry_after

    @property
    def retryable(self) -> bool:
        return self.reason in RETRYABLE or self.reason.startswith("http_5")


class CircuitBreaker:
    """Opens after `failures` consecutive failed calls; while open, calls fail fast; after
    `cooldown` seconds one trial call goes through (half-open) and its outcome closes or reopens it."""

    def __init__(self, failures: int, cooldown: float):
        self.failures, self.cooldown = failures, cooldown
        self.consecutive = 0
        self.opened_at: float | None = None
        self.trial_running = False

    def allow(self) -> bool:
        if self.opened_at is None:
            return True
        if time.monotonic() - self.opened_at >= self.cooldown and not self.trial_running:
            self.trial_running = True
            return True
        return False

    def record(self, success: bool) -> None:
        self.trial_running = False
        if success:
            self.consecutive, self.opened_at = 0, None
            return
        self.consecutive += 1
        if self.consecutive >= self.failures or self.opened_at is not None:
            self.opened_at = time.monotonic()

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class ChatEndpoint:
    """`await endpoint.complete(messages, max_tokens=...)` -> ChatResult; safe to share across tasks."""

    def __init__(self, config: EndpointConfig, *, transport: httpx.AsyncBaseTransport | None = None):
        self.config = config
        self.transport = transport  # tests may inject an httpx transport
        self.stats = EndpointStats()
        self.breaker = CircuitBreaker(config.breaker_failures, config.breaker_cooldown)
        self.schema_supported: bool | None = None if config.structured_output == "auto" else (
            config.structured_output == "json_schema")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None

    def _bind(self) -> None:
        """Clients, semaphores and limiters belong to one event loop; rebuild them on a new loop
        (TRL reward functions run each step in a fresh `asyncio.run`)."""
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return
        self._loop = loop
        key = os.environ.get(self.config.api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=self.config.concurrency, max_keepalive_connections=self.config.concurrency)
        loopback = urlsplit(self.config.base_url).hostname in ("127.0.0.1", "localhost", "::1")
        self._client = httpx.AsyncClient(base_url=self.config.base_url, headers=headers, limits=limits,
                                         timeout=httpx.Timeout(self.config.timeout), transport=self.transport,
                                         trust_env=not loopback)  # never send loopback traffic through a proxy
        self._slots = asyncio.Semaphore(self.config.concurrency)
        self._rpm = AsyncLimiter(self.config.rpm, 60) if self.config.rpm else None
        self._tpm = AsyncLimiter(self.config.tpm, 60) if self.config.tpm else None

    async def complete(self, messages: list[dict[str, str]], *, max_tokens: int = 256, temperature: float = 0.0,
                       json_schema: dict | None = None, logprobs: int = 0, seed: int | None = None,
                       stop: list[str] | None = None) -> ChatResult:
        self._bind()
        self.stats.calls += 1
        result = ChatResult()
        if not self.breaker.allow():
            return self._fail(result, _AttemptFailed("circuit_open", "too many consecutive failures; cooling down"))
        body: dict[str, Any] = {"model": self.config.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        if stop:
            body["stop"] = stop
        if logprobs:
            body.update(logprobs=True, top_logprobs=logprobs)
        if json_schema is not None and self.schema_supported is not False:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "answer", "schema": json_schema, "strict": True}}
        cost = sum(len(m.get("content") or "") for m in messages) // 4 + max_tokens
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.max_retries + 1),
            wait=self._wait, retry=retry_if_exception(lambda e: isinstance(e, _AttemptFailed) and e.retryable),
            reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    result.attempts += 1
                    await self._attempt(body, cost, result, retry=attempt.retry_state.attempt_number > 1)
        except _AttemptFailed as exc:
            self.breaker.record(success=not exc.retryable)
            return self._fail(result, exc)
        except RetryError as exc:  # pragma: no cover - reraise=True makes tenacity re-raise the last error
            return self._fail(result, _AttemptFailed("retries_exhausted", str(exc)))
        self.breaker.record(success=True)
        return result

    def _wait(self, state) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _AttemptFailed) and exc.retry_after is not None:
            return min(exc.retry_after, self.config.backoff_max)
        return wait_exponential_jitter(multiplier=self.config.backoff, max=self.config.backoff_max,
                                       jitter=self.config.backoff)(state)

    async def _attempt(self, body: dict, cost: int, result: ChatResult, *, retry: bool) -> None:
        if self._rpm:
            await self._rpm.acquire()
        if self._tpm:
            await self._tpm.acquire(min(cost, self.config.tpm))
        async with self._slots:  # waiting for a slot or a budget is not part of the attempt's timeout
            self.stats.attempts += 1
            self.stats.retries += int(retry)
            try:
                # httpx's timeout applies to each read, so a server trickling bytes would never trip it:
                # asyncio's bounds the whole request, from connecting to the last byte of the body
                response = await asyncio.wait_for(self._client.post("/chat/completions", json=body),
                                                  self.config.timeout)
                payload = response.content
            except (asyncio.TimeoutError, httpx.TimeoutException) as exc:
                raise _AttemptFailed("timeout", f"no complete answer in {self.config.timeout:g}s "
                                                f"({type(exc).__name__})") from None
            except (httpx.TransportError, httpx.DecodingError) as exc:
                raise _AttemptFailed("connection", f"{type(exc).__name__}: {exc}"[:200]) from None
        if response.status_code == 400 and "response_format" in body and self.schema_supported is None:
            self.schema_supported = False  # the server refused the schema: plain JSON from now on
            body.pop("response_format")
            raise _AttemptFailed("schema_refused", "the server refused response_format; retrying with plain JSON")
        if response.status_code == 429:
            raise _AttemptFailed("http_429", response.text[:200], _retry_after(response))
        if response.status_code >= 500:
            raise _AttemptFailed(f"http_{response.status_code}", response.text[:200], _retry_after(response))
        if response.status_code >= 400:
            raise _AttemptFailed(f"http_{response.status_code}", response.text[:200])
        try:
            data = ChatCompletion.model_validate_json(payload)
        except ValidationError as exc:
            raise _AttemptFailed("invalid_response", _shape_problem(exc)[:300]) from None
        if "response_format" in body:
            self.schema_supported = True
        choice, usage = data.choices[0], data.usage or Usage()
        prompt_tokens, completion_tokens = usage.prompt_tokens or 0, usage.completion_tokens or 0
        result.prompt_tokens += prompt_tokens
        result.completion_tokens += completion_tokens
        self.stats.prompt_tokens += prompt_tokens
        self.stats.completion_tokens += completion_tokens
        self.stats.cost += (prompt_tokens * self.config.cost_per_1k_prompt
                            + completion_tokens * self.config.cost_per_1k_completion) / 1000
        result.text = choice.message.text
        result.finish_reason = choice.finish_reason
        content_logprobs = choice.logprobs.content if choice.logprobs else None
        result.has_logprobs = content_logprobs is not None
        result.top_logprobs = [{t.token: t.logprob for t in item.top_logprobs or []}
                               for item in content_logprobs or []]
        if choice.message.refusal or result.finish_reason == "content_filter":
            raise _AttemptFailed("refusal", (choice.message.refusal or "finish_reason=content_filter")[:200])

    def _fail(self, result: ChatResult, exc: _AttemptFailed) -> ChatResult:
        result.error = str(exc)
        self.stats.errors[exc.reason] = self.stats.errors.get(exc.reason, 0) + 1
        return result

    def count_error(self, reason: str) -> None:
        """For callers that reject a successful call's content (parse failure, length stop)."""
        self.stats.errors[reason] = self.stats.errors.get(reason, 0) + 1


def logprob_yes(top: dict[str, float], yes=("yes",), no=("no",)) -> float | None:
    """P(yes) / (P(yes) + P(no)) from one token's top logprobs (case and spaces ignored), or None."""
    p_yes = sum(math.exp(lp) for tok, lp in top.items() if tok.strip().lower() in yes)
    p_no = sum(math.exp(lp) for tok, lp in top.items() if tok.strip().lower() in no)
    return p_yes / (p_yes + p_no) if p_yes + p_no > 0 else None
