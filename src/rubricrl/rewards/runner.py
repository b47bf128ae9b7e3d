"""A judge on a private event loop in a daemon thread, for synchronous callers.

verl calls reward functions synchronously, from its own thread, from executor threads (the
reward loop) or from code that already runs an event loop; `asyncio.run` fails in the last case
and would rebuild HTTP clients on every call. One loop per process, made again after a fork,
serves every caller: connections are reused and concurrent calls overlap their judge calls.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from rubricrl.judges.base import Judge
from rubricrl.core.verdicts import Verdict
from rubricrl.rewards.rows import RowInput, judge_rows

T = TypeVar("T")


class JudgeRunner:
    def __init__(self, judge: Judge):
        self.judge = judge
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid: int | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # none yet, or a forked child: threads are gone
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="rubricrl-judge-loop", daemon=True).start()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    def submit(self, rows: Sequence[RowInput]) -> Future[list[list[Verdict]]]:
        """Start judging `rows` on the runner's loop; the future holds one verdict list per row."""
        return asyncio.run_coroutine_threadsafe(judge_rows(self.judge, rows), self._running_loop())

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine that uses the runner's judge (pairwise rewards, say) on the runner's loop, waiting
        in the calling thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._running_loop()).result(timeout)

    def run(self, rows: Sequence[RowInput], timeout: float | None = None) -> list[list[Verdict]]:
        """Verdicts for `rows`, waiting in the calling thread (any thread, running loop or not)."""
        return self.submit(rows).result(timeout)

    async def arun(self, rows: Sequence[RowInput]) -> list[list[Verdict]]:
        """Verdicts for `rows`, awaited from another event loop."""
        return await asyncio.wrap_future(self.submit(rows))
