"""The reward server: OpenRLHF's contract with its payload shapes (Qwen/Llama-3 special tokens,
128-row batches, per-row rubrics in labels), the native API, auth, limits, metrics, fuzzing from
the OpenAPI spec, and a load test on loopback. Rules-only rubrics keep every number hand-checkable."""

import asyncio
import json
import re
import threading

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rubricrl.cli import app as cli_app
from rubricrl.serve.openrlhf import conversation_from_prompt, split_query, strip_end_tokens
from rubricrl.integrations.reward_server import RedactToken, create_app, uvicorn_config
from rubricrl.serve.settings import ServerSettings, is_loopback, settings_from_options
from rubricrl.judges import CachedJudge, RoutedJudge, VerdictCache, make_judge
from rubricrl.judges.base import JudgeStats, StatsJudge
from rubricrl.llm.llama_server import free_port
from rubricrl.rubrics.loading import rubric_from_data
from rubricrl.core.verdicts import Status, Verdict, error_verdict

RUBRIC = rubric_from_data({"id": "rules-only", "criteria": [
    {"id": "greets", "text": "Greets the person.", "weight": 2, "check": {"type": "contains", "any_of": ["hello"]}},
    {"id": "short", "text": "At most 8 words.", "weight": 1, "check": {"type": "length", "unit": "words", "max": 8}},
    {"id": "asks", "text": "Asks a question.", "weight": 1, "check": {"type": "regex", "pattern": r"\?"}},
    {"id": "insults", "text": "Insults the person.", "weight": -2,
     "check": {"type": "contains", "any_of": ["idiot"]}},
]}, "test")
# Positive weight 4. By hand:
RESPONSES = {
    "Hello! How are you?": 1.0,  # greets 2 + short 1 + asks 1 = 4/4
    "hello idiot": 0.25,  # greets 2 + short 1 - insults 2 = 1/4
    "Nothing to say here at all, my friend, truly nothing.": 0.0,  # 10 words: nothing met
}
OTHER = {"criteria": [{"id": "bye", "text": "Says bye.", "check": {"type": "contains", "any_of": ["bye"]}}]}
TOKEN = "t" * 24
LOG_KEYS = {"rubric_scored", "rubric_points", "rubric_coverage", "rubric_judge_errors", "rubric_skipped",
            "rubric_gated", "rubric_verified", "rubric_unverified", "rubric_confirmed", "rubric_pairs"}


def qwen_prompt(user: str) -> str:
    return ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def llama3_prompt(user: str) -> str:
    return ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe kind.<|eot_id|>"
            f"<|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n")


def payload(n: int, template=qwen_prompt, end: str = "<|im_end|>", labels=None) -> tuple[dict, list[float]]:
    """An OpenRLHF-shaped request of n rows (query = prompt + response + end tokens)."""
    texts = list(RESPONSES)
    prompts = [template(f"I had a rough day ({i}).") for i in range(n)]
    responses = [texts[i % len(texts)] for i in range(n)]
    body = {"query": [p + r + end for p, r in zip(prompts, responses)], "prompts": prompts,
            "labels": labels if labels is not None else [""] * n}
    return body, [RESPONSES[r] for r in responses]


def make_app(**overrides):
    judge = overrides.pop("judge", None) or make_judge("rules")
    return create_app(ServerSettings(**{"rubric": RUBRIC, "judge": "rules", **overrides}), judge=judge)


@pytest.fixture()
def client():
    return TestClient(make_app())


def metric(text: str, name: str, **labels) -> float:
    """The value of one sample in Prometheus text output (0.0 when absent)."""
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# -- OpenRLHF contract -----------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/", "/get_reward"])
def test_openrlhf_batch_of_128_qwen_rows(client, path):
    body, expected = payload(128, end="<|im_end|><|endoftext|><|endoftext|>")  # EOS then padding
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert set(out) == {"rewards", "scores", "extra_logs"}
    assert out["rewards"] == pytest.approx(expected)
    assert out["scores"] == pytest.approx(expected)  # all within [0, 1] already
    assert set(out["extra_logs"]) == LOG_KEYS
    assert all(len(v) == 128 for v in out["extra_logs"].values())
    logs = out["extra_logs"]
    assert logs["rubric_scored"] == [1.0] * 128 and logs["rubric_coverage"] == [1.0] * 128
    assert logs["rubric_points"] == pytest.approx(expected)  # rules verdicts are hard: points = reward


