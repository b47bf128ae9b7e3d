"""The chat endpoint client against answers of an unexpected shape and slow servers, without a model:
scripted answers through an httpx.MockTransport and a small trickling server on loopback.

- every 200 whose JSON is not shaped like a chat completion is an `invalid_response: ...` error
  (never an exception), while the shapes OpenAI-compatible servers legitimately differ in still work;
- content given as a list of content parts is read;
- the parsers of the judge's JSON answers never raise;
- `timeout` bounds the whole attempt, a body trickled byte by byte included;
- `retries` counts re-attempts only (calls failed fast by the open breaker are not negative retries).
"""

import asyncio
import json
import math
import socket
import threading

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rubricrl.core.messages import as_conversation
from rubricrl.llm.endpoint import ChatEndpoint, EndpointConfig
from rubricrl.judges import JudgeRequest
from rubricrl.judges import http_prompts as prompts
from rubricrl.judges.http import MODES, HTTPJudge
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status, Verdict

CONV = as_conversation([{"role": "user", "content": "I failed my driving test again and I feel stupid."}])
REPLY = "That sounds discouraging. Failing twice does not make you stupid. What felt hardest?"
ASKS = Criterion(id="asks", text="The reply asks the person a question.", weight=2)
BLAMES = Criterion(id="blames", text="The reply blames the person.", weight=-3)
MESSAGES = [{"role": "user", "content": "hello"}]
SINGLE_YES = json.dumps({"explanation": "asks 'What felt hardest?'", "criteria_met": True})


def completion(message=None, **choice) -> dict:
    message = {"role": "assistant", "content": SINGLE_YES} if message is None else message
    return {"id": "x", "object": "chat.completion", "usage": {"prompt_tokens": 100, "completion_tokens": 10},
            "choices": [{"index": 0, "finish_reason": "stop", "message": message, **choice}]}


