"""SQLite verdict cache (WAL, safe with concurrent writers) and a judge wrapper that uses it.

A key hashes the judge id (which names the model and the prompt-template version), the
conversation, the response and the criterion's content. Error verdicts are never cached, so a
re-run retries them; a re-run of unchanged input makes zero model calls.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rubricrl.core.messages import Conversation
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status, Verdict
from rubricrl.judges.base import CacheUsage, Judge, JudgeReport, JudgeRequest, WrapperJudge

SCHEMA_VERSION = 1


def verdict_key(judge_id: str, conversation: Conversation, response: str, criterion: Criterion) -> str:
    payload = json.dumps([SCHEMA_VERSION, judge_id, [[m.role, m.content] for m in conversation], response,
                          criterion.content_hash()], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class VerdictCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, verdict TEXT NOT NULL)")

    def get_many(self, keys: Sequence[str]) -> dict[str, Verdict]:
        found: dict[str, Verdict] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                part = list(keys[start:start + 500])
                marks = ",".join("?" * len(part))
                for key, text in self._db.execute(f"SELECT key, verdict FROM verdicts WHERE key IN ({marks})", part):
                    found[key] = Verdict.model_validate_json(text)
        return found

    def put_many(self, items: Sequence[tuple[str, Verdict]]) -> None:
        rows = [(k, v.model_dump_json()) for k, v in items if v.status is not Status.ERROR]
        if not rows:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR REPLACE INTO verdicts (key, verdict) VALUES (?, ?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedJudge(WrapperJudge):
    """Answers from the cache where it can and sends only the misses to the wrapped judge."""

    def __init__(self, inner: Judge, cache: VerdictCache):
        self.inner, self.cache = inner, cache
        self.judge_id = inner.judge_id
        self.hits = self.misses = 0

    def report(self) -> JudgeReport:
        """The inner judge's report with this cache's hits and misses (added to any cache inside)."""
        inner = super().report()
        own = CacheUsage(self.hits, self.misses)
        return replace(inner, cache=own + inner.cache if inner.cache else own)

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        keys = [[verdict_key(self.judge_id, r.conversation, r.response, c) for c in r.criteria] for r in requests]
        found = self.cache.get_many([k for ks in keys for k in ks])
        todo_index, todo = [], []
        for i, (req, ks) in enumerate(zip(requests, keys)):
            missing = tuple(c for c, k in zip(req.criteria, ks) if k not in found)
            if missing:
                todo_index.append(i)
                todo.append(JudgeRequest(req.conversation, req.response, missing))
        fresh: dict[str, Verdict] = {}
        if todo:
            answers = await self.inner.judge(todo)
            for i, req, verdicts in zip(todo_index, todo, answers):
                by_id = {v.criterion_id: v for v in verdicts}
                for c in req.criteria:
                    fresh[verdict_key(self.judge_id, req.conversation, req.response, c)] = by_id[c.id]
            self.cache.put_many(list(fresh.items()))
        out = []
        for ks in keys:
            row = []
            for k in ks:
                if k in found:
                    self.hits += 1
                    row.append(found[k].model_copy(update={"cached": True, "tokens": 0}))
                else:
                    self.misses += 1
                    row.append(fresh[k])
            out.append(row)
        return out