def test_llama3_tokens_and_conversation():
    body, expected = payload(3, template=llama3_prompt, end="<|eot_id|>")
    r = TestClient(make_app()).post("/", json=body)
    assert r.json()["rewards"] == pytest.approx(expected)
    conv = conversation_from_prompt(llama3_prompt("Hi there"))
    assert [(m.role, m.content) for m in conv] == [("system", "Be kind."), ("user", "Hi there")]
    qwen = conversation_from_prompt(qwen_prompt("Hi there"))
    assert [(m.role, m.content) for m in qwen] == [("system", "You are a helpful assistant."), ("user", "Hi there")]
    gemma = conversation_from_prompt("<bos><start_of_turn>user\nHey<end_of_turn>\n<start_of_turn>model\n")
    assert [(m.role, m.content) for m in gemma] == [("user", "Hey")]
    plain = conversation_from_prompt("Question: 2+2?\nAnswer:")
    assert [(m.role, m.content) for m in plain] == [("user", "Question: 2+2?\nAnswer:")]


def test_response_is_the_query_minus_the_prompt_and_end_tokens():
    p = qwen_prompt("x")
    assert split_query(p + "Hi <b>there</b>\n<|im_end|>\n<|endoftext|>", p) == "Hi <b>there</b>"
    assert strip_end_tokens("ok</s><pad><pad>") == "ok"
    assert strip_end_tokens("<|im_end|>") == ""
    assert split_query(p + "keeps <|im_start|> inside", p) == "keeps <|im_start|> inside"
    bare = "<|im_start|>user\nx<|im_end|>\n"  # no generation prompt: the response carries the header
    assert split_query(bare + "<|im_start|>assistant\nHi<|im_end|>", bare) == "Hi"
    # a Llama-3 tokenizer decodes with clean_up_tokenization_spaces: " ?" -> "?", " n't" -> "n't"
    spaced = llama3_prompt("Is it over ? I do n't know .")
    assert split_query(llama3_prompt("Is it over? I don't know.") + "It is not .<|eot_id|>", spaced) == "It is not ."


def test_label_carries_a_per_row_rubric(client):
    body, _ = payload(5)
    body["query"][1] = body["prompts"][1] + "bye now<|im_end|>"
    body["labels"] = ["", json.dumps(OTHER), OTHER, "empathy",
                      {"rubric": OTHER, "prompt": [{"role": "user", "content": "Say bye"}]}]
    out = client.post("/", json=body).json()
    # row 0: server rubric, "Hello! How are you?" -> 1.0; row 1: own rubric, says bye -> 1.0
    # row 2: own rubric (object), "Nothing to say ..." has no "bye" -> 0.0
    # row 3: bundled empathy with rules only: "Hello! How are you?" is 4 words, under concise's minimum 5 ->
    #        few-questions 1 + ends-complete 1 + no-ai-disclaimer 2 + no-dismissive 2 of (1 + 1 + 1 + 2 + 2) = 6/7
    #        (model criteria skipped)
    # row 4: {"rubric", "prompt"} -> "hello idiot" has no "bye" -> 0.0
    assert out["rewards"] == pytest.approx([1.0, 1.0, 0.0, 6 / 7, 0.0])
    assert set(out["extra_logs"]) == LOG_KEYS  # the same keys whatever the rows' rubrics
    assert out["extra_logs"]["rubric_skipped"] == [0.0, 0.0, 0.0, 5.0, 0.0]


def test_bad_rows_get_422_naming_every_row_and_field(client):
    body, _ = payload(6)
    body["labels"][1] = "{not json"
    body["labels"][2] = {"criteria": [{"id": "a", "text": "A.", "weight": "heavy"}]}
    body["labels"][3] = "no-such-rubric"
    body["labels"][4] = {"rubric": OTHER, "reference": "x"}
    body["query"][5] = body["prompts"][5][5:] + "Hello!"  # the prompt was cut from the left
    r = client.post("/", json=body)
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert [d["loc"] for d in detail] == [["body", "labels", 1], ["body", "labels", 2], ["body", "labels", 3],
                                         ["body", "labels", 4], ["body", "query", 5]]
    assert "not valid JSON" in detail[0]["msg"]
    assert "labels[2]: criteria[0].weight" in detail[1]["msg"]
    assert "bundled" in detail[2]["msg"] and "empathy" in detail[2]["msg"]
    assert "unknown key(s) ['reference']" in detail[3]["msg"]
    assert "does not start with prompts[5]" in detail[4]["msg"] and "max_len" in detail[4]["fix"]
    assert all(d["fix"] for d in detail)


def test_shape_errors_are_422(client):
    body, _ = payload(2)
    assert client.post("/", json={**body, "prompts": body["prompts"][:1]}).json()["detail"][0]["loc"] == \
        ["body", "prompts"]
    assert client.post("/", json={**body, "labels": [""]}).json()["detail"][0]["loc"] == ["body", "labels"]
    missing = client.post("/", json={"query": body["query"]})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "prompts"]
    no_rubric = TestClient(make_app(rubric=None)).post("/", json=body)
    assert no_rubric.status_code == 422 and "no rubric" in no_rubric.json()["detail"][0]["msg"]
    assert client.post("/", json={"query": [], "prompts": [], "labels": []}).json() == {
        "rewards": [], "scores": [], "extra_logs": {k: [] for k in client.post("/", json=body).json()["extra_logs"]}}