def serving(body, seen=None) -> httpx.MockTransport:
    """A transport answering every request with a 200 and `body` (JSON-encoded unless bytes)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(200, content=raw, headers={"content-type": "application/json"})
    return httpx.MockTransport(handler)


def endpoint_for(transport, **settings) -> ChatEndpoint:
    config = EndpointConfig(base_url="http://judge.test/v1", **{"max_retries": 0, "backoff": 0, **settings})
    return ChatEndpoint(config, transport=transport)


def complete(body, **kwargs):
    endpoint = endpoint_for(serving(body))
    return asyncio.run(endpoint.complete(MESSAGES, **kwargs)), endpoint


# -- malformed shapes: an error with its reason, never an exception ----------------------------------

def _with_usage(usage):
    body = completion()
    body["usage"] = usage
    return body


def _with_logprobs(logprobs):
    return completion(logprobs=logprobs)


MALFORMED = {
    # choices entries that are not objects
    "choice is a string": ({"choices": ["hello"]}, "choices.0"),
    "choice is a number": ({"choices": [3]}, "choices.0"),
    "choice is null": ({"choices": [None]}, "choices.0"),
    "choice is a list": ({"choices": [[{"message": {"content": "x"}}]]}, "choices.0"),
    # message of the wrong type
    "message is a string": (completion(message="hello"), "choices.0.message"),
    "message is a list": (completion(message=[{"content": "x"}]), "choices.0.message"),
    "message is a number": (completion(message=7), "choices.0.message"),
    "message is true": (completion(message=True), "choices.0.message"),
    # usage of the wrong type, or token counts that are not non-negative integers
    "usage is a string": (_with_usage("lots"), "usage"),
    "usage is a list": (_with_usage([100, 10]), "usage"),
    "usage is a number": (_with_usage(110), "usage"),
    "prompt_tokens negative": (_with_usage({"prompt_tokens": -5, "completion_tokens": 1}), "usage.prompt_tokens"),
    "prompt_tokens fractional": (_with_usage({"prompt_tokens": 1.5}), "usage.prompt_tokens"),
    "completion_tokens a string": (_with_usage({"completion_tokens": "ten"}), "usage.completion_tokens"),
    "completion_tokens a list": (_with_usage({"completion_tokens": [1]}), "usage.completion_tokens"),
    "prompt_tokens a boolean": (_with_usage({"prompt_tokens": True}), "usage.prompt_tokens"),
    # logprobs of odd shapes
    "logprobs is a string": (_with_logprobs("yes"), "logprobs"),
    "logprobs is a list": (_with_logprobs([{"token": "yes", "logprob": -0.1}]), "logprobs"),
    "logprobs.content is a string": (_with_logprobs({"content": "yes"}), "logprobs.content"),
    "logprobs.content item is a number": (_with_logprobs({"content": [1]}), "logprobs.content.0"),
    "top_logprobs is a string": (_with_logprobs({"content": [{"token": "y", "logprob": -1, "top_logprobs": "y"}]}),
                                 "top_logprobs"),
    "top_logprobs item is a string": (_with_logprobs({"content": [{"token": "y", "logprob": -1,
                                                                   "top_logprobs": ["yes"]}]}), "top_logprobs.0"),
    "top logprob without a token": (_with_logprobs({"content": [{"token": "y", "logprob": -1,
                                                                 "top_logprobs": [{"logprob": -0.1}]}]}), "token"),
    "top logprob not a number": (_with_logprobs({"content": [{"token": "y", "logprob": -1,
                                                              "top_logprobs": [{"token": "yes", "logprob": "high"}]}]}),
                                 "logprob"),
    "top logprob is NaN": (_with_logprobs({"content": [{"token": "y", "logprob": -1,
                                                        "top_logprobs": [{"token": "yes", "logprob": math.nan}]}]}),
                           "logprob"),
    "top logprob is +inf": (_with_logprobs({"content": [{"token": "y", "logprob": -1,
                                                         "top_logprobs": [{"token": "yes", "logprob": math.inf}]}]}),
                            "logprob"),
    "top logprob is a huge positive number": (_with_logprobs({"content": [{"token": "y", "logprob": -1,
                                                                           "top_logprobs": [{"token": "yes",
                                                                                             "logprob": 1000.0}]}]}),
                                              "logprob"),
    # content of the wrong type
    "content is a number": (completion(message={"role": "assistant", "content": 5}), "content"),
    "content is an object": (completion(message={"role": "assistant", "content": {"text": "x"}}), "content"),
    "content part is a string": (completion(message={"role": "assistant", "content": ["hello"]}), "content"),
    "text part without text": (completion(message={"role": "assistant", "content": [{"type": "text"}]}), "content"),
    "text part with a number": (completion(message={"role": "assistant", "content": [{"type": "text", "text": 5}]}),
                                "content"),
    # other fields of the wrong type
    "finish_reason is a number": (completion(finish_reason=1), "finish_reason"),
    "refusal is an object": (completion(message={"role": "assistant", "content": "", "refusal": {"why": "no"}}),
                             "refusal"),
}


@pytest.mark.parametrize("body, where", MALFORMED.values(), ids=list(MALFORMED))
def test_a_200_that_is_not_a_chat_completion_is_invalid_response(body, where):
    result, endpoint = complete(body, logprobs=5)
    assert result.error is not None and result.error.startswith("invalid_response: "), result.error
    assert where in result.error, result.error  # the reason names what was wrong
    assert endpoint.stats.errors == {"invalid_response": 1}
    assert result.text == "" and result.prompt_tokens == 0 and result.completion_tokens == 0


def test_malformed_answers_are_error_verdicts_in_every_judge_mode():
    """What `rubricrl score` and `rubricrl serve` see: an error verdict with the reason, not an exception."""
    for name in ("choice is a string", "message is a string", "usage is a string", "logprobs is a string",
                 "content part is a string"):
        body, _ = MALFORMED[name]
        for mode in MODES:
            judge = HTTPJudge(endpoint_for(serving(body)), mode)
            [verdicts] = asyncio.run(judge.judge([JudgeRequest(CONV, REPLY, (ASKS, BLAMES))]))
            assert [v.status for v in verdicts] == [Status.ERROR, Status.ERROR], (name, mode)
            assert all(v.reason.startswith("invalid_response: ") for v in verdicts), (name, mode, verdicts)


def test_invalid_response_is_retried_within_bounds():
    seen = []
    endpoint = endpoint_for(serving(MALFORMED["message is a string"][0], seen), max_retries=2)
    result = asyncio.run(endpoint.complete(MESSAGES))
    assert result.error.startswith("invalid_response") and result.attempts == 3 and len(seen) == 3
    assert endpoint.stats.retries == 2


# -- shapes servers legitimately differ in still work ---------------------------------------------

def test_lenient_where_servers_differ():
    """Extra fields, no usage, null usage counts, no logprobs, no finish_reason, null content with tool
    calls: all ok. (A guard: this passed before the change too.)"""
    minimal = {"choices": [{"message": {"content": "hi"}}]}
    result, _ = complete(minimal)
    assert result.ok and result.text == "hi" and result.finish_reason is None and result.prompt_tokens == 0
    extra = completion(message={"role": "assistant", "content": "hi", "reasoning_content": "hmm", "audio": None},
                       logprobs=None, stop_reason=None)
    extra.update(system_fingerprint="fp", timings={"predicted_ms": 3.5}, usage={"prompt_tokens": None,
                 "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}})
    result, endpoint = complete(extra)
    assert result.ok and result.text == "hi" and result.completion_tokens == 3 and result.prompt_tokens == 0
    assert not result.has_logprobs and endpoint.stats.completion_tokens == 3
    tools = completion(message={"role": "assistant", "content": None,
                                "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f"}}]},
                       finish_reason="tool_calls")
    result, _ = complete(tools)
    assert result.ok and result.text == "" and result.finish_reason == "tool_calls"
    with_logprobs = completion(logprobs={"content": [{"token": "Yes", "logprob": -0.1, "bytes": [89],
                                                      "top_logprobs": [{"token": "Yes", "logprob": -0.1, "id": 1},
                                                                       {"token": "No", "logprob": -2.4}]}]})
    result, _ = complete(with_logprobs, logprobs=2)
    assert result.ok and result.has_logprobs and result.top_logprobs == [{"Yes": -0.1, "No": -2.4}]


def test_a_refusal_is_still_a_refusal():
    body = completion(message={"role": "assistant", "content": None, "refusal": "I can't help with that."},
                      finish_reason="stop")
    result, _ = complete(body)
    assert result.error.startswith("refusal: I can't help")


# -- content parts ---------------------------------------------------------------------------------

def test_content_parts_are_read():
    parts = [{"type": "text", "text": '{"explanation": "asks \'What felt hardest?\'", '},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
             {"type": "text", "text": '"criteria_met": true}', "annotations": []}]
    result, _ = complete(completion(message={"role": "assistant", "content": parts}))
    assert result.ok and result.text == parts[0]["text"] + parts[2]["text"]  # the text parts, joined
    judge = HTTPJudge(endpoint_for(serving(completion(message={"role": "assistant", "content": parts}))))
    [[verdict]] = asyncio.run(judge.judge([JudgeRequest(CONV, REPLY, (ASKS,))]))
    assert verdict.status is Status.MET and "What felt hardest" in verdict.evidence


def test_content_parts_without_text_are_an_empty_answer():
    """No text part is an empty answer (like `content: null`), not a malformed body: the judge reports
    it as `parse`, a chat model's caller as an empty reply."""
    for parts in ([], [{"type": "image_url", "image_url": {"url": "x"}}]):
        result, _ = complete(completion(message={"role": "assistant", "content": parts}))
        assert result.ok and result.text == ""
    judge = HTTPJudge(endpoint_for(serving(completion(message={"role": "assistant", "content": []}))))
    [[verdict]] = asyncio.run(judge.judge([JudgeRequest(CONV, REPLY, (ASKS,))]))
    assert verdict.status is Status.ERROR and verdict.reason.startswith("parse")


