"""Request limits of the reward server: a body-size cap (413), a read timeout (408: the headers,
then the body, each within `read_timeout` seconds) and bounded concurrency with a queue (503 with
Retry-After when full). The per-request timeout covers queueing and judging (504)."""

from __future__ import annotations

import asyncio
import json
import logging
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


class ReadDeadline:
    """ASGI middleware: the request body must arrive within `seconds` of the headers. A receive
    still waiting at the deadline raises HTTPException 408 (the app answers it, with
    `Connection: close`), and any response that starts before the body was read in full closes
    the connection after it, so a client that stops sending cannot hold a connection open.
    (uvicorn has no such limit: `timeout_keep_alive` only covers idle connections between requests.)"""

    def __init__(self, app: ASGIApp, seconds: float, on_timeout: Callable[[], None] = lambda: None):
        self.app, self.seconds, self.on_timeout = app, seconds, on_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length", b"")
        complete = b"transfer-encoding" not in headers and (not length.isdigit() or int(length) == 0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds

        async def timed() -> Message:
            nonlocal complete
            if complete:  # the body is in: later receives wait for a disconnect, unbounded
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                self.on_timeout()
                raise HTTPException(408, self.message(), headers={"Connection": "close"}) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                complete = True
            return message

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start" and not complete:
                names = {name.lower() for name, _ in message.get("headers", [])}
                if b"connection" not in names:
                    message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        await self.app(scope, timed, closing)

    def message(self) -> str:
        return (f"the request body did not arrive within {self.seconds:g} s of its headers; send the whole body "
                "without pausing, or raise the server's --read-timeout")


def read_timeout_protocol(seconds: float, log: logging.Logger | None = None) -> type:
    """uvicorn's h11 protocol, plus: a connection must deliver a request's headers within `seconds`
    of opening, or of the first byte of a later request; otherwise it is answered 408 (if it sent
    part of the headers) and closed. The body is ReadDeadline's. Pass it as `uvicorn.Config(http=...)`.
    (uvicorn never times out headers: its keep-alive timer stops at the first byte received.)"""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class ReadTimeoutH11Protocol(H11Protocol):
        read_seconds = seconds
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()  # a connection that never sends anything is closed too

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _watch(self) -> None:
            """Armed while part of a request's headers is buffered; idle keep-alive connections are
            uvicorn's (timeout_keep_alive), and the body is ReadDeadline's."""
            if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
                self._disarm()
            elif self.conn.trailing_data[0] and self._header_timer is None:
                self._arm()

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(self.read_seconds, self._expired)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expired(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            if self.conn.trailing_data[0]:
                detail = (f"the request headers did not arrive within {self.read_seconds:g} s; send the whole "
                          "request without pausing, or raise the server's --read-timeout")
                if log is not None:
                    log.warning("rejected request from %s: 408 %s", "%s:%d" % self.client if self.client else "?",
                                detail)
                body = json.dumps({"detail": detail}).encode()
                self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                                     b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            self.transport.close()

    return ReadTimeoutH11Protocol


async def _send_json(send: Send, status: int, detail: str) -> None:
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