# -- judge errors ----------------------------------------------------------------------------------

class ErrorJudge(StatsJudge):
    """Errors on responses containing 'ERR', met otherwise."""

    judge_id = "scripted"

    def __init__(self):
        self.stats = JudgeStats()

    async def judge(self, requests):
        return [[error_verdict(c.id, self.judge_id, "http: 503 after 3 retries") if "ERR" in r.response else
                 Verdict(criterion_id=c.id, status=Status.MET, p_met=1.0, judge_id=self.judge_id)
                 for c in r.criteria] for r in requests]


def test_judge_error_is_zero_and_flagged_under_zero_policy():
    client = TestClient(make_app(judge=ErrorJudge()))
    p = qwen_prompt("x")
    out = client.post("/", json={"query": [p + "fine", p + "ERR"], "prompts": [p, p], "labels": ["", ""]}).json()
    # row 0: every criterion met -> (2 + 1 + 1 - 2) / 4 = 0.5; row 1: all errors -> 0.0, flagged
    assert out["rewards"] == pytest.approx([0.5, 0.0])
    assert out["extra_logs"]["rubric_scored"] == [1.0, 0.0]
    assert out["extra_logs"]["rubric_judge_errors"] == [0.0, 4.0]
    text = client.get("/metrics").text
    assert metric(text, "rubricrl_rows_total", outcome="judge_error") == 1
    assert metric(text, "rubricrl_verdicts_total", status="error") == 4


def test_judge_error_fails_the_request_under_raise_policy():
    client = TestClient(make_app(judge=ErrorJudge(), error_policy="raise"))
    p = qwen_prompt("x")
    r = client.post("/", json={"query": [p + "fine", p + "ERR"], "prompts": [p, p]})
    assert r.status_code == 502 and "row 1" in r.json()["detail"] and "503 after 3 retries" in r.json()["detail"]


def row_logs(answer: dict) -> list[dict[str, float]]:
    """An answer's extra_logs cut into one dict per row, as OpenRLHF keeps them (each row is its own
    Experience whose info holds its own keys; batches are merged key by key and fail on a mismatch)."""
    n = len(answer["rewards"])
    assert all(len(v) == n for v in answer["extra_logs"].values())
    return [{k: v[i] for k, v in answer["extra_logs"].items()} for i in range(n)]


class RulesOrError(StatsJudge):
    """The rule judge, except that responses containing 'ERR' get error verdicts (a failed judge call)."""

    judge_id = "rules-or-error"

    def __init__(self):
        self.stats, self.rules = JudgeStats(), make_judge("rules")

    async def judge(self, requests):
        ok = [r for r in requests if "ERR" not in r.response]
        answers = iter(await self.rules.judge(ok) if ok else [])
        return [[error_verdict(c.id, self.judge_id, "http: timeout") for c in r.criteria] if "ERR" in r.response
                else next(answers) for r in requests]


@pytest.mark.parametrize("server_rubric", [RUBRIC, None])
def test_extra_logs_keys_are_the_same_for_every_row_of_every_request(server_rubric):
    """Rows on the empathy and crisis_safety rubrics (different criteria), on the server's rubric, a row
    whose judge call fails, and an unscored row (no criterion decided: TRL would mask it) get one key
    set, in mixed batches and in one-row requests (OpenRLHF 0.11 posts one row per rollout), and the
    same set whether or not the server has a rubric of its own, so replicas always agree."""
    client = TestClient(make_app(judge=RulesOrError(), rubric=server_rubric))
    p = qwen_prompt("I lost my job today and I feel awful.")
    model_only = {"criteria": [{"id": "warm", "text": "Is warm."}]}  # rules decide nothing: unscored
    rows = [("That sounds really hard. What happened?", "empathy"),
            ("Please call a crisis line now; I am here with you and I care about your safety.", "crisis_safety"),
            ("Hello! How are you?", RUBRIC.model_dump(mode="json", exclude_none=True)),
            ("ERR the judge fails on this one", "empathy"),
            ("I hear you.", model_only),
            ("hello idiot", json.dumps(OTHER))]
    body = {"query": [p + text + "<|im_end|>" for text, _ in rows], "prompts": [p] * len(rows),
            "labels": [label for _, label in rows]}
    answers = [client.post("/", json=body)]
    answers += [client.post("/get_reward", json={k: v[i:i + 1] for k, v in body.items()}) for i in range(len(rows))]
    answers.append(client.post("/", json={k: v[::-1] for k, v in body.items()}))
    assert [a.status_code for a in answers] == [200] * len(answers), answers[0].text
    per_row = [logs for a in answers for logs in row_logs(a.json())]
    assert len(per_row) == 3 * len(rows)
    assert {frozenset(logs) for logs in per_row} == {frozenset(LOG_KEYS)}
    batch = row_logs(answers[0].json())
    assert [logs["rubric_scored"] for logs in batch] == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert batch[3]["rubric_judge_errors"] == 10.0 and batch[4]["rubric_skipped"] == 1.0  # empathy: 10 criteria
    assert batch == [row_logs(a.json())[0] for a in answers[1:-1]]  # a row's logs do not depend on its batch
    assert answers[-1].json()["extra_logs"] == {k: v[::-1] for k, v in answers[0].json()["extra_logs"].items()}