# -- property: whatever the body, `complete` and the judge answer without raising -------------------

JSON_LEAF = (st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats()
             | st.text(max_size=12))
JSON = st.recursive(JSON_LEAF, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                                                            max_size=4), max_leaves=16)
ANSWERS = st.sampled_from([SINGLE_YES, '{"explanation": "", "rating": 7}', '{"rating": NaN}', '{"rating": 1e999}',
                           '{"verdicts": [{"id": "asks", "met": true, "evidence": ""}]}', '[true]', "yes", ""])


def maybe(valid):
    """Mostly the valid shape, sometimes any JSON value in its place."""
    return st.one_of(valid, valid, valid, JSON)


_TOP = st.fixed_dictionaries({"token": maybe(st.sampled_from(["yes", " No", "The", ""])),
                              "logprob": maybe(st.floats(max_value=0))})
_TOKEN = st.fixed_dictionaries({"token": maybe(st.text(max_size=3)), "logprob": maybe(st.floats(max_value=0)),
                                "top_logprobs": maybe(st.lists(maybe(_TOP), max_size=3))})
_PART = st.fixed_dictionaries({"type": maybe(st.sampled_from(["text", "image_url", "refusal"]))},
                              optional={"text": maybe(ANSWERS | st.text(max_size=8))})
