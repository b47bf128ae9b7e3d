"""Pairwise rubric judging (OpenRS, Rubric-RM style): two responses to one conversation, compared
criterion by criterion.

- A `PairwiseJudge` answers, for a `PairRequest` (conversation, response A, response B, criteria),
  which response matches each criterion more clearly: `A`, `B` or `tie` (a `Preference`, in the
  request's criterion order). For a pitfall (negative weight) "matches more" means "makes the mistake
  more"; the reward turns that around (rewards/pairwise.py). `LocalJudge.compare` (judges/local.py:
  P(A), P(B), P(tie) from the next-token distribution) and `HTTPJudge.compare` (judges/http.py: a
  strict JSON answer, or the answer token's top_logprobs in `logprob` mode) implement it.
- `compare_both_orders` asks every pair as (A, B) and as (B, A), to cancel position bias. When the two
  orders agree the preference stands; when they disagree it becomes a tie, counted in
  `PairwiseStats.disagreements`. `first_shown` counts the single-order answers that named the response
  shown first: about half of `order_answers` for an unbiased judge.
- `PairwiseRubricJudge` puts it behind a routed judge (judges/routing.py). Its `pointwise` pass judges
  every criterion the router does not send to the model judge (rule checks, exemplar models) and every
  hard rule, with the router's defences and quality gate, and leaves the model-judged principles
  `skipped` with reason `DEFERRED`. `prefer` then gives one preference per criterion for a pair of
  judged responses: from the two pointwise verdicts where there are some (met beats unmet; with `soft`
  the higher p_met), a reply that the pre-checks or the gate blocked matches less than one that was
  deferred, and only criteria deferred on both sides go to the pairwise judge, both orders.
  Preferences are not cached (the verdict cache holds pointwise verdicts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Literal, Protocol, runtime_checkable

from rubricrl.core.messages import Conversation
from rubricrl.core.verdicts import Status, Verdict, skipped_verdict
from rubricrl.judges.base import Judge, JudgeRequest, JudgeStats, WrapperJudge
from rubricrl.judges.cache import CachedJudge
from rubricrl.judges.calibration import CalibratedJudge
from rubricrl.judges.defences import screen
from rubricrl.judges.routing import RoutedJudge
from rubricrl.rubrics.model import Criterion

Winner = Literal["A", "B", "tie"]
WINNERS = ("A", "B", "tie")
DEFERRED = "pairwise: compared with the other responses of the group, not judged alone"
_FLIP = {"A": "B", "B": "A", "tie": "tie", None: None}


@dataclass(frozen=True)
class Preference:
    """Which of two responses matches one criterion more clearly; `winner` None when it could not be
    decided (`reason` says why: a judge error, or `skipped: ...` when a verdict was skipped)."""

    criterion_id: str
    winner: Winner | None
    p_a: float | None = None  # the judge's probabilities, when it reads them (normalised over A, B, tie)
    p_b: float | None = None
    p_tie: float | None = None
    reason: str = ""
    judge_id: str = ""
    tokens: int = 0

    @property
    def error(self) -> bool:
        return self.winner is None and not self.reason.startswith("skipped")

    def swapped(self) -> Preference:
        """The same answer with A and B exchanged (an answer about (B, A) read about (A, B))."""
        return replace(self, winner=_FLIP[self.winner], p_a=self.p_b, p_b=self.p_a)


@dataclass(frozen=True)
class PairRequest:
    conversation: Conversation
    response_a: str
    response_b: str
    criteria: tuple[Criterion, ...]

    def swapped(self) -> PairRequest:
        return PairRequest(self.conversation, self.response_b, self.response_a, self.criteria)


@runtime_checkable
class PairwiseJudge(Protocol):
    """A judge that compares two responses: one Preference per criterion of each request, in order, about
    the responses in the order given (A shown first). It must not raise for a judging failure: a failure
    is a Preference with `winner` None and a reason."""

    judge_id: str
    stats: JudgeStats

    async def compare(self, requests: Sequence[PairRequest]) -> list[list[Preference]]: ...


@dataclass
class PairwiseStats:
    """Running totals of pairwise judging. `pairs`: response pairs compared; `comparisons`: criterion
    preferences asked of the pairwise judge, one per order (2 per criterion and pair); `agreed` and
    `disagreements`: criterion preferences whose two orders gave the same / a different answer (a
    disagreement is a tie); `errors`: preferences left undecided by a judge error; `from_verdicts`:
    criterion preferences read from pointwise verdicts, no pairwise call; `first_shown` of
    `order_answers`: single-order answers naming the response shown first (position bias)."""

    pairs: int = 0
    comparisons: int = 0
    agreed: int = 0
    disagreements: int = 0
    errors: int = 0
    from_verdicts: int = 0
    first_shown: int = 0
    order_answers: int = 0

    @property
    def disagreement_rate(self) -> float | None:
        decided = self.agreed + self.disagreements
        return self.disagreements / decided if decided else None

    def snapshot(self) -> PairwiseStats:
        return replace(self)

    def to_dict(self) -> dict:
        return {**asdict(self), "disagreement_rate": self.disagreement_rate}


def combine_orders(first: Preference, second: Preference, stats: PairwiseStats | None = None) -> Preference:
    """One preference from the answer about (A, B) and the answer about (B, A), the latter already
    read about (A, B) (`swapped`). Agreement stands; disagreement is a tie; an error in either is an error."""
    stats = stats if stats is not None else PairwiseStats()
    tokens = first.tokens + second.tokens
    for p in (first, second.swapped()):  # each answer as it was given: did it name the first-shown response?
        if p.winner is not None:
            stats.order_answers += 1
            stats.first_shown += p.winner == "A"
    if first.winner is None or second.winner is None:
        stats.errors += 1
        failed = first if first.winner is None else second
        return replace(failed, winner=None, tokens=tokens, p_a=None, p_b=None, p_tie=None)
    probs = {}
    if None not in (first.p_a, second.p_a, first.p_b, second.p_b, first.p_tie, second.p_tie):
        probs = {"p_a": (first.p_a + second.p_a) / 2, "p_b": (first.p_b + second.p_b) / 2,
                 "p_tie": (first.p_tie + second.p_tie) / 2}
    if first.winner == second.winner:
        stats.agreed += 1
        return replace(first, tokens=tokens, reason=f"both orders: {first.winner}", **probs)
    stats.disagreements += 1
    return replace(first, winner="tie", tokens=tokens, **probs,
                   reason=f"orders disagree (A shown first: {first.winner}; B shown first: {second.winner}): tie")


async def compare_both_orders(judge: PairwiseJudge, requests: Sequence[PairRequest],
                              stats: PairwiseStats | None = None) -> list[list[Preference]]:
    """Each request asked as (A, B) and as (B, A) in one batch, combined by `combine_orders`."""
    stats = stats if stats is not None else PairwiseStats()
    requests = list(requests)
    answers = await judge.compare(requests + [r.swapped() for r in requests]) if requests else []
    stats.comparisons += 2 * sum(len(r.criteria) for r in requests)
    n = len(requests)
    return [[combine_orders(p1, p2.swapped(), stats) for p1, p2 in zip(first, second)]
            for first, second in zip(answers[:n], answers[n:])]


def pairwise_judge_of(judge: Judge | None) -> PairwiseJudge | None:
    """The judge that compares pairs behind a model judge (the verdict cache and a calibration, which
    re-decide pointwise verdicts only, are looked through), or None when it cannot compare."""
    while isinstance(judge, (CachedJudge, CalibratedJudge)):
        judge = judge.inner
    return judge if isinstance(judge, PairwiseJudge) else None


class _Deferring(WrapperJudge):
    """The model judge's place in the pointwise router: hard rules go to the model judge, every other
    criterion comes back `skipped` (DEFERRED) for the pairwise judge."""

    def __init__(self, model_judge: Judge):
        self.inner = model_judge
        self.judge_id = model_judge.judge_id

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        hard = [(i, JudgeRequest(r.conversation, r.response, tuple(c for c in r.criteria if c.kind == "hard_rule")))
                for i, r in enumerate(requests)]
        hard = [(i, r) for i, r in hard if r.criteria]
        answers = await self.inner.judge([r for _, r in hard]) if hard else []
        found = {i: {v.criterion_id: v for v in verdicts} for (i, _), verdicts in zip(hard, answers)}
        return [[found.get(i, {}).get(c.id) or skipped_verdict(c.id, self.judge_id, DEFERRED) for c in r.criteria]
                for i, r in enumerate(requests)]


def deferred(verdict: Verdict) -> bool:
    return verdict.status is Status.SKIPPED and verdict.reason == DEFERRED


@dataclass(frozen=True)
class PairItem:
    """Two responses to one conversation with their pointwise verdicts (from `pointwise`), to compare."""

    conversation: Conversation
    criteria: tuple[Criterion, ...]
    response_a: str
    verdicts_a: Sequence[Verdict]
    response_b: str
    verdicts_b: Sequence[Verdict]


class PairwiseRubricJudge(WrapperJudge):
    """A routed judge's rule, exemplar and gate decisions pointwise, its model judge pairwise (module doc).
    Its stats and report are its pointwise router's (`inner`); `pair_stats` counts the pairwise work."""

    def __init__(self, routed: RoutedJudge, *, soft: bool = True):
        pairwise = pairwise_judge_of(routed.model_judge)
        if pairwise is None:
            raise ValueError(f"judge {routed.judge_id!r} cannot compare pairs: pairwise judging needs a `local`, "
                             "`openai` or `llamacpp` model judge in the spec (not an ensemble)")
        self.pairwise = pairwise
        self.router = RoutedJudge(_Deferring(routed.model_judge), routed.exemplar_judge, routed.defences, routed.gate)
        self.inner = self.router
        self.judge_id = f"{self.router.judge_id}#pairwise"
        self.soft = soft
        self.pair_stats = PairwiseStats()

    async def pointwise(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        return await self.router.judge(requests)

    async def prefer(self, items: Sequence[PairItem]) -> list[list[Preference]]:
        """One preference per criterion of each item, in criterion order."""
        out: list[list[Preference | None]] = []
        asks: list[PairRequest] = []
        owners: list[tuple[int, list[int]]] = []
        for n, item in enumerate(items):
            row: list[Preference | None] = []
            todo: list[int] = []
            for k, (c, va, vb) in enumerate(zip(item.criteria, item.verdicts_a, item.verdicts_b)):
                pref = self._from_verdicts(c, va, vb)
                if pref is None:
                    todo.append(k)
                else:
                    self.pair_stats.from_verdicts += 1
                row.append(pref)
            out.append(row)
            if todo:
                text_a = screen(item.response_a, self.router.defences).text
                text_b = screen(item.response_b, self.router.defences).text
                asks.append(PairRequest(item.conversation, text_a, text_b, tuple(item.criteria[k] for k in todo)))
                owners.append((n, todo))
        self.pair_stats.pairs += len(items)
        for (n, todo), prefs in zip(owners, await compare_both_orders(self.pairwise, asks, self.pair_stats)):
            for k, pref in zip(todo, prefs):
                out[n][k] = pref
        return out  # type: ignore[return-value]

    def _from_verdicts(self, c: Criterion, va: Verdict, vb: Verdict) -> Preference | None:
        """The preference two pointwise verdicts decide, or None when the pairwise judge must be asked."""
        da, db = deferred(va), deferred(vb)
        if da and db:
            return None
        for v in (va, vb):
            if v.status is Status.ERROR:
                return Preference(c.id, None, reason=v.reason, judge_id=v.judge_id)
        if da or db:  # the other reply was blocked (pre-check or gate: unmet); the deferred one matches more
            return Preference(c.id, "A" if da else "B", reason=f"B: {vb.reason}" if da else f"A: {va.reason}",
                              judge_id=(vb if da else va).judge_id)
        if not (va.decided and vb.decided):
            return Preference(c.id, None, reason=f"skipped: {(va if not va.decided else vb).reason}")
        pa, pb = self._points(va), self._points(vb)
        winner = "A" if pa > pb else "B" if pb > pa else "tie"
        return Preference(c.id, winner, reason=f"pointwise: A {pa:.3g}, B {pb:.3g}", judge_id=va.judge_id)

    def _points(self, v: Verdict) -> float:
        if self.soft and v.p_met is not None:
            return v.p_met
        return float(v.status is Status.MET)


PAIRWISE_KINDS = ("local", "openai", "llamacpp")  # the judge kinds with a `compare` (a pairwise mode)


def pairwise_spec_problem(spec: str) -> str | None:
    """Why a judge spec cannot judge pairwise (no model judge with a pairwise mode, an ensemble), or None.
    Checks the spec's text only: no judge is built."""
    from rubricrl.judges.registry import lookup

    kinds = []
    for part in spec.split("+"):
        kind = part.strip().partition(":")[0].partition("?")[0]
        entry = lookup(kind)
        if entry is not None and entry.role == "ensemble":
            return f"judge spec {spec!r}: pairwise judging does not work with a `{kind}:` ensemble; name one model judge"
        if entry is not None and entry.role == "model" and kind not in PAIRWISE_KINDS:
            return (f"judge spec {spec!r}: the `{kind}` judge has no pairwise mode; use "
                    f"{', '.join(f'`{k}`' for k in PAIRWISE_KINDS)}")
        kinds.append(kind)
    if not set(kinds) & set(PAIRWISE_KINDS):
        return (f"judge spec {spec!r} has no model judge to compare pairs with; add `local[:MODEL]`, `openai:URL` or "
                "`llamacpp` (e.g. `gate+exemplar+local`)")
    return None