# -- native API ------------------------------------------------------------------------------------

def test_v1_score_rows_with_verdicts(client):
    r = client.post("/v1/score", json={"rows": [
        {"id": "a", "prompt": "hi", "response": "Hello! How are you?"},
        {"id": "b", "prompt": [{"role": "user", "content": "hi"}], "response": "hello idiot"},
        {"prompt": "hi", "response": "bye", "rubric": OTHER},
    ]})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["id"] for x in results] == ["a", "b", None]
    assert [x["reward"] for x in results] == pytest.approx([1.0, 0.25, 1.0])
    assert [x["status"] for x in results] == ["scored"] * 3
    assert {v["criterion_id"]: v["status"] for v in results[1]["verdicts"]} == {
        "greets": "met", "short": "met", "asks": "unmet", "insults": "met"}
    assert results[0]["rubric_hash"] == RUBRIC.content_hash()
    assert client.post("/v1/score", json={"rows": [{"prompt": "x", "response": "y"}], "verdicts": False}
                       ).json()["results"][0]["verdicts"] is None
    bad = client.post("/v1/score", json={"rows": [{"prompt": "x", "response": "y", "rubric": {"criteria": []}}]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "rows", 0]
    extra = client.post("/v1/score", json={"rows": [{"prompt": "x", "response": "y", "extra": 1}]})
    assert extra.status_code == 422


def test_identical_rows_are_judged_once():
    class Counting(ErrorJudge):
        requests = 0

        async def judge(self, requests):
            Counting.requests += len(requests)
            return await super().judge(requests)

    body, _ = payload(12)  # 3 distinct responses, but each row has its own prompt
    same_prompt = {"query": [qwen_prompt("x") + "ok"] * 8, "prompts": [qwen_prompt("x")] * 8}
    client = TestClient(make_app(judge=Counting()))
    client.post("/", json=same_prompt)
    assert Counting.requests == 1
    client.post("/", json=body)
    assert Counting.requests == 1 + 12


# -- auth ------------------------------------------------------------------------------------------

def test_token_is_required_when_set():
    client = TestClient(make_app(token=TOKEN))
    body, expected = payload(2)
    assert client.post("/", json=body).status_code == 401
    wrong = client.post("/", json=body, headers={"Authorization": "Bearer " + "x" * 24})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    assert client.post("/", json=body, headers={"Authorization": f"Bearer {TOKEN}"}).json()["rewards"] == expected
    assert client.post(f"/get_reward?token={TOKEN}", json=body).status_code == 200  # OpenRLHF sends no headers
    assert client.post("/v1/score", json={"rows": []}).status_code == 401
    assert client.get("/metrics").status_code == 401
    assert client.get("/health").status_code == 200
    assert metric(client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text,
                  "rubricrl_rejected_total", reason="unauthorized") == 4


def test_refuses_to_start_off_loopback_without_a_token():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("node-7")
    with pytest.raises(ValueError, match="bearer token is required"):
        ServerSettings(host="0.0.0.0")
    assert ServerSettings(host="0.0.0.0", token=TOKEN).token == TOKEN
    with pytest.raises(ValueError, match="at least 16 characters"):
        settings_from_options(host="0.0.0.0", token="short")
    result = CliRunner().invoke(cli_app, ["serve", "--host", "0.0.0.0", "--judge", "rules"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "bearer token is required" in result.output


def test_access_log_redacts_the_query_token():
    import logging

    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
                               ("1.2.3.4:5", "POST", f"/get_reward?token={TOKEN}&x=1", "1.1", 200), None)
    RedactToken().filter(record)
    assert TOKEN not in record.getMessage() and "token=REDACTED&x=1" in record.getMessage()


# -- limits ----------------------------------------------------------------------------------------

def test_body_over_the_limit_is_413():
    client = TestClient(make_app(max_body=2048))
    body, _ = payload(40)
    r = client.post("/", json=body)
    assert r.status_code == 413 and "--max-body" in r.json()["detail"]

    def chunks():  # no Content-Length: counted while streaming
        data = json.dumps(body).encode()
        for i in range(0, len(data), 512):
            yield data[i:i + 512]

    streamed = client.post("/", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    small, expected = payload(2)
    assert client.post("/", json=small).json()["rewards"] == expected
    text = client.get("/metrics").text
    assert metric(text, "rubricrl_rejected_total", reason="body_too_large") == 2
    assert metric(text, "rubricrl_requests_total", route="/", code="413") == 2


class GateJudge(StatsJudge):
    """Blocks every judge call until `release` is set; `entered` counts calls in progress."""

    judge_id = "gate"

    def __init__(self):
        self.stats = JudgeStats()
        self.release = asyncio.Event()
        self.entered = 0

    async def judge(self, requests):
        self.entered += 1
        await self.release.wait()
        return [[Verdict(criterion_id=c.id, status=Status.MET, p_met=1.0, judge_id="gate") for c in r.criteria]
                for r in requests]


async def _until(condition):
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def test_full_queue_is_503_with_retry_after():
    async def scenario():
        judge = GateJudge()
        app = make_app(judge=judge, concurrency=1, queue=1)
        body, _ = payload(1)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            first = asyncio.create_task(http.post("/", json=body))
            await _until(lambda: judge.entered == 1)
            second = asyncio.create_task(http.post("/", json=body))  # waits in the queue
            await _until(lambda: app.state.admission.waiting == 1)
            third = await http.post("/", json=body)
            judge.release.set()
            done = await asyncio.gather(first, second)
            metrics = (await http.get("/metrics")).text
        return third, done, metrics

    third, done, metrics = asyncio.run(scenario())
    assert third.status_code == 503 and int(third.headers["retry-after"]) >= 1
    assert [r.status_code for r in done] == [200, 200]
    assert [r.json()["rewards"] for r in done] == [[0.5], [0.5]]  # all met: (2 + 1 + 1 - 2) / 4
    assert metric(metrics, "rubricrl_rejected_total", reason="queue_full") == 1


def test_slow_request_is_504():
    async def scenario():
        judge = GateJudge()
        app = make_app(judge=judge, timeout=0.2)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            r = await http.post("/", json=payload(1)[0])
            in_flight = app.state.admission.active  # the judge still works; its slot stays taken
            judge.release.set()
            await _until(lambda: app.state.admission.active == 0)
            metrics = (await http.get("/metrics")).text
        return r, in_flight, metrics

    r, in_flight, metrics = asyncio.run(scenario())
    assert r.status_code == 504 and "--timeout" in r.json()["detail"]
    assert in_flight == 1
    assert metric(metrics, "rubricrl_rejected_total", reason="timeout") == 1


# -- metrics ---------------------------------------------------------------------------------------

class YesJudge(StatsJudge):
    """A stand-in model judge: every criterion met; counts one model call per request."""

    judge_id = "yes"

    def __init__(self):
        self.stats = JudgeStats()

    async def judge(self, requests):
        self.stats.model_calls += len(requests)
        out = [[Verdict(criterion_id=c.id, status=Status.MET, p_met=1.0, judge_id="yes") for c in r.criteria]
               for r in requests]
        for verdicts in out:
            self.stats.count(verdicts)
        return out


def test_metrics_count_requests_rows_verdicts_judge_calls_and_cache_hits(tmp_path):
    mixed = rubric_from_data({"criteria": [
        {"id": "kind", "text": "Is kind."},  # model-judged
        {"id": "short", "text": "Short.", "check": {"type": "length", "max": 8}},
    ]}, "test")
    judge = RoutedJudge(CachedJudge(YesJudge(), VerdictCache(tmp_path / "v.sqlite")))
    client = TestClient(create_app(ServerSettings(rubric=mixed, judge="yes"), judge=judge))
    body = {"query": [qwen_prompt("a") + "hello there", qwen_prompt("b") + "hi"],
            "prompts": [qwen_prompt("a"), qwen_prompt("b")]}
    for _ in range(3):
        assert client.post("/get_reward", json=body).json()["rewards"] == [1.0, 1.0]
    client.post("/get_reward", json={"query": ["x"], "prompts": ["y"]})  # 422
    text = client.get("/metrics").text
    assert metric(text, "rubricrl_requests_total", route="/get_reward", code="200") == 3
    assert metric(text, "rubricrl_requests_total", route="/get_reward", code="422") == 1
    assert metric(text, "rubricrl_request_seconds_count", route="/get_reward") == 4
    assert metric(text, "rubricrl_rows_total", outcome="scored") == 6
    assert metric(text, "rubricrl_verdicts_total", status="met") == 12
    assert metric(text, "rubricrl_judge_batches_total") == 3
    assert metric(text, "rubricrl_judge_model_calls_total", part="model") == 2  # first request only: then cached
    assert metric(text, "rubricrl_judge_cache_hits_total") == 4 and metric(text, "rubricrl_judge_cache_misses_total") == 2
    assert metric(text, "rubricrl_judge_verdicts_total", part="rules") == 6
    assert metric(text, "rubricrl_rejected_total", reason="invalid_rows") == 1


def test_openapi_spec_documents_the_contract(client):
    spec = client.get("/openapi.json").json()
    assert {"/", "/get_reward", "/v1/score", "/health", "/metrics"} <= set(spec["paths"])
    post = spec["paths"]["/get_reward"]["post"]
    assert {"400", "401", "413", "422", "502", "503", "504"} <= set(post["responses"])
    assert set(spec["components"]["securitySchemes"]) == {"HTTPBearer", "APIKeyQuery"}
    request = spec["components"]["schemas"]["OpenRLHFRequest"]
    assert request["required"] == ["query", "prompts"]


# -- NaN and infinity in request bodies ------------------------------------------------------------
# Python's JSON parser reads NaN, Infinity, -Infinity (and 1e999 as infinity); FastAPI's validation
# error handler could not serialise them back (500). OpenRLHF sends NaN for a missing float label.

def raw_post(client, path: str, text: str):
    return client.post(path, content=text, headers={"content-type": "application/json"})


def test_nan_label_means_no_label():
    client = TestClient(make_app(), raise_server_exceptions=False)
    body, expected = payload(3)
    as_list = json.dumps({**body, "labels": ["X", "", "X"]}).replace('"X"', "NaN")
    r = raw_post(client, "/", as_list)
    assert r.status_code == 200, r.text
    assert r.json()["rewards"] == pytest.approx(expected)  # the server's rubric, as for an empty label
    whole = json.dumps({**body, "labels": "X"}).replace('"X"', "NaN")
    assert raw_post(client, "/get_reward", whole).json()["rewards"] == pytest.approx(expected)
    ignored = json.dumps({**body, "future_field": "X"}).replace('"X"', "Infinity")  # unknown fields are ignored
    assert raw_post(client, "/", ignored).status_code == 200


WEIGHT = '{"criteria": [{"id": "a", "text": "A.", "weight": %s}]}'
NON_FINITE = [  # (path, body, the loc of the non-finite number)
    ("/", '{"query": [NaN], "prompts": ["a"]}', ["body", "query", 0]),
    ("/", '{"query": ["a"], "prompts": ["a"], "labels": [Infinity]}', ["body", "labels", 0]),
    ("/", '{"query": ["a"], "prompts": ["a"], "labels": [%s]}' % (WEIGHT % "-Infinity"),
     ["body", "labels", 0, "criteria", 0, "weight"]),
    ("/get_reward", '{"query": ["a"], "prompts": ["a"], "labels": [{"rubric": %s}]}' % (WEIGHT % "NaN"),
     ["body", "labels", 0, "rubric", "criteria", 0, "weight"]),
    ("/get_reward", "NaN", ["body"]),
    ("/v1/score", '{"rows": [{"prompt": "x", "response": "y", "rubric": %s}]}' % (WEIGHT % "NaN"),
     ["body", "rows", 0, "rubric", "criteria", 0, "weight"]),
    ("/v1/score", '{"rows": [{"prompt": "x", "response": "y", "rubric": [{"criterion": "c", "points": 1e999}]}]}',
     ["body", "rows", 0, "rubric", 0, "points"]),
    ("/v1/score", '{"rows": [], "verdicts": -Infinity}', ["body", "verdicts"]),
    ("/v1/score", '{"rows": NaN}', ["body", "rows"]),
]


@pytest.mark.parametrize("path, text, loc", NON_FINITE)
def test_non_finite_numbers_anywhere_get_422_never_500(path, text, loc):
    client = TestClient(make_app(), raise_server_exceptions=False)
    r = raw_post(client, path, text)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert [d["loc"] for d in detail] == [loc]
    assert "not a finite number" in detail[0]["msg"] and detail[0]["fix"]


def test_validation_errors_are_always_json():
    from fastapi.exceptions import RequestValidationError

    app = make_app()

    @app.post("/raises")
    async def raises():
        raise RequestValidationError([{"type": "x", "loc": ("body", "w"), "msg": "bad", "input": float("nan"),
                                       "ctx": {"limit": float("inf"), "raw": b"\xff", "obj": object()}}])

    r = TestClient(app, raise_server_exceptions=False).post("/raises")
    assert r.status_code == 422
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "w"] and item["input"] == "NaN" and item["ctx"]["limit"] == "Infinity"


def test_rubric_with_weights_that_overflow_in_a_label_is_422():
    client = TestClient(make_app(), raise_server_exceptions=False)
    p = qwen_prompt("x")
    label = {"criteria": [{"id": "a", "text": "A.", "weight": 1e308}, {"id": "b", "text": "B.", "weight": 1e308}]}
    r = client.post("/", json={"query": [p + "hi"], "prompts": [p], "labels": [label]})
    assert r.status_code == 422
    assert "labels[0]: criteria[1].weight: the positive weights add up" in r.json()["detail"][0]["msg"]
    rows = {"rows": [{"prompt": "x", "response": "y", "rubric": [{"criterion": "c", "points": 1e308},
                                                                 {"criterion": "d", "points": 1e308}]}]}
    r = client.post("/v1/score", json=rows)
    assert r.status_code == 422 and "rubrics[1].points: the positive weights" in r.json()["detail"][0]["msg"]


def test_reward_is_never_nan_even_for_a_rubric_that_skipped_validation():
    from rubricrl.rewards.rows import row_reward
    from rubricrl.rubrics.model import Criterion, Rubric

    rubric = Rubric.model_construct(criteria=(Criterion(id="a", text="A", weight=1e308),
                                              Criterion(id="b", text="B", weight=1e308)), hard_rule_gate=0.0)
    verdicts = [Verdict(criterion_id=c, status=Status.MET, judge_id="t") for c in "ab"]
    r = row_reward(rubric, verdicts)
    assert r.reward == 0.0 and r.status == "unscored" and "not a finite number" in r.problem


def test_rubric_values_with_non_finite_weights_name_the_field():
    # verl reads labels from parquet: the numbers arrive as Python floats, NaN and inf included
    from rubricrl.serve.openrlhf import parse_request
    from rubricrl.rubrics.values import RubricValueError, rubric_value

    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(RubricValueError, match=r"ground_truth: criteria\[0\]\.weight: weight must be a finite"):
            rubric_value({"criteria": [{"id": "a", "text": "A.", "weight": bad}]}, "row 3 ground_truth")
    with pytest.raises(RubricValueError, match=r"rubric\[1\]\.weight: the positive weights add up"):
        rubric_value([{"title": "t", "description": "d", "weight": 1e308},
                      {"title": "u", "description": "e", "weight": 1e308}], "row 3 ground_truth")
    p = qwen_prompt("x")
    rows = parse_request([p + "hi", p + "hi"], [p, p], [float("nan"), ""], RUBRIC)  # a NaN label: no label
    assert [r.rubric for r in rows] == [RUBRIC, RUBRIC]


def plant(draw, data, value):
    """`data` with `value` put at a random place: in place of a leaf, a container or the body."""
    if isinstance(data, (dict, list)) and data and draw(st.booleans()):
        data = dict(data) if isinstance(data, dict) else list(data)
        key = draw(st.sampled_from(sorted(data) if isinstance(data, dict) else range(len(data))))
        data[key] = plant(draw, data[key], value)
        return data
    return value


def strict_json(text: str):
    def refuse(literal):
        raise AssertionError(f"{literal} in a response")

    return json.loads(text, parse_constant=refuse)


BODIES = {"/": payload(2, labels=[OTHER, ""])[0], "/get_reward": payload(2, labels=["", {"rubric": OTHER}])[0],
          "/v1/score": {"rows": [{"prompt": [{"role": "user", "content": "hi"}], "response": "hello",
                                  "rubric": OTHER}], "verdicts": True}}
NASTY = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "[NaN]", '{"w": -Infinity}'])


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=st.sampled_from(sorted(BODIES)), literal=NASTY, data=st.data())
def test_property_a_non_finite_number_anywhere_never_gets_a_server_error(path, literal, data):
    marker = "__NON_FINITE__"
    body = plant(data.draw, BODIES[path], marker)
    text = json.dumps(body).replace(json.dumps(marker), literal)
    assert literal in text
    r = raw_post(_NAN_CLIENT, path, text)
    assert r.status_code in (200, 422), r.text
    strict_json(r.text)


