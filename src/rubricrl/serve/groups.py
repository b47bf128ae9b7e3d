"""Pairwise mode of the reward server: a prompt's rows gathered across requests into groups to compare.

A pairwise reward compares the completions of one prompt with each other, so the server needs all of a
prompt's completions before it can reward any of them. What OpenRLHF sends decides where they are:
versions before January 2026 post a whole rollout batch per request (a prompt's samples together),
0.11.x posts one row per request as soon as a rollout ends. So rows are not grouped per request: each row
joins the pending group of its key (the conversation and the rubric's content hash), and a group is
complete when `size` rows have arrived (`--group-size`, the trainer's samples per prompt), from one
request or many. The complete group is judged at once, and every request waiting on one of its rows gets
that row's reward. A further row of the same key starts the next group.

A request whose rows are not all in complete groups within the request timeout gets `GroupIncomplete`
(504, naming the fix: the group size, one replica) and its rows leave their pending groups, so a
retried request starts afresh. All of a prompt's rows must reach the same server: one replica, or a
load balancer that sends a prompt's samples to one replica.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field

from rubricrl.rewards.rows import RowInput, RowReward
from rubricrl.serve.limits import RequestTimeout


class GroupIncomplete(Exception):
    """Rows whose group did not fill up in time: per such group, how many of its `size` rows had arrived."""

    def __init__(self, arrived: list[int], size: int, seconds: float):
        self.arrived, self.size, self.seconds = arrived, size, seconds

    def detail(self) -> str:
        counts = ", ".join(f"{n} of {self.size}" for n in self.arrived[:5])
        return (f"pairwise mode: {len(self.arrived)} prompt group(s) did not fill up within {self.seconds:g} s "
                f"(rows arrived: {counts}); a prompt's rows are compared once --group-size of them have arrived, so "
                "set --group-size to the trainer's samples per prompt (OpenRLHF --n_samples_per_prompt) and send "
                "every sample of a prompt to this server (one replica), or serve with --mode pointwise")


def group_key(row: RowInput) -> Hashable:
    """Rows are compared with the other rows of the same conversation and rubric."""
    return row.conversation, row.rubric.content_hash()


@dataclass(eq=False)
class _Group:
    key: Hashable
    rows: list[RowInput] = field(default_factory=list)
    waiters: list[asyncio.Future] = field(default_factory=list)


class PromptGroups:
    """Pending groups of one server (module docstring). `judge_group(rows)` rewards one complete group,
    one RowReward per row in order; a request waits at most `timeout` seconds for its rewards."""

    def __init__(self, size: int, judge_group: Callable[[list[RowInput]], Awaitable[list[RowReward]]],
                 timeout: float):
        if size < 2:
            raise ValueError("a pairwise group needs at least 2 rows")
        self.size, self.judge_group, self.timeout = size, judge_group, timeout
        self.pending: dict[Hashable, _Group] = {}
        self._tasks: set[asyncio.Task] = set()

    @property
    def waiting(self) -> int:
        """Rows waiting for their group to fill up."""
        return sum(len(g.rows) for g in self.pending.values())

    async def rewards(self, rows: Sequence[RowInput]) -> list[RowReward]:
        """One RowReward per row, once every row's group was complete and judged (within the timeout)."""
        timeout = self.timeout
        loop = asyncio.get_running_loop()
        mine: list[tuple[_Group, asyncio.Future]] = []
        for row in rows:
            key = group_key(row)
            group = self.pending.get(key)
            if group is None:
                group = self.pending[key] = _Group(key)
            waiter = loop.create_future()
            group.rows.append(row)
            group.waiters.append(waiter)
            mine.append((group, waiter))
            if len(group.rows) == self.size:
                del self.pending[key]
                task = asyncio.ensure_future(self._judge(group))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        if not mine:
            return []
        try:
            return list(await asyncio.wait_for(asyncio.gather(*(w for _, w in mine)), timeout))
        except asyncio.TimeoutError:
            arrived = self._withdraw(mine)
            if arrived:
                raise GroupIncomplete(arrived, self.size, timeout) from None
            raise RequestTimeout() from None
        except asyncio.CancelledError:  # the client went away: its rows leave their groups
            self._withdraw(mine)
            raise

    def _withdraw(self, mine: list[tuple[_Group, asyncio.Future]]) -> list[int]:
        """Take this request's rows out of the groups still pending; per such group, the rows it had."""
        arrived: dict[int, int] = {}
        for group, waiter in mine:
            if self.pending.get(group.key) is not group:
                continue  # complete: being judged (its reward is dropped)
            arrived.setdefault(id(group), len(group.rows))
            k = group.waiters.index(waiter)
            del group.rows[k], group.waiters[k]
            if not group.rows:
                del self.pending[group.key]
        return list(arrived.values())

    async def _judge(self, group: _Group) -> None:
        try:
            rewards = await self.judge_group(group.rows)
        except Exception as exc:  # noqa: BLE001 - every waiting request gets the failure (queue full, timeout, ...)
            for waiter in group.waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        for waiter, reward in zip(group.waiters, rewards):
            if not waiter.done():
                waiter.set_result(reward)
