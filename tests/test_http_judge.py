"""The HTTP judge against a real llama.cpp server on loopback, with a fault-injecting proxy in
front of it: retries stay within bounds, every failure is an `error` verdict with its reason (never
a silent unmet), counts add up, and the circuit breaker fails fast."""

import asyncio
import json

import httpx
import pytest
from fault_proxy import FaultProxy

from rubricrl.core.messages import as_conversation
from rubricrl.llm.endpoint import ChatEndpoint, EndpointConfig, logprob_yes, parse_endpoint_spec
from rubricrl.judges import JudgeRequest, JudgeSpecError, make_judge
from rubricrl.judges.http import HTTPJudge
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status

CONV = as_conversation([{"role": "user", "content": "I failed my driving test again and I feel stupid."}])
REPLY = "That sounds discouraging. Failing twice does not make you stupid. What felt hardest?"
ASKS = Criterion(id="asks", text="The reply asks the person a question.", weight=2)
BLAMES = Criterion(id="blames", text="The reply blames the person.", weight=-3)


@pytest.fixture(scope="module")
def proxy(llama_url):
    upstream = llama_url[: -len("/v1")]
    with FaultProxy(upstream) as p:
        yield p


def judge_for(proxy, mode="per_criterion", **settings):
    config = EndpointConfig(base_url=proxy.url + "/v1", backoff=0.01, backoff_max=0.5, **{"timeout": 120, **settings})
    return HTTPJudge(ChatEndpoint(config), mode)


def run(judge, criteria=(ASKS,), response=REPLY, n=1):
    return asyncio.run(judge.judge([JudgeRequest(CONV, response, tuple(criteria))] * n))


@pytest.mark.parametrize("mode", ["per_criterion", "batched", "logprob", "implicit"])
def test_every_mode_decides_through_the_real_server(proxy, mode):
    proxy.set_plan([])
    judge = judge_for(proxy, mode)
    [verdicts] = run(judge, (ASKS, BLAMES))
    assert [v.criterion_id for v in verdicts] == ["asks", "blames"]
    expected = {Status.MET, Status.UNMET} | ({Status.SKIPPED} if mode == "implicit" else set())
    assert {v.status for v in verdicts} <= expected
    assert judge.stats.errors == 0 and judge.stats.model_calls == (2 if mode in ("per_criterion", "logprob") else 1)
    assert judge.stats.tokens > 0
    if mode == "logprob":
        assert all(0 < v.p_met < 1 for v in verdicts)
    if mode == "implicit":  # the pitfall is folded into the holistic rating
        assert verdicts[1].status is Status.SKIPPED and verdicts[0].evidence.startswith("holistic rating")


@pytest.mark.parametrize("fault, reason", [
    ("500", "http_500"), ("503", "http_503"), ("garbage", "invalid_response"), ("drop", "connection"),
    ("truncated", "connection")])
def test_retryable_failures_are_retried_within_bounds_then_reported(proxy, fault, reason):
    proxy.set_plan([fault] * 3)
    judge = judge_for(proxy, max_retries=2)
    [[verdict]] = run(judge)
    assert verdict.status is Status.ERROR and verdict.reason.startswith(reason)
    assert len(proxy.log) == 3  # one call + exactly max_retries retries
    assert judge.endpoint.stats.attempts == 3 and judge.endpoint.stats.errors == {reason: 1}
    assert judge.stats.errors == 1 and judge.stats.error_reasons == {reason: 1}


def test_a_transient_failure_then_success_gives_a_real_verdict(proxy):
    proxy.set_plan(["500", "drop"])
    judge = judge_for(proxy, max_retries=3)
    [[verdict]] = run(judge)
    assert verdict.decided and judge.stats.retries == 2 and judge.stats.errors == 0
    assert [f.kind for f in proxy.log] == ["500", "drop", "ok"]


def test_retry_after_is_honoured(proxy):
    proxy.set_plan(["429:0.4"])
    judge = judge_for(proxy, max_retries=1)
    [[verdict]] = run(judge)
    assert verdict.decided
    first, second = proxy.log
    assert second.at - first.at >= 0.35  # waited for Retry-After, not the 0.01 s backoff


def test_timeout_is_an_error_verdict(proxy):
    proxy.set_plan(["delay:3", "delay:3"])
    judge = judge_for(proxy, timeout=0.5, max_retries=1)
    [[verdict]] = run(judge)
    assert verdict.status is Status.ERROR and verdict.reason.startswith("timeout")
    assert len(proxy.log) == 2


@pytest.mark.parametrize("fault, reason", [("refusal", "refusal"), ("badjson", "parse"), ("empty", "parse"),
                                           ("length", "length")])
