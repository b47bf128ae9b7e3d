"""Tests of the fault-injecting proxy (tests/fault_proxy.py) against a tiny fake upstream."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from fault_proxy import GARBAGE, KINDS, Fault, FaultProxy

CONTENT = '{"score": 4, "reason": "clear and correct answer"}'
COMPLETION = {
    "id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000, "model": "fake-judge",
    "choices": [{
        "index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": CONTENT},
        "logprobs": {"content": [{"token": "{", "logprob": -0.01, "bytes": [123], "top_logprobs": []}]},
    }],
    "usage": {"prompt_tokens": 12, "completion_tokens": 20, "total_tokens": 32},
}
REQUEST = {"model": "fake-judge", "messages": [{"role": "user", "content": "grade this"}]}


class _Upstream(BaseHTTPRequestHandler):
    chat_requests: list[dict] = []  # bodies received on /v1/chat/completions

    def _send(self, status: int, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/v1/chat/completions":
            _Upstream.chat_requests.append(json.loads(body))
            self._send(200, COMPLETION)
        else:
            self._send(404, {"error": {"message": "not found"}})

    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture(scope="module")
def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def module_proxy(upstream):
    with FaultProxy(upstream) as proxy:
        yield proxy


@pytest.fixture
def proxy(module_proxy):
    module_proxy.set_plan([])
    _Upstream.chat_requests.clear()
    return module_proxy


@pytest.fixture
def client():
    with httpx.Client(timeout=5.0, trust_env=False) as c:
        yield c


def chat(client: httpx.Client, proxy: FaultProxy) -> httpx.Response:
    return client.post(f"{proxy.url}/v1/chat/completions", json=REQUEST)


def test_ok_forwards_unchanged(proxy, client):
    assert proxy.url.startswith("http://127.0.0.1:")
    r = chat(client, proxy)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.headers["connection"] == "close"
    assert r.json() == COMPLETION
    assert _Upstream.chat_requests == [REQUEST]
    assert [(f.kind, f.path) for f in proxy.log] == [("ok", "/v1/chat/completions")]


def test_non_chat_paths_forwarded_not_logged_not_faulted(proxy, client):
    proxy.set_plan(["500"])
    r = client.get(f"{proxy.url}/health")
    assert (r.status_code, r.json()) == (200, {"status": "ok"})
    assert client.get(f"{proxy.url}/v1/models").status_code == 404  # upstream's own status
    assert proxy.log == [] and proxy.plan == ["500"]
    assert chat(client, proxy).status_code == 500  # the fault was still waiting for the chat call


@pytest.mark.parametrize("status", [500, 503])
def test_server_errors_not_forwarded(proxy, client, status):
    proxy.set_plan([str(status)])
    r = chat(client, proxy)
    assert r.status_code == status
    assert "error" in r.json()
    assert _Upstream.chat_requests == []


def test_429_with_retry_after(proxy, client):
    proxy.set_plan(["429:2.5"])
    r = chat(client, proxy)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "2.5"
    assert r.json() == {"error": {"message": "rate limited", "type": "rate_limit"}}
    assert _Upstream.chat_requests == []


def test_truncated_body(proxy, client):
    proxy.set_plan(["truncated"])
    full = len(json.dumps(COMPLETION).encode())
    try:
        with client.stream("POST", f"{proxy.url}/v1/chat/completions", json=REQUEST) as r:
            assert r.status_code == 200
            assert int(r.headers["content-length"]) == full
            received = b"".join(r.iter_raw())
    except (httpx.RemoteProtocolError, httpx.ReadError):
        return
    assert len(received) < full  # no error raised: then the body must at least be short


def test_truncated_raises_for_plain_client(proxy, client):
    proxy.set_plan(["truncated"])
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        chat(client, proxy)
    assert len(_Upstream.chat_requests) == 1  # truncated forwards first


def test_garbage_is_not_json(proxy, client):
    proxy.set_plan(["garbage"])
    r = chat(client, proxy)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.content == GARBAGE
    with pytest.raises(ValueError):
        r.json()


def test_drop_closes_without_response(proxy, client):
    proxy.set_plan(["drop"])
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        chat(client, proxy)
    assert [f.kind for f in proxy.log] == ["drop"]
    assert _Upstream.chat_requests == []
    assert chat(client, proxy).status_code == 200  # proxy still serves afterwards


def test_refusal(proxy, client):
    proxy.set_plan(["refusal"])
    r = chat(client, proxy)
    assert r.status_code == 200
    data = r.json()
    assert data["object"] == "chat.completion"
    choice = data["choices"][0]
    assert choice["finish_reason"] == "content_filter"
    assert choice["message"] == {"role": "assistant", "content": "", "refusal": "I can't help with that."}
    assert set(data["usage"]) >= {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert _Upstream.chat_requests == []


def test_length_cuts_content(proxy, client):
    proxy.set_plan(["length"])
    choice = chat(client, proxy).json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == CONTENT[: len(CONTENT) // 2]
    assert len(_Upstream.chat_requests) == 1


def test_badjson_content(proxy, client):
    proxy.set_plan(["badjson"])
    choice = chat(client, proxy).json()["choices"][0]
    assert choice["message"]["content"] == "not json {"
    assert choice["finish_reason"] == "stop"
    assert "logprobs" in choice


def test_empty_content(proxy, client):
    proxy.set_plan(["empty"])
    data = chat(client, proxy).json()
    assert data["choices"][0]["message"]["content"] == ""
    assert data["usage"] == COMPLETION["usage"]


def test_nologprobs(proxy, client):
    proxy.set_plan(["nologprobs"])
    choice = chat(client, proxy).json()["choices"][0]
    assert "logprobs" not in choice
    assert choice["message"]["content"] == CONTENT


def test_delay(proxy, client):
    proxy.set_plan(["delay:0.3"])
    t0 = time.monotonic()
    r = chat(client, proxy)
    assert time.monotonic() - t0 >= 0.3 * 0.9
    assert r.json() == COMPLETION


def test_delay_survives_client_giving_up(proxy):
    proxy.set_plan(["delay:0.3", "ok"])
    with httpx.Client(timeout=0.05, trust_env=False) as impatient:
        with pytest.raises(httpx.ReadTimeout):
            chat(impatient, proxy)
    time.sleep(0.4)  # let the delayed handler wake up and hit the closed socket
    with httpx.Client(timeout=5.0, trust_env=False) as c:
        assert chat(c, proxy).json() == COMPLETION
    assert [f.kind for f in proxy.log] == ["delay:0.3", "ok"]


def test_plan_consumed_in_order_and_logged(proxy, client):
    plan = ["503", "429:1", "garbage", "empty", "ok"]
    proxy.set_plan(plan)
    statuses = []
    for _ in range(len(plan) + 1):
        statuses.append(chat(client, proxy).status_code)
        assert proxy.plan == plan[len(statuses):]
    assert statuses == [503, 429, 200, 200, 200, 200]
    log = proxy.log
    assert [f.kind for f in log] == plan + ["ok"]  # empty plan -> "ok"
    assert all(isinstance(f, Fault) and f.path == "/v1/chat/completions" for f in log)
    assert [f.at for f in log] == sorted(f.at for f in log)


def test_set_plan_clears_log(proxy, client):
    chat(client, proxy)
    assert len(proxy.log) == 1
    proxy.set_plan(["ok"])
    assert proxy.log == [] and proxy.plan == ["ok"]


def test_set_plan_validation(proxy):
    proxy.set_plan(["500"])
    with pytest.raises(ValueError) as err:
        proxy.set_plan(["ok", "explode"])
    message = str(err.value)
    assert "explode" in message
    assert all(kind in message for kind in KINDS)
    assert proxy.plan == ["500"]  # a rejected plan leaves the old one in place
    for bad in ["delay", "delay:soon", "429:", "drop:1"]:
        with pytest.raises(ValueError):
            proxy.set_plan([bad])


def test_stop_closes_port(upstream):
    p = FaultProxy(upstream).start()
    url = p.url
    p.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=1.0, trust_env=False)
