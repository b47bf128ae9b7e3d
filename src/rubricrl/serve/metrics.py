"""Prometheus metrics of the reward server, in a registry of its own (one per app).

Request counts and latency come from an ASGI middleware; row outcomes and verdict statuses from
the handlers; the judge's own counters (model calls, tokens, error verdicts, cache hits) are read
from `judge.report()` at scrape time, so they are never double-counted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rubricrl.judges.base import CacheUsage, Judge

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ServerMetrics:
    def __init__(self, judge: Judge, routes: tuple[str, ...]):
        self.registry = CollectorRegistry()
        self.routes = set(routes)
        r = self.registry
        self.requests = Counter("rubricrl_requests", "HTTP requests by route and status code",
                                ["route", "code"], registry=r)
        self.latency = Histogram("rubricrl_request_seconds", "HTTP request latency by route", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.rows = Counter("rubricrl_rows", "Rows answered, by outcome (scored, unscored, judge_error)",
                            ["outcome"], registry=r)
        self.verdicts = Counter("rubricrl_verdicts", "Verdicts in answered rows, by status", ["status"], registry=r)
        self.judge_batches = Counter("rubricrl_judge_batches", "Calls of the judge (one per request; pairwise "
                                     "mode: one per prompt group)", registry=r)
        self.rejected = Counter("rubricrl_rejected", "Requests refused, by reason (unauthorized, body_too_large, "
                                "read_timeout, invalid_request, queue_full, timeout, invalid_rows, judge_failure, "
                                "group_incomplete)", ["reason"], registry=r)
        self.in_flight = Gauge("rubricrl_requests_in_flight", "Requests being judged", registry=r)
        self.queued = Gauge("rubricrl_requests_queued", "Requests waiting for a judging slot", registry=r)
        self.group_rows_waiting = Gauge("rubricrl_pairwise_rows_waiting", "Pairwise mode: rows waiting for the "
                                        "other rows of their prompt", registry=r)
        self.pairwise = {key: Counter(f"rubricrl_pairwise_{key}", doc, registry=r) for key, doc in (
            ("pairs", "Pairwise mode: pairs of rows scheduled"),
            ("judged_pairs", "Pairwise mode: pairs that needed the pairwise judge"),
            ("comparisons", "Pairwise mode: criterion preferences asked of the pairwise judge (both orders)"),
            ("disagreements", "Pairwise mode: criterion preferences whose two orders disagreed (a tie)"))}
        r.register(JudgeCollector(judge))

    def count_pairwise(self, cost) -> None:
        """Add one group's PairwiseCost (rewards/pairwise.py)."""
        for key, value in cost.to_dict().items():
            self.pairwise[key].inc(value)

    def route(self, path: str) -> str:
        """The route label: known paths only, so arbitrary URLs cannot grow the label set."""
        return path if path in self.routes else "other"


class JudgeCollector(Collector):
    """The judge's running totals (`judge.report()`), per part of a routed judge (rules, exemplar, model)."""

    def __init__(self, judge: Judge):
        self.judge = judge

    def collect(self) -> Iterator[CounterMetricFamily]:
        report = self.judge.report()
        families = {name: CounterMetricFamily(f"rubricrl_judge_{name}", doc, labels=["part"]) for name, doc in (
            ("model_calls", "Judge model forward passes or HTTP calls"),
            ("tokens", "Judge model tokens"),
            ("verdicts", "Verdicts the judge produced (cache hits excluded)"),
            ("error_verdicts", "Error verdicts the judge produced"),
            ("verified", "Critic mode: criteria sent to the verifier"),
            ("unverified", "Critic mode: criteria left with the critic's estimate (verifier calls saved)"),
            ("confirmed", "Critic mode: verified criteria the verifier found failed"))}
        for part, r in (report.parts or {"judge": report}).items():
            families["model_calls"].add_metric([part], r.stats.model_calls)
            families["tokens"].add_metric([part], r.stats.tokens)
            families["verdicts"].add_metric([part], r.stats.verdicts)
            families["error_verdicts"].add_metric([part], r.stats.errors)
            families["verified"].add_metric([part], r.stats.verified)
            families["unverified"].add_metric([part], r.stats.unverified)
            families["confirmed"].add_metric([part], r.stats.confirmed)
        yield from families.values()
        cache = report.cache or CacheUsage()
        hits = CounterMetricFamily("rubricrl_judge_cache_hits", "Verdicts answered from the verdict cache")
        misses = CounterMetricFamily("rubricrl_judge_cache_misses", "Verdicts the cache did not hold")
        hits.add_metric([], cache.hits)
        misses.add_metric([], cache.misses)
        yield hits
        yield misses


class RequestMetrics:
    """ASGI middleware: count every HTTP request by route and status and time it (413s included)."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.metrics.route(scope["path"])
        status = 500
        started = time.perf_counter()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)


class RejectionLog:
    """ASGI middleware: log every answer with a status of 400 or more at WARNING, with the method,
    the path (never the query string, which may hold the token), the status and the detail, cut to
    `limit` characters. A trainer's client drops the body of a refusal, so this is where its reason
    can be read."""

    def __init__(self, app: ASGIApp, log: logging.Logger, limit: int = 1000):
        self.app, self.log, self.limit = app, log, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0
        body = bytearray()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and status >= 400 and len(body) <= 4 * self.limit:
                body.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if status >= 400:
                self.log.warning("rejected %s %s: %d %s", scope.get("method", ""), scope.get("path", ""), status,
                                 self.detail(bytes(body)))

    def detail(self, body: bytes) -> str:
        text = body.decode("utf-8", errors="replace")
        try:
            detail = json.loads(text)["detail"]
            text = detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False)
        except (ValueError, TypeError, KeyError):
            pass
        text = " ".join(text.split())
        return text if len(text) <= self.limit else text[: self.limit] + "..."