_CONTENT = st.none() | ANSWERS | st.text(max_size=20) | st.lists(maybe(_PART), max_size=3) | JSON.map(json.dumps)
_MESSAGE = st.fixed_dictionaries({"role": st.just("assistant"), "content": maybe(_CONTENT)},
                                 optional={"refusal": maybe(st.none() | st.text(max_size=8)), "tool_calls": JSON})
_CHOICE = st.fixed_dictionaries(
    {"index": st.just(0), "message": maybe(_MESSAGE)},
    optional={"finish_reason": maybe(st.sampled_from(["stop", "length", "content_filter", None])),
              "logprobs": maybe(st.none() | st.fixed_dictionaries({"content": maybe(st.lists(maybe(_TOKEN),
                                                                                              max_size=2))}))})
_USAGE = st.fixed_dictionaries({}, optional={"prompt_tokens": maybe(st.integers(0, 10 ** 6)),
                                             "completion_tokens": maybe(st.integers(0, 10 ** 6))})
CHAT_LIKE = st.fixed_dictionaries({"choices": maybe(st.lists(maybe(_CHOICE), min_size=1, max_size=2))},
                                  optional={"usage": maybe(st.none() | _USAGE), "id": JSON})
BODIES = (CHAT_LIKE.map(lambda b: json.dumps(b).encode()) | JSON.map(lambda b: json.dumps(b).encode())
          | st.binary(max_size=40))
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(body=BODIES, logprobs=st.sampled_from([0, 5]))
def test_complete_never_raises_whatever_the_body(body, logprobs):
    result, endpoint = complete(body, logprobs=logprobs)
    if result.ok:
        assert isinstance(result.text, str) and (result.finish_reason is None or isinstance(result.finish_reason, str))
        assert isinstance(result.prompt_tokens, int) and result.prompt_tokens >= 0
        assert isinstance(result.completion_tokens, int) and result.completion_tokens >= 0
        for top in result.top_logprobs:
            assert all(isinstance(t, str) and isinstance(lp, float) and lp <= 0 for t, lp in top.items())
    else:
        assert result.error.split(":")[0] in ("invalid_response", "refusal"), result.error
    assert endpoint.stats.retries == 0 and endpoint.stats.attempts == endpoint.stats.calls == 1


@PROPERTY
@given(body=BODIES, mode=st.sampled_from(MODES))
def test_the_judge_never_raises_whatever_the_body(body, mode):
    judge = HTTPJudge(endpoint_for(serving(body)), mode)
    [verdicts] = asyncio.run(judge.judge([JudgeRequest(CONV, REPLY, (ASKS, BLAMES))]))
    assert len(verdicts) == 2 and all(isinstance(v, Verdict) for v in verdicts)
    for v in verdicts:
        assert v.status is not Status.ERROR or v.reason


# -- the parsers of the judge's JSON answers ---------------------------------------------------------

_ITEM = st.fixed_dictionaries({}, optional={"id": st.sampled_from(["asks", "blames"]) | JSON,
                                            "met": st.booleans() | JSON, "evidence": JSON})
ANSWER_VALUES = JSON | st.fixed_dictionaries({}, optional={
    "criteria_met": st.booleans() | JSON, "explanation": JSON,
    "rating": st.integers(0, 11) | st.floats() | st.sampled_from([math.nan, math.inf, -math.inf]) | JSON,
    "verdicts": st.lists(_ITEM | JSON, max_size=3) | JSON})


@PROPERTY
@given(value=ANSWER_VALUES)
def test_answer_parsers_never_raise(value):
    for text in (json.dumps(value), f"```json\n{json.dumps(value)}\n```", f"Answer: {json.dumps(value)} done"):
        single = prompts.parse_single(text)
        assert single is None or (isinstance(single[0], bool) and isinstance(single[1], str))
        batch = prompts.parse_batch(text, ["asks", "blames"])
        assert set(batch) <= {"asks", "blames"}
        assert all(isinstance(met, bool) and isinstance(ev, str) for met, ev in batch.values())
        rating = prompts.parse_rating(text)
        assert rating is None or (type(rating) is int and 1 <= rating <= 10)


@pytest.mark.parametrize("text", ['{"rating": NaN}', '{"rating": Infinity}', '{"rating": -Infinity}',
                                  '{"rating": 1e999}', "[" * 100_000 + "]" * 100_000,
                                  '{"rating": ' + "[" * 100_000 + "]" * 100_000 + "}"])
def test_answer_parsers_refuse_non_finite_and_absurdly_nested_json(text):
    assert prompts.parse_rating(text) is None
    assert prompts.parse_single(text) is None
    assert prompts.parse_batch(text, ["asks"]) == {}