def test_answers_that_cannot_be_used_are_not_retried_and_not_unmet(proxy, fault, reason):
    proxy.set_plan([fault])
    judge = judge_for(proxy, max_retries=3)
    [[verdict]] = run(judge)
    assert verdict.status is Status.ERROR and verdict.reason.startswith(reason), verdict.reason
    assert len(proxy.log) == 1  # a model's answer is not a transport failure: no retry
    assert judge.endpoint.stats.errors == {reason: 1}


def test_logprob_mode_without_logprobs_says_so(proxy):
    proxy.set_plan(["nologprobs"])
    judge = judge_for(proxy, "logprob")
    [[verdict]] = run(judge)
    assert verdict.status is Status.ERROR and verdict.reason.startswith("logprobs_unsupported")


def test_circuit_breaker_fails_fast_once_open(proxy):
    proxy.set_plan(["500"] * 10)
    judge = judge_for(proxy, max_retries=0, breaker_failures=2, breaker_cooldown=60, concurrency=1)
    verdicts = [run(judge)[0][0] for _ in range(4)]
    assert [v.reason.split(":")[0] for v in verdicts] == ["http_500", "http_500", "circuit_open", "circuit_open"]
    assert len(proxy.log) == 2  # the open circuit sent nothing


def test_empty_response_is_unmet_by_precheck_without_a_call(proxy):
    proxy.set_plan([])
    judge = judge_for(proxy)
    [[verdict]] = run(judge, response="  \n")
    assert verdict.status is Status.UNMET and verdict.reason.startswith("precheck") and proxy.log == []


def test_mixed_faults_across_a_batch_are_all_accounted_for(proxy):
    plan = ["ok", "500", "refusal", "badjson", "ok", "garbage", "ok", "drop"]
    proxy.set_plan(plan)
    judge = judge_for(proxy, max_retries=0, concurrency=1)
    answers = run(judge, (ASKS, BLAMES), n=4)  # 8 calls in order (concurrency 1)
    flat = [v for row in answers for v in row]
    errors = [v for v in flat if v.status is Status.ERROR]
    assert len(flat) == 8 and len(errors) == 5
    assert sorted(v.reason.split(":")[0] for v in errors) == sorted(
        ["http_500", "refusal", "parse", "invalid_response", "connection"])
    assert judge.stats.errors == 5 and sum(judge.stats.error_reasons.values()) == 5
    assert sum(judge.endpoint.stats.errors.values()) == 5
    assert all(v.decided for v in flat if v.status is not Status.ERROR)


# -- batched re-asks, schema fallback and token accounting with a scripted transport ------------------

def scripted(answers, seen):
    """An httpx transport answering chat completions with the given contents, in order."""
    answers = list(answers)

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        content = answers.pop(0)
        if isinstance(content, httpx.Response):
            return content
        return httpx.Response(200, json={"choices": [{"index": 0, "finish_reason": "stop",
                                                      "message": {"role": "assistant", "content": content}}],
                                         "usage": {"prompt_tokens": 100, "completion_tokens": 10}})
    return httpx.MockTransport(handler)


def test_batched_reasks_missing_duplicate_and_invalid_items_alone():
    c3 = Criterion(id="warm", text="The reply is warm.", weight=1)
    c4 = Criterion(id="short", text="The reply is short.", weight=1)
    batch = json.dumps({"verdicts": [
        {"id": "asks", "met": True, "evidence": "What felt hardest?"},
        {"id": "blames", "met": False, "evidence": ""}, {"id": "blames", "met": True, "evidence": ""},  # duplicate
        {"id": "warm", "met": "yes", "evidence": ""}]})  # invalid; `short` missing
    single = json.dumps({"explanation": "x", "criteria_met": True})
    seen = []
    endpoint = ChatEndpoint(EndpointConfig(base_url="http://judge.test/v1"),
                            transport=scripted([batch, single, single, single], seen))
    judge = HTTPJudge(endpoint, "batched")
    [verdicts] = asyncio.run(judge.judge([JudgeRequest(CONV, REPLY, (ASKS, BLAMES, c3, c4))]))
    assert [v.status for v in verdicts] == [Status.MET, Status.MET, Status.MET, Status.MET]
    assert verdicts[0].evidence == "What felt hardest?"
    assert judge.reasks == 3 and len(seen) == 4
    asked_alone = [json.loads(json.dumps(b))["messages"][1]["content"] for b in seen[1:]]
    for cid, text in (("blames", BLAMES.text), ("warm", c3.text), ("short", c4.text)):
        assert sum(text in m for m in asked_alone) == 1, cid
    assert endpoint.stats.prompt_tokens == 400 and endpoint.stats.completion_tokens == 40


