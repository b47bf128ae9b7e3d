"""A fault-injecting HTTP proxy for testing HTTP judge clients against real failures.

Put a `FaultProxy` in front of an OpenAI-compatible server (e.g. a llama.cpp server on
loopback), point the client under test at `proxy.url`, and script what goes wrong with
`proxy.set_plan([...])`: every POST to a path ending in ``/chat/completions`` consumes the
next fault (first in, first out; ``"ok"`` once the plan is empty) and is recorded in
`proxy.log`. Everything else (``GET /health``, ``/v1/models``, ...) is forwarded untouched.

Why not a mock transport? Clients must survive what real sockets do: bodies cut short,
garbage bytes, connections dropped mid-request, slow answers. So the listening side is a
tiny HTTP/1.1 server on `asyncio.start_server` with byte-level control over what is
written; requests are forwarded upstream with `httpx.AsyncClient`. Every response carries
``Connection: close`` and the connection is closed after it, which keeps the server simple.

Fault kinds (see `KINDS`): ok, delay:S, 429:S, 500, 503, truncated, garbage, drop, refusal,
length, badjson, empty, nologprobs.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus

import httpx

# kind -> whether it takes a numeric argument after a colon ("delay:0.5", "429:2").
KINDS: dict[str, bool] = {
    "ok": False, "delay": True, "429": True, "500": False, "503": False, "truncated": False,
    "garbage": False, "drop": False, "refusal": False, "length": False, "badjson": False,
    "empty": False, "nologprobs": False,
}
# Faults that answer by themselves without contacting the upstream server.
_LOCAL = {"429", "500", "503", "garbage", "drop", "refusal"}
# Request headers that belong to the client-proxy hop and must not be forwarded.
_HOP_HEADERS = {"host", "content-length", "connection", "keep-alive", "transfer-encoding",
                "accept-encoding", "proxy-connection", "upgrade", "te"}
GARBAGE = b"\x00\xffnot json at all\x13"


@dataclass
class Fault:
    """One handled chat-completions request: the fault applied (plan entry as given)."""

    kind: str
    path: str
    at: float  # time.monotonic() when the request was read


def _parse(fault: str) -> tuple[str, str | None]:
    """Split and validate a plan entry; raises ValueError for anything unknown."""
    kind, sep, arg = fault.partition(":")
    if kind not in KINDS:
        raise ValueError(f"unknown fault kind {fault!r}; valid kinds: {', '.join(KINDS)}")
    if KINDS[kind]:
        try:
            if float(arg) < 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"fault {fault!r} needs a non-negative number: '{kind}:S'") from None
        return kind, arg
    if sep:
        raise ValueError(f"fault kind {kind!r} takes no argument, got {fault!r}")
    return kind, None


def _json(obj: object) -> bytes:
    return json.dumps(obj).encode()


def _rewrite(kind: str, body: bytes) -> bytes:
    """Apply a response-rewriting fault; bodies that are not a chat completion pass unchanged."""
    try:
        data = json.loads(body)
        choice = data["choices"][0]
        message = choice["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return body
    if kind == "length":
        content = message.get("content") or ""
        message["content"] = content[: len(content) // 2]
        choice["finish_reason"] = "length"
    elif kind == "badjson":
        message["content"] = "not json {"
    elif kind == "empty":
        message["content"] = ""
    elif kind == "nologprobs":
        for c in data["choices"]:
            c.pop("logprobs", None)
    return _json(data)


def _refusal(request_body: bytes) -> bytes:
    try:
        model = json.loads(request_body).get("model") or "fault-proxy"
    except (ValueError, AttributeError):
        model = "fault-proxy"
    return _json({
        "id": "chatcmpl-faultproxy", "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0, "finish_reason": "content_filter", "logprobs": None,
            "message": {"role": "assistant", "content": "", "refusal": "I can't help with that."},
        }],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    })


class FaultProxy:
    """Proxy to `upstream` (e.g. "http://127.0.0.1:8080") injecting scripted faults."""

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.url = ""
        self._lock = threading.Lock()
        self._plan: list[str] = []
        self._log: list[Fault] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task] = set()

    # ---- plan and log (read from the test thread, written by the proxy thread) ----
    @property
    def plan(self) -> list[str]:
        """Snapshot of the faults still to come; change it with `set_plan`."""
        with self._lock:
            return list(self._plan)

    @property
    def log(self) -> list[Fault]:
        """Snapshot of the handled chat-completions requests, oldest first."""
        with self._lock:
            return list(self._log)

    def set_plan(self, faults: list[str]) -> None:
        """Replace the plan (validated first) and clear the log."""
        for fault in faults:
            _parse(fault)
        with self._lock:
            self._plan = list(faults)
            self._log = []

    def _next_fault(self, path: str) -> str:
        with self._lock:
            fault = self._plan.pop(0) if self._plan else "ok"
            self._log.append(Fault(fault, path, time.monotonic()))
            return fault

    # ---- lifecycle ----
    def start(self) -> "FaultProxy":
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(timeout=10)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    async def _open(self) -> int:
        # Generous timeout: a real llama.cpp server may take long to generate.
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(600.0), trust_env=False)
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()
        await self._client.aclose()

    # ---- one connection = one request ----
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # client went away or sent something we cannot parse: just hang up
        finally:
            self._tasks.discard(task)
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, asyncio.CancelledError):
                pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line = await reader.readline()
        if not request_line.strip():
            return
        method, target, _version = request_line.decode("latin-1").split()
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))

        path = target.split("?", 1)[0]
        if not (method == "POST" and path.endswith("/chat/completions")):
            status, ctype, data = await self._forward(method, target, headers, body)
            return await self._respond(writer, status, ctype, data)

        kind, arg = _parse(self._next_fault(path))
        if kind == "drop":
            return
        if kind in _LOCAL:
            if kind == "429":
                err = {"error": {"message": "rate limited", "type": "rate_limit"}}
                return await self._respond(writer, 429, "application/json", _json(err), {"Retry-After": arg})
            if kind in ("500", "503"):
                err = {"error": {"message": f"injected {kind} error", "type": "server_error"}}
                return await self._respond(writer, int(kind), "application/json", _json(err))
            data = GARBAGE if kind == "garbage" else _refusal(body)
            return await self._respond(writer, 200, "application/json", data)

        if kind == "delay":
            await asyncio.sleep(float(arg))
        status, ctype, data = await self._forward(method, target, headers, body)
        if kind == "truncated":
            return await self._respond(writer, status, ctype, data, cut=len(data) // 2)
        if kind in ("length", "badjson", "empty", "nologprobs"):
            data = _rewrite(kind, data)
        await self._respond(writer, status, ctype, data)

    async def _forward(self, method: str, target: str, headers: dict[str, str],
                       body: bytes) -> tuple[int, str, bytes]:
        fwd = {k: v for k, v in headers.items() if k not in _HOP_HEADERS}
        try:
            r = await self._client.request(method, self.upstream + target, headers=fwd, content=body)
        except httpx.HTTPError as e:
            err = {"error": {"message": f"fault proxy: upstream failed: {e!r}", "type": "bad_gateway"}}
            return 502, "application/json", _json(err)
        return r.status_code, r.headers.get("content-type", "application/octet-stream"), r.content

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, status: int, ctype: str, body: bytes,
                       extra: dict[str, str] | None = None, cut: int | None = None) -> None:
        """Write a full response; with `cut`, announce the whole body but send only `cut` bytes."""
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {ctype}",
                 f"Content-Length: {len(body)}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in (extra or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        writer.write(body if cut is None else body[:cut])
        await writer.drain()