@pytest.mark.parametrize("text, expected", [('[{"criteria_met": true}]', None),
                                            ('{"criteria_met": "true"}', None),
                                            ('{"criteria_met": 1}', None),
                                            ('{"criteria_met": true, "explanation": ["a"]}', (True, "['a']"))])
def test_single_answers_of_the_wrong_shape(text, expected):
    """A guard (these passed before too): a list instead of an object, or a field of the wrong type."""
    assert prompts.parse_single(text) == expected


# -- the timeout bounds the whole attempt ------------------------------------------------------------

class TrickleServer:
    """A loopback HTTP server that answers every request with the headers of a 200 at once, then the
    body one byte every `interval` seconds."""

    def __init__(self, body: bytes, interval: float):
        self.body, self.interval = body, interval
        self.stopping = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.sent: list[int] = []  # body bytes sent per connection
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with conn:
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.recv(65536)
            if not chunk:
                return
            request += chunk
        head, _, rest = request.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(rest) < length:
            rest += conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(self.body))
        self.sent.append(0)
        for i in range(len(self.body)):
            if self.interval and self.stopping.wait(self.interval):
                return
            try:
                conn.sendall(self.body[i:i + 1])
            except OSError:  # the client gave up
                return
            self.sent[-1] += 1

    def close(self) -> None:
        self.stopping.set()
        self.sock.close()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.fixture
def trickle():
    servers = []

    def start(interval: float) -> TrickleServer:
        servers.append(TrickleServer(json.dumps(completion()).encode(), interval))
        return servers[-1]
    yield start
    for server in servers:
        server.close()


def test_timeout_bounds_a_body_trickled_byte_by_byte(trickle):
    server = trickle(0.2)  # ~200 bytes at 5 bytes/s: the whole body would take ~40 s
    endpoint = ChatEndpoint(EndpointConfig(base_url=server.url, timeout=1, max_retries=0))
    result = asyncio.run(endpoint.complete(MESSAGES))
    assert result.error is not None and result.error.split(":")[0] == "timeout", result
    assert endpoint.stats.errors == {"timeout": 1}
    assert server.sent and server.sent[0] < len(server.body)  # it gave up before the body was complete


def test_the_trickle_server_answers_a_valid_completion_when_fast(trickle):
    """The control for the test above: the same body sent at once is a successful call."""
    server = trickle(0)
    endpoint = ChatEndpoint(EndpointConfig(base_url=server.url, timeout=30, max_retries=0))
    result = asyncio.run(endpoint.complete(MESSAGES))
    assert result.ok and result.text == SINGLE_YES and result.prompt_tokens == 100


# -- retries count re-attempts only ---------------------------------------------------------------

def failing(seen) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503, text="down")
    return httpx.MockTransport(handler)


def test_the_open_breaker_makes_no_attempt_and_no_negative_retries():
    seen = []
    endpoint = endpoint_for(failing(seen), max_retries=0, breaker_failures=2, breaker_cooldown=600)
    results = [asyncio.run(endpoint.complete(MESSAGES)) for _ in range(5)]
    assert [r.error.split(":")[0] for r in results] == ["http_503"] * 2 + ["circuit_open"] * 3
    # by hand: 5 calls; the first two send one request each, the other three are failed fast
    assert endpoint.stats.calls == 5 and endpoint.stats.attempts == 2 and len(seen) == 2
    assert endpoint.stats.retries == 0
    assert [r.attempts for r in results] == [1, 1, 0, 0, 0]


def test_retries_are_the_re_attempts_of_calls_that_were_made():
    seen = []
    endpoint = endpoint_for(failing(seen), max_retries=2, breaker_failures=2, breaker_cooldown=600)
    judge = HTTPJudge(endpoint)
    [verdicts] = asyncio.run(judge.judge([JudgeRequest(CONV, REPLY, (ASKS,))] * 1))
    for _ in range(3):
        asyncio.run(judge.judge([JudgeRequest(CONV, REPLY, (ASKS,))]))
    # by hand: calls 1 and 2 make 3 attempts each (2 retries each) and open the breaker; calls 3 and 4 make none
    assert endpoint.stats.calls == 4 and endpoint.stats.attempts == 6 and len(seen) == 6
    assert endpoint.stats.retries == 4 and judge.stats.retries == 4 and judge.stats.model_calls == 4
    assert endpoint.stats.errors == {"http_503": 2, "circuit_open": 2}
