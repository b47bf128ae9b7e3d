"""Request limits of the reward server: a body-size cap (413) and bounded concurrency with a
queue (503 with Retry-After when full). The per-request timeout covers queueing and judging (504)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

T = TypeVar("T")


class BodyLimit:
    """ASGI middleware: refuse bodies over `max_bytes` with 413, by Content-Length up front and by
    counting the bytes of a streamed (chunked) body as the app reads it."""

    def __init__(self, app: ASGIApp, max_bytes: int, on_reject: Callable[[], None] = lambda: None):
        self.app, self.max_bytes, self.on_reject = app, max_bytes, on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            self.on_reject()
            await _send_json(send, 413, self._message())
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    self.on_reject()
                    raise HTTPException(413, self._message())
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        return f"request body larger than {self.max_bytes} bytes; send fewer rows per request or raise --max-body"


async def _send_json(send: Send, status: int, detail: str) -> None:
    import json

    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class QueueFull(Exception):
    def __init__(self, retry_after: int):
        self.retry_after = retry_after


class RequestTimeout(Exception):
    pass


class Admission:
    """At most `concurrency` requests do work at once and `queue` more wait for a slot; beyond that
    a request is refused at once (QueueFull). A slot is held until the work really ends, even when
    the caller stopped waiting (timeout, disconnect), so the bound counts the work in progress."""

    def __init__(self, concurrency: int, queue: int):
        self.concurrency, self.queue = concurrency, queue
        self.active = self.waiting = 0
        self._slots = asyncio.Semaphore(concurrency)
        self._mean_seconds = 1.0  # moving average of the work time, for Retry-After

    def retry_after(self) -> int:
        """Seconds until a slot is likely free: the queue ahead drained at the recent pace."""
        return max(1, min(60, math.ceil(self._mean_seconds * (self.waiting + 1) / self.concurrency)))

    async def run(self, work: Callable[[], Awaitable[T]], timeout: float) -> T:
        """`await work()` in a slot within `timeout` seconds (queueing included)."""
        if self.active + self.waiting >= self.concurrency + self.queue:
            raise QueueFull(self.retry_after())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self.waiting += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), timeout)
        except asyncio.TimeoutError:
            raise RequestTimeout() from None
        finally:
            self.waiting -= 1
        self.active += 1
        started = loop.time()
        task = asyncio.ensure_future(work())

        def release(done: asyncio.Future) -> None:
            if not done.cancelled():
                done.exception()  # retrieved here: a caller that timed out no longer awaits it
            self.active -= 1
            self._slots.release()
            self._mean_seconds = 0.8 * self._mean_seconds + 0.2 * (loop.time() - started)

        task.add_done_callback(release)
        try:
            return await asyncio.wait_for(asyncio.shield(task), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            raise RequestTimeout() from None