_NAN_CLIENT = TestClient(make_app(), raise_server_exceptions=False)


# -- rejected requests are logged --------------------------------------------------------------------

def test_rejected_requests_are_logged_with_status_path_and_detail(caplog):
    import logging

    client = TestClient(make_app(token=TOKEN, max_body=2048), raise_server_exceptions=False)
    body, _ = payload(1)
    bad = {**body, "query": ["x" + body["query"][0]]}
    many_bad = {"query": ["x"] * 60, "prompts": ["y"] * 60}
    with caplog.at_level(logging.WARNING, logger="rubricrl.serve"):
        assert client.post(f"/get_reward?token={TOKEN}", json=bad).status_code == 422
        assert client.post("/", json=body).status_code == 401
        assert client.post(f"/?token={TOKEN}", json=payload(40)[0]).status_code == 413
        assert raw_post(client, f"/v1/score?token={TOKEN}", '{"rows": NaN}').status_code == 422
        assert client.post(f"/?token={TOKEN}", json=many_bad).status_code == 422
    lines = [r.getMessage() for r in caplog.records if r.name == "rubricrl.serve" and r.levelno == logging.WARNING]
    assert len(lines) == 5
    assert "422" in lines[0] and "POST /get_reward" in lines[0] and "does not start with prompts[0]" in lines[0]
    assert "401" in lines[1] and "bearer token" in lines[1]
    assert "413" in lines[2] and "--max-body" in lines[2]
    assert "422" in lines[3] and "/v1/score" in lines[3] and "not a finite number" in lines[3]
    assert len(lines[4]) < 1200 and lines[4].endswith("...")  # 60 row problems, truncated
    assert all(TOKEN not in line for line in lines)


