"""The judge protocol: a batch of (conversation, response, criteria) in, one verdict per criterion out,
and a `report()` of what the judge has done so far (`JudgeReport`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rubricrl.core.messages import Conversation
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status, Verdict
from rubricrl.judges.defences import DefenceStats

if TYPE_CHECKING:
    from rubricrl.llm.endpoint import ChatEndpoint


@dataclass(frozen=True)
class JudgeRequest:
    conversation: Conversation
    response: str
    criteria: tuple[Criterion, ...]


@dataclass
class JudgeStats:
    """Running totals a judge keeps; `model_calls` counts forward passes or HTTP calls. A critic judge
    (judges/critic.py) also counts the criteria it sent to its verifier (`verified`), those it left with
    the critic's estimate (`unverified`) and the verified ones the verifier found failed (`confirmed`:
    the critic's reward); they stay 0 for every other judge."""

    model_calls: int = 0
    tokens: int = 0
    retries: int = 0  # HTTP judges: attempts beyond the first
    cost: float = 0.0  # HTTP judges: priced with the endpoint's cost_per_1k_* settings
    verdicts: int = 0
    errors: int = 0
    error_reasons: dict[str, int] = field(default_factory=dict)
    verified: int = 0
    unverified: int = 0
    confirmed: int = 0

    def count(self, verdicts: Sequence[Verdict]) -> None:
        self.verdicts += len(verdicts)
        for v in verdicts:
            if v.status is Status.ERROR:
                self.errors += 1
                key = v.reason.split(":", 1)[0][:80]
                self.error_reasons[key] = self.error_reasons.get(key, 0) + 1

    def add_spend(self, members: Sequence) -> JudgeStats:
        """Add the members' model calls, tokens, retries and cost (judges made of judges: ensembles,
        critic mode); returns self."""
        for m in members:
            self.model_calls += m.stats.model_calls
            self.tokens += m.stats.tokens
            self.retries += m.stats.retries
            self.cost += m.stats.cost
        return self

    def snapshot(self) -> JudgeStats:
        """A copy that later judging does not change."""
        return replace(self, error_reasons=dict(self.error_reasons))


@dataclass(frozen=True)
class CacheUsage:
    """Verdicts answered from the verdict cache (`hits`) and sent on to the judge (`misses`)."""

    hits: int = 0
    misses: int = 0

    def __add__(self, other: CacheUsage) -> CacheUsage:
        return CacheUsage(self.hits + other.hits, self.misses + other.misses)


@dataclass(frozen=True)
class EndpointUsage:
    """An HTTP endpoint's running totals (llm/endpoint.py EndpointStats): `calls` are logical calls,
    `attempts` the HTTP requests sent, `retries` the re-attempts among them; `errors` by reason."""

    url: str
    calls: int = 0
    attempts: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    errors: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, endpoint: ChatEndpoint) -> EndpointUsage:
        s = endpoint.stats
        return cls(endpoint.config.base_url, s.calls, s.attempts, s.retries, s.prompt_tokens, s.completion_tokens,
                   s.cost, dict(s.errors))


@dataclass(frozen=True)
class JudgeReport:
    """What a judge has done so far, as one value (a snapshot; judging on does not change it).

    - `stats`: the judge's model calls, tokens, retries, cost, verdicts and error verdicts (for a
      routed judge: its model judge's, or the rule judge's when it has none; cache hits excluded);
    - `cache`: verdict-cache hits and misses, None without a cache;
    - `endpoints`: the HTTP endpoints the judge calls, each with its usage (none for local judges);
    - `defences`: the router's defence counts (judges/defences.py), None for other judges;
    - `parts`: the reports it is made of: `rules`, `exemplar`, `model` for a routed judge,
      `member1`, `member2`, ... for an ensemble; empty for a judge of one piece.
    Wrappers (cache, calibration) report their inner judge's report under their own judge id."""

    judge_id: str
    stats: JudgeStats = field(default_factory=JudgeStats)
    cache: CacheUsage | None = None
    endpoints: tuple[EndpointUsage, ...] = ()
    defences: DefenceStats | None = None
    parts: Mapping[str, JudgeReport] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def verifier_ids(report: JudgeReport) -> frozenset[str]:
    """The judge ids of the verifiers of every critic judge in a report (judges/critic.py: a report with
    parts `critic` and `verifier`), at any depth: the verdicts with these ids are the verified ones."""
    found: set[str] = set()
    stack = [report]
    while stack:
        r = stack.pop()
        if "critic" in r.parts and "verifier" in r.parts:
            found.add(r.parts["verifier"].judge_id)
        stack.extend(r.parts.values())
    return frozenset(found)


def combined_cache(reports: Sequence[JudgeReport]) -> CacheUsage | None:
    """The sum of the reports' cache usage, None when none of them has a cache."""
    caches = [r.cache for r in reports if r.cache is not None]
    return sum(caches[1:], caches[0]) if caches else None


@runtime_checkable
class Judge(Protocol):
    """Any judge: rules, a local model, an HTTP endpoint, a cache around another judge.

    `judge` returns, for each request, one Verdict per criterion in the request's order.
    It must not raise for a judging failure: a failure is an `error` verdict with a reason."""

    judge_id: str
    stats: JudgeStats
    explains: bool  # a `met` verdict's evidence is the judge's own explanation, which may quote the response

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]: ...

    def report(self) -> JudgeReport:
        """What the judge has done so far (a snapshot)."""
        ...


class StatsJudge:
    """A judge of one piece: its report is its judge id and a copy of its `stats`. Subclass it (or
    write `report()`) in a judge of your own."""

    judge_id: str
    stats: JudgeStats
    explains = False  # its evidence is not a generative judge's explanation

    def report(self) -> JudgeReport:
        return JudgeReport(self.judge_id, self.stats.snapshot())


class WrapperJudge:
    """A judge around another one, `inner` (the verdict cache, a calibration, pairwise judging's parts):
    its `stats` and `explains` are the inner judge's, and its report is the inner judge's report under
    this judge's id. A wrapper that adds to the report (the cache: its hits and misses) overrides
    `report` and starts from `super().report()`."""

    inner: Judge
    judge_id: str

    @property
    def stats(self) -> JudgeStats:
        return self.inner.stats

    @property
    def explains(self) -> bool:
        return self.inner.explains

    def report(self) -> JudgeReport:
        return replace(self.inner.report(), judge_id=self.judge_id)