def test_schema_refused_falls_back_to_plain_json_once():
    seen = []
    refused = httpx.Response(400, json={"error": {"message": "response_format not supported"}})
    ok = json.dumps({"explanation": "asks a question", "criteria_met": True})
    endpoint = ChatEndpoint(EndpointConfig(base_url="http://judge.test/v1"), transport=scripted([refused, ok, ok], seen))
    judge = HTTPJudge(endpoint, "per_criterion")
    run(judge)
    run(judge)
    assert "response_format" in seen[0] and "response_format" not in seen[1] and "response_format" not in seen[2]
    assert endpoint.schema_supported is False


def test_cost_and_retries_are_counted():
    seen = []
    ok = json.dumps({"explanation": "", "criteria_met": False})
    config = EndpointConfig(base_url="http://judge.test/v1", cost_per_1k_prompt=1.0, cost_per_1k_completion=2.0,
                            backoff=0, max_retries=2)
    endpoint = ChatEndpoint(config, transport=scripted([httpx.Response(500), ok], seen))
    judge = HTTPJudge(endpoint)
    [[verdict]] = run(judge)
    assert verdict.status is Status.UNMET and verdict.tokens == 110
    assert judge.stats.retries == 1 and judge.stats.cost == pytest.approx(0.1 + 0.02)


# -- specs and small pieces ---------------------------------------------------------------------------

def test_openai_spec_parses_endpoint_settings_and_mode(proxy):
    judge = make_judge(f"openai:{proxy.url}/v1?mode=batched&concurrency=3&timeout=7&model=m1", cache=False)
    inner = judge.model_judge
    assert inner.mode == "batched" and inner.endpoint.config.concurrency == 3
    assert inner.endpoint.config.timeout == 7 and inner.judge_id.startswith("http:m1/batched")


@pytest.mark.parametrize("spec, message", [
    ("openai:http://127.0.0.1:1/v1?mode=vote", "unknown mode 'vote'"),
    ("openai:http://127.0.0.1:1/v1?colour=red", "unknown key(s) ['colour']"),
    ("openai:http://127.0.0.1:1/v1?concurrency=0", "concurrency"),
    ("openai:127.0.0.1:1", "not an http(s) URL"),
    ("openai:http://127.0.0.1:1/v1?order=random", "unknown order 'random'"),
])
def test_bad_specs_are_refused_with_the_reason(spec, message):
    with pytest.raises(JudgeSpecError, match=None) as info:
        make_judge(spec, cache=False)
    assert message in str(info.value)


def test_chained_criteria_go_one_after_another_and_decide_the_same(proxy):
    """`chain` sends a response's criteria in sequence (each call starts after the previous one was
    answered, so llama.cpp can reuse the cached prefix); `spread` sends them together. The same verdicts,
    up to the server's float noise (a cached prefix or another batch shifts P(yes) by ~0.002 here)."""
    criteria = (ASKS, BLAMES, Criterion(id="warm", text="The reply is warm.", weight=1))
    answers = {}
    for order in ("spread", "chain"):
        proxy.set_plan(["delay:0.3"] * 3)
        config = EndpointConfig(base_url=proxy.url + "/v1", timeout=120, concurrency=8)
        [answers[order]] = asyncio.run(HTTPJudge(ChatEndpoint(config), "logprob", order=order).judge(
            [JudgeRequest(CONV, REPLY, criteria)]))
        arrivals = [f.at for f in proxy.log[-3:]]
        gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
        if order == "chain":  # the next request is only sent once the delayed answer came back
            assert min(gaps) >= 0.3
        else:  # all three were in flight before the first delayed answer could come back
            assert arrivals[-1] - arrivals[0] < 0.3
    assert [(v.criterion_id, v.status) for v in answers["chain"]] == [(v.criterion_id, v.status) for v in answers["spread"]]
    assert [v.p_met for v in answers["chain"]] == pytest.approx([v.p_met for v in answers["spread"]], abs=0.03)


def test_logprob_yes_normalises_over_yes_and_no_spellings():
    import math
    top = {"Yes": math.log(0.3), " yes": math.log(0.1), "No": math.log(0.2), "The": math.log(0.4)}
    assert logprob_yes(top) == pytest.approx(0.4 / 0.6)
    assert logprob_yes({"The": -0.1}) is None


def test_endpoint_spec_defaults_the_path():
    config, extra = parse_endpoint_spec("http://127.0.0.1:8000?mode=logprob")
    assert config.base_url == "http://127.0.0.1:8000/v1" and extra == {"mode": "logprob"}
