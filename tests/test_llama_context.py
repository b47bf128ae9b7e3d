"""The context size of `llamacpp` specs: `?context=N` (and `?parallel=N`) size the in-process server,
bad values are refused before any server starts, and a prompt that does not fit is a `too_long`
error naming the prompt length, the context and the fix. Unit tests script the server's
`/apply-template`, `/tokenize` and `/v1/chat/completions` with an httpx.MockTransport; one slow test
starts llama.cpp with a 256-token context."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from rubricrl.llm.endpoint import parse_endpoint_spec
from rubricrl.llm.llama_server import LlamaEndpoint, parse_llamacpp_spec, too_long_message

# ---------------------------------------------------------------- the spec


def test_context_and_parallel_size_the_server_and_the_rest_are_endpoint_keys():
    spec = parse_llamacpp_spec("?context=8192&timeout=600&mode=logprob&parallel=2")
    assert (spec.model, spec.context, spec.parallel) == (None, 8192, 2)
    assert spec.config.timeout == 600 and spec.extra == {"mode": "logprob"}
    spec = parse_llamacpp_spec("models/q.gguf?context=512")
    assert (spec.model, spec.context, spec.parallel, spec.extra) == ("models/q.gguf", 512, 4, {})
    spec = parse_llamacpp_spec("")
    assert (spec.model, spec.context, spec.parallel) == (None, 4096, 4)


@pytest.mark.parametrize("query, message", [
    ("context=abc", "llamacpp spec: context must be a whole number >= 256, got 'abc' (tokens per slot, e.g. "
                    "?context=8192)"),
    ("context=100", "llamacpp spec: context must be a whole number >= 256, got '100' (tokens per slot, e.g. "
                    "?context=8192)"),
    ("parallel=0", "llamacpp spec: parallel must be a whole number >= 1, got '0'"),
])
def test_bad_sizes_are_refused(query, message):
    with pytest.raises(ValueError) as caught:
        parse_llamacpp_spec("?" + query)
    assert str(caught.value) == message


def test_a_bad_endpoint_key_names_the_llamacpp_spec_not_a_placeholder_url():
    with pytest.raises(ValueError) as caught:
        parse_llamacpp_spec("?context=8192&timeout=-1")
    assert str(caught.value) == ("llamacpp spec 'llamacpp?context=8192&timeout=-1': timeout: Input should be greater "
                                 "than 0")


def test_chat_and_judge_specs_refuse_before_starting_a_server(monkeypatch):
    from rubricrl.judges import JudgeSpecError, make_judge
    from rubricrl.llm import llama_server
    from rubricrl.llm.chat import make_chat_model

    def no_server(*args, **kwargs):
        raise AssertionError("a server was started for a spec that is refused")

    monkeypatch.setattr(llama_server.LlamaServer, "start", no_server)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['contxt'\] in chat model spec 'llamacpp\?contxt=8192'"):
        make_chat_model("llamacpp?contxt=8192")
    with pytest.raises(ValueError, match="context must be a whole number >= 256, got 'big'"):
        make_chat_model("llamacpp?context=big")
    with pytest.raises(JudgeSpecError) as caught:
        make_judge("llamacpp?context=8192&colour=red", cache=False)
    assert "unknown key(s) ['colour']" in str(caught.value)
    assert "known: mode, order, context, parallel, model, api_key_env" in str(caught.value)
    with pytest.raises(JudgeSpecError, match="context must be a whole number >= 256, got '-5'"):
        make_judge("llamacpp?context=-5", cache=False)


def test_the_context_reaches_the_server_and_its_endpoint(monkeypatch):
    from rubricrl.llm import llama_server
    from rubricrl.llm.chat import make_chat_model

    started = []
    monkeypatch.setattr(llama_server.LlamaServer, "start", lambda self, wait=60.0: started.append(self) or self)
    chat = make_chat_model("llamacpp?context=8192&parallel=2&timeout=90")
    [server] = started
    assert (server.context, server.parallel) == (8192, 2)
    assert chat.endpoint.context == 8192 and chat.endpoint.config.timeout == 90
    assert chat.endpoint.config.base_url == server.url and chat.endpoint.root == server.base
    assert chat.name == "llamacpp:SmolLM2-135M-Instruct.Q4_1.gguf"


# ---------------------------------------------------------------- the length check


def test_too_long_message_by_hand():
    # 4313 + 160 = 4473 tokens needed; the next power of two is 8192
    assert too_long_message(4313, 160, 4096) == (
        "too_long: the prompt is 4313 tokens + up to 160 answer tokens, more than the llama.cpp context of 4096 "
        "tokens; raise the context with ?context=N in the llamacpp spec, e.g. llamacpp?context=8192")
    # the server's own refusal has no answer budget; never suggest less than twice the context
    assert too_long_message(300, 0, 256).endswith("more than the llama.cpp context of 256 tokens; raise the context "
                                                  "with ?context=N in the llamacpp spec, e.g. llamacpp?context=512")
    assert too_long_message(9000, 100, 4096).endswith("e.g. llamacpp?context=16384")


class ScriptedLlama:
    """A llama.cpp server's routes: the prompt is the messages' contents joined; one token per word."""

    def __init__(self, chat_status: int = 200, count: bool = True):
        self.chat_status, self.count = chat_status, count
        self.seen: list[str] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request.url.path)
        body = json.loads(request.content)
        if request.url.path == "/apply-template":
            if not self.count:
                return httpx.Response(404, text="not found")
            return httpx.Response(200, json={"prompt": " ".join(m["content"] for m in body["messages"])})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": list(range(len(body["content"].split())))})
        if self.chat_status == 400:
            return httpx.Response(400, json={"error": {
                "code": 400, "message": "request (319 tokens) exceeds the available context size (256 tokens), try "
                                        "increasing it", "type": "exceed_context_size_error",
                "n_prompt_tokens": 319, "n_ctx": 256}})
        return httpx.Response(200, json={"choices": [{"message": {"content": "fine"}, "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 7, "completion_tokens": 1}})

    def endpoint(self, context: int) -> LlamaEndpoint:
        config, _ = parse_endpoint_spec("http://127.0.0.1:9/v1?max_retries=0")
        return LlamaEndpoint(config, context=context, transport=httpx.MockTransport(self.handler))


SEVEN_WORDS = [{"role": "system", "content": "be kind"}, {"role": "user", "content": "I lost my job today"}]


def test_a_prompt_that_fits_is_sent():
    server = ScriptedLlama()
    endpoint = server.endpoint(context=17)  # 7 prompt tokens + 10 answer tokens = 17: fits exactly
    result = asyncio.run(endpoint.complete(SEVEN_WORDS, max_tokens=10))
    assert result.ok and result.text == "fine"
    assert server.seen == ["/apply-template", "/tokenize", "/v1/chat/completions"]
    assert asyncio.run(endpoint.prompt_tokens(SEVEN_WORDS)) == 7


def test_a_prompt_without_room_for_the_answer_is_refused_unsent():
    server = ScriptedLlama()
    endpoint = server.endpoint(context=16)  # 7 + 10 = 17 > 16
    result = asyncio.run(endpoint.complete(SEVEN_WORDS, max_tokens=10))
    assert result.error == ("too_long: the prompt is 7 tokens + up to 10 answer tokens, more than the llama.cpp "
                            "context of 16 tokens; raise the context with ?context=N in the llamacpp spec, e.g. "
                            "llamacpp?context=32")
    assert "/v1/chat/completions" not in server.seen
    assert endpoint.stats.calls == 1 and endpoint.stats.attempts == 0 and endpoint.stats.errors == {"too_long": 1}


def test_the_servers_own_refusal_gets_the_same_message_when_counting_fails():
    server = ScriptedLlama(chat_status=400, count=False)
    result = asyncio.run(server.endpoint(context=256).complete(SEVEN_WORDS, max_tokens=10))
    assert server.seen == ["/apply-template", "/v1/chat/completions"]  # counting failed: the call went ahead
    assert result.error == ("too_long: the prompt is 319 tokens, more than the llama.cpp context of 256 tokens; raise "
                            "the context with ?context=N in the llamacpp spec, e.g. llamacpp?context=512")


def test_a_judge_turns_too_long_into_an_error_verdict():
    from rubricrl.core.messages import as_conversation
    from rubricrl.judges.base import JudgeRequest
    from rubricrl.judges.http import HTTPJudge
    from rubricrl.rubrics.model import Criterion

    server = ScriptedLlama()
    judge = HTTPJudge(server.endpoint(context=8), "logprob")
    [[verdict]] = asyncio.run(judge.judge([JudgeRequest(as_conversation("I lost my job today"), "I am so sorry",
                                                        [Criterion(id="c", text="Acknowledges the loss.")])]))
    assert verdict.status == "error" and verdict.reason.startswith("too_long: the prompt is ")
    assert "more than the llama.cpp context of 8 tokens" in verdict.reason


# ---------------------------------------------------------------- a real llama.cpp server


@pytest.mark.slow
def test_real_server_context_and_prompt_count():
    from rubricrl.llm.chat import make_chat_model

    chat = make_chat_model("llamacpp?context=256&parallel=1&max_retries=0")
    endpoint = chat.endpoint
    props = httpx.get(endpoint.root + "/props", timeout=30).json()
    assert props["default_generation_settings"]["n_ctx"] == 256 and props["total_slots"] == 1
    short = [{"role": "user", "content": "Say hello."}]
    counted = asyncio.run(endpoint.prompt_tokens(short))
    result = asyncio.run(chat.chat(short, max_tokens=4))
    assert result.ok and result.prompt_tokens == counted  # the count is the server's own
    long = [{"role": "user", "content": "word " * 300}]
    refused = asyncio.run(chat.chat(long, max_tokens=16))
    n = asyncio.run(endpoint.prompt_tokens(long))
    assert n > 300 and refused.error == too_long_message(n, 16, 256)
    assert endpoint.stats.errors == {"too_long": 1}