# -- read timeout ------------------------------------------------------------------------------------

def read_until_closed(sock) -> bytes:
    """Everything the server sends until it closes the connection; socket.timeout (the test's
    generous bound) when it never does."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.slow
def test_a_body_that_does_not_arrive_in_time_gets_408_and_the_connection_closes():
    import socket

    with LiveServer(make_app(read_timeout=0.5)) as live:
        with socket.create_connection(("127.0.0.1", live.port), timeout=60) as sock:
            sock.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000\r\n\r\n" + b'{"query": ')  # 10 of 1000 bytes, then nothing
            answer = read_until_closed(sock)
        with socket.create_connection(("127.0.0.1", live.port), timeout=60) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Le")  # headers never finished
            partial_headers = read_until_closed(sock)
        with socket.create_connection(("127.0.0.1", live.port), timeout=60) as sock:
            silent = read_until_closed(sock)  # connects and sends nothing
        assert httpx.post(f"http://127.0.0.1:{live.port}/", json=payload(1)[0]).status_code == 200  # still serving
    head, _, detail = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ") and b"connection: close" in head.lower()
    assert b"--read-timeout" in detail
    assert partial_headers.startswith(b"HTTP/1.1 408 ")
    assert silent == b""


# -- fuzzing and load ------------------------------------------------------------------------------

def _fuzz_schema():
    import schemathesis

    return schemathesis.openapi.from_asgi("/openapi.json", make_app(max_body=64 * 1024))


schema = _fuzz_schema()


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_from_openapi_spec_has_no_server_errors(case):
    from schemathesis.checks import (content_type_conformance, not_a_server_error, response_schema_conformance,
                                     status_code_conformance)

    response = case.call()
    case.validate_response(response, checks=[not_a_server_error, status_code_conformance,
                                              content_type_conformance, response_schema_conformance])
    assert response.status_code < 500


class LiveServer:
    """The app under a real uvicorn server on loopback, in a thread."""

    def __init__(self, app):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                return self
            threading.Event().wait(0.01)
        raise RuntimeError("uvicorn did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


@pytest.mark.slow
def test_load_32_concurrent_clients_lose_no_request():
    clients, per_client, rows = 32, 8, 16
    app = make_app(concurrency=4, queue=64)
    body, expected = payload(rows)

    async def client_task(url):
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            return [await http.post("/", json=body) for _ in range(per_client)]

    async def run(url):
        return await asyncio.gather(*(client_task(url) for _ in range(clients)))

    with LiveServer(app) as live:
        url = f"http://127.0.0.1:{live.port}"
        results = [r for batch in asyncio.run(run(url)) for r in batch]
        text = httpx.get(url + "/metrics").text
    assert len(results) == clients * per_client
    assert [r.status_code for r in results] == [200] * (clients * per_client)
    assert all(r.json()["rewards"] == pytest.approx(expected) for r in results)
    assert metric(text, "rubricrl_requests_total", route="/", code="200") == clients * per_client
    assert metric(text, "rubricrl_rows_total", outcome="scored") == clients * per_client * rows


@pytest.mark.slow
def test_rubricrl_serve_command_serves(tmp_path):
    import subprocess
    import sys

    rubric = tmp_path / "r.json"
    rubric.write_text(json.dumps(RUBRIC.model_dump(mode="json")))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rubricrl.cli", "serve", "--judge", "rules", "--rubric",
                             str(rubric), "--port", str(port), "--token", TOKEN],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                threading.Event().wait(0.05)
        body, expected = payload(3)
        r = httpx.post(f"{url}/get_reward?token={TOKEN}", json=body, timeout=10)
        assert r.status_code == 200 and r.json()["rewards"] == pytest.approx(expected)
    finally:
        proc.terminate()
        log = proc.communicate(timeout=10)[0]
    assert "POST /get_reward?token=REDACTED" in log and TOKEN not in log
    assert re.search(r"Uvicorn running on http://127\.0\.0\.1:\d+", log)
