"""Critic mode (RLAC, issue 19): a cheap critic ranks a reply's model-judged criteria by how likely each
one is failed; an expensive verifier judges only the top k (or those above a probability cutoff); the
others keep the critic's estimate, marked unverified. Spec: `critic:SETTINGS:CRITIC>VERIFIER`
(docs/judges.md), e.g. `critic:k=2:exemplar>local` or `gate+critic:p=0.5,online=32:exemplar>openai:URL`.

Per reply:
- the critic judges every model-judged criterion; its failure probability is `p_fail` = 1 - p_met for a
  positive criterion and p_met for a pitfall (negative weight: the bad thing happens); a met/unmet
  verdict without p_met counts as 1 / 0;
- a criterion the critic gives no estimate (skipped, error) is always verified;
- the others are ordered by `rank`: `fail` (default, RLAC's critic: highest p_fail first) or `uncertain`
  (the expected reward error of keeping the estimate, |weight| x p_fail x (1 - p_fail), highest first);
  ties go to the larger |weight|, then to rubric order. `p=X` keeps those with p_fail >= X; `u=X` those
  whose likelier outcome the critic gets wrong with probability min(p_fail, 1 - p_fail) >= X; `k=N` keeps
  the first N of them (any of the three may be combined);
- `budget=group` spends the budget per GRPO group instead of per reply: the requests of one call that
  share a conversation (the prompt of a group) pool k x (their number) verifications, given to the
  group's criteria ranked first across all its replies (ties: larger |weight|, then request order, then
  rubric order), so a reply the critic is sure about leaves its share to one it is not sure about;
- the verifier's verdict is returned as it is; every other criterion gets the critic's verdict with
  judge id `unverified:<critic id>`, reason `unverified: ...` and evidence `unverified: critic estimate
  p=...` (`Verdict.unverified` reads the mark). With `unverified=hard` it carries the critic's likelier
  outcome instead of its probability: met with p_met 1 when the critic's p_met >= 0.5, else unmet with
  p_met 0 (for a verifier whose verdicts are met/unmet, so that an unverified criterion is scored on the
  verifier's scale). Verifier errors stay errors.
Rule checks never reach a critic judge: the router (judges/routing.py) sends them to the rule judge.

Training the critic. A critic is rewarded when a criterion it flagged is confirmed failed (`confirmed` in
JudgeStats); learning to predict the verifier's outcome is the supervised form of that reward. `online=N`
makes the critic an `OnlineCritic`: per criterion, a logistic regression of the verifier's outcome on the
exemplar models' inputs (the reply's embedding, and its similarity to the prompt for pair-aware models),
refitted after every N new verifications. It is warm-started from the exemplar models (their Platt-
calibrated logit, so before any verification it equals the exemplar judge) and fitted by maximum a
posteriori with a Gaussian prior centred on those weights (`prior=` its precision, default 1): a few
verifications move its calibration, many are needed to move it far from the exemplar models.
A criterion without an exemplar model starts from zero weights and gives estimates from its first refit
on (it is always verified before). It learns only from what it chose to verify, like any bandit: a criterion it
ranks low is rarely verified, so its mistakes there are corrected slowly (`rank=uncertain` verifies where
it is least sure).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rubricrl.core.messages import last_user_text
from rubricrl.core.verdicts import UNVERIFIED, Status, Verdict, error_verdict, skipped_verdict
from rubricrl.judges.base import Judge, JudgeReport, JudgeRequest, JudgeStats, StatsJudge, combined_cache
from rubricrl.rubrics.model import Criterion

if TYPE_CHECKING:
    from rubricrl.judges.exemplar import ExemplarJudge
    from rubricrl.judges.registry import BuildOptions

RANKS = ("fail", "uncertain")
BUDGETS = ("reply", "group")
UNVERIFIED_MODES = ("soft", "hard")
MAX_OBSERVATIONS = 2048  # most recent verifications kept per criterion by an online critic
SPEC_EXAMPLE = "critic:k=2:exemplar>local"


class CriticSpecError(ValueError):
    """A `critic:` spec that cannot be built (the registry turns it into a JudgeSpecError)."""


@dataclass(frozen=True)
class CriticSettings:
    k: int | None = None  # verify at most k criteria per reply (budget=group: k x replies per group)
    cutoff: float | None = None  # verify those with p_fail >= cutoff
    rank: str = "fail"
    online: int | None = None  # refit the critic after every `online` verifications
    prior: float = 1.0  # precision of the online critic's prior around its warm start
    doubt: float | None = None  # `u=X`: verify those with min(p_fail, 1 - p_fail) >= X
    budget: str = "reply"  # `reply`: k per reply; `group`: k x n per group of n replies sharing a conversation
    unverified: str = "soft"  # `soft`: the critic's p_met; `hard`: its likelier outcome, p_met 1 or 0

    def __post_init__(self):
        if self.k is None and self.cutoff is None and self.doubt is None:
            raise CriticSpecError(f"a critic needs a budget: k=N (top N per reply), p=X (p_fail >= X) and/or u=X "
                                  f"(min(p_fail, 1 - p_fail) >= X), e.g. `{SPEC_EXAMPLE}`")
        if self.k is not None and self.k < 1:
            raise CriticSpecError(f"k={self.k}: verify at least one criterion per reply (k >= 1)")
        if self.cutoff is not None and not 0.0 < self.cutoff <= 1.0:
            raise CriticSpecError(f"p={self.cutoff}: the cutoff is a probability in (0, 1]")
        if self.doubt is not None and not 0.0 < self.doubt <= 0.5:
            raise CriticSpecError(f"u={self.doubt}: the uncertainty cutoff is the probability that the critic's "
                                  "likelier outcome is wrong, min(p_fail, 1 - p_fail), so it lies in (0, 0.5]")
        if self.rank not in RANKS:
            raise CriticSpecError(f"rank={self.rank}: use one of {', '.join(RANKS)}")
        if self.budget not in BUDGETS:
            raise CriticSpecError(f"budget={self.budget}: use one of {', '.join(BUDGETS)}")
        if self.budget == "group" and self.k is None:
            raise CriticSpecError("budget=group shares k x (replies in the group) verifications among a group's "
                                  "replies; give it k=N, e.g. `critic:k=2,budget=group:exemplar>local`")
        if self.unverified not in UNVERIFIED_MODES:
            raise CriticSpecError(f"unverified={self.unverified}: use one of {', '.join(UNVERIFIED_MODES)}")
        if self.online is not None and self.online < 1:
            raise CriticSpecError(f"online={self.online}: refit after N >= 1 verifications")
        if not (self.prior > 0 and math.isfinite(self.prior)):
            raise CriticSpecError(f"prior={self.prior}: the prior's precision must be a positive number")

    @classmethod
    def parse(cls, text: str) -> CriticSettings:
        """`k=2`, `p=0.3`, `k=2,p=0.3,rank=uncertain,online=32,prior=1`, `k=2,budget=group,unverified=hard`."""
        known = {"k": int, "p": float, "u": float, "rank": str, "budget": str, "unverified": str, "online": int,
                 "prior": float}
        values: dict = {}
        for item in filter(None, (s.strip() for s in text.split(","))):
            key, eq, value = item.partition("=")
            if not eq or key not in known:
                raise CriticSpecError(f"unknown critic setting {item!r}; known: k=N, p=X, u=X, rank={'|'.join(RANKS)}, "
                                      f"budget={'|'.join(BUDGETS)}, unverified={'|'.join(UNVERIFIED_MODES)}, "
                                      "online=N, prior=X")
            if key in values:
                raise CriticSpecError(f"critic setting {key} given twice")
            try:
                values[key] = known[key](value)
            except ValueError:
                what = "an integer" if known[key] is int else "a number"
                raise CriticSpecError(f"critic setting {item!r}: {value!r} is not {what}") from None
        return cls(k=values.get("k"), cutoff=values.get("p"), rank=values.get("rank", "fail"),
                   online=values.get("online"), prior=values.get("prior", 1.0), doubt=values.get("u"),
                   budget=values.get("budget", "reply"), unverified=values.get("unverified", "soft"))

    def label(self) -> str:
        parts = [f"k={self.k}"] if self.k is not None else []
        parts += [f"p={self.cutoff:g}"] if self.cutoff is not None else []
        parts += [f"u={self.doubt:g}"] if self.doubt is not None else []
        parts += [f"rank={self.rank}"] if self.rank != "fail" else []
        parts += [f"budget={self.budget}"] if self.budget != "reply" else []
        parts += [f"unverified={self.unverified}"] if self.unverified != "soft" else []
        parts += [f"online={self.online}", f"prior={self.prior:g}"] if self.online is not None else []
        return ",".join(parts)


def parse_critic_spec(arg: str) -> tuple[CriticSettings, str, str]:
    """`SETTINGS:CRITIC>VERIFIER` (the part after `critic:`) -> (settings, critic spec, verifier spec)."""
    settings, sep, pair = arg.partition(":")
    if not sep or "=" not in settings:
        raise CriticSpecError(f"write `critic:SETTINGS:CRITIC>VERIFIER`, e.g. `{SPEC_EXAMPLE}` (got `critic:{arg}`)")
    sides = [s.strip() for s in pair.split(">")]
    if len(sides) != 2 or not all(sides):
        raise CriticSpecError(f"`critic:{arg}`: name one critic and one verifier judge separated by one `>`, e.g. "
                              f"`{SPEC_EXAMPLE}`")
    try:
        parsed = CriticSettings.parse(settings)
    except CriticSpecError as exc:
        raise CriticSpecError(f"`critic:{arg}`: {exc}") from None
    return parsed, sides[0], sides[1]


def build_critic(arg: str, options: BuildOptions) -> CriticJudge:
    """The CriticJudge a `critic:` spec names; each side is one judge kind (`exemplar`, `local:MODEL`,
    `openai:URL?...`, `llamacpp?...`) built by its registered factory."""
    from rubricrl.judges.registry import lookup, split_part

    settings, critic_spec, verifier_spec = parse_critic_spec(arg)
    parts = []
    for side, spec in (("critic", critic_spec), ("verifier", verifier_spec)):
        kind, part_arg = split_part(spec)
        entry = lookup(kind)
        if entry is None or entry.role not in ("model", "exemplar") or kind == "critic":
            raise CriticSpecError(f"`critic:{arg}`: the {side} `{spec}` must be one model or exemplar judge "
                                  "(e.g. `exemplar`, `exemplar:DIR`, `local`, `openai:URL`, `llamacpp`); "
                                  "`+`, ensembles and nested critics cannot stand there")
        parts.append((entry, part_arg))
    if settings.online is not None and parts[0][0].role != "exemplar":
        raise CriticSpecError(f"`critic:{arg}`: online=N refits embedding models warm-started from exemplar "
                              f"models, so its critic must be `exemplar` or `exemplar:DIR` (got `{critic_spec}`)")
    critic, verifier = (entry.build(part_arg, options) for entry, part_arg in parts)  # checked first, then built
    if settings.online is not None:
        critic = OnlineCritic.from_exemplar(critic, every=settings.online, prior=settings.prior)
    return CriticJudge(critic, verifier, settings)


# -- selection --------------------------------------------------------------------------------------


def p_fail(criterion: Criterion, verdict: Verdict | None) -> float | None:
    """How likely the criterion is failed, by a critic's verdict; None when it gave no estimate."""
    if verdict is None or not verdict.decided:
        return None
    p = verdict.p_met if verdict.p_met is not None else (1.0 if verdict.status is Status.MET else 0.0)
    return p if criterion.weight < 0 else 1.0 - p


def failed(criterion: Criterion, verdict: Verdict) -> bool | None:
    """Did the verifier find the criterion failed (a positive one unmet, a pitfall met)? None: undecided."""
    if not verdict.decided:
        return None
    return (verdict.status is Status.MET) if criterion.weight < 0 else (verdict.status is Status.UNMET)


def priority(criterion: Criterion, fail: float, rank: str) -> float:
    """A criterion's place in the ranking (higher first): p_fail, or |weight| p_fail (1 - p_fail)."""
    return fail if rank == "fail" else abs(criterion.weight) * fail * (1.0 - fail)


def eligible(fail: float, settings: CriticSettings) -> bool:
    """Does a criterion with this p_fail pass the cutoffs (`p=`, `u=`)?"""
    return ((settings.cutoff is None or fail >= settings.cutoff)
            and (settings.doubt is None or min(fail, 1.0 - fail) >= settings.doubt))


def select(criteria: Sequence[Criterion], fails: Sequence[float | None], settings: CriticSettings) -> list[int]:
    """Indices of one reply's criteria to verify, in the order chosen: those without an estimate, then
    the ranked ones (module docstring)."""
    always = [j for j, p in enumerate(fails) if p is None]
    ranked = [j for j, p in enumerate(fails) if p is not None and eligible(p, settings)]
    ranked.sort(key=lambda j: (-priority(criteria[j], fails[j], settings.rank), -abs(criteria[j].weight), j))
    return always + (ranked[:settings.k] if settings.k is not None else ranked)


def select_group(replies: Sequence[tuple[Sequence[Criterion], Sequence[float | None]]],
                 settings: CriticSettings) -> list[set[int]]:
    """`budget=group`: per reply of one group, the indices of its criteria to verify. Criteria without an
    estimate are always verified; of the others that pass the cutoffs, the k x len(replies) ranked first
    across the group (ties: larger |weight|, then reply order, then rubric order)."""
    chosen: list[set[int]] = [{j for j, p in enumerate(fails) if p is None} for _, fails in replies]
    pool = [(i, j) for i, (_, fails) in enumerate(replies) for j, p in enumerate(fails)
            if p is not None and eligible(p, settings)]

    def order(ij: tuple[int, int]) -> tuple:
        criteria, fails = replies[ij[0]]
        c = criteria[ij[1]]
        return -priority(c, fails[ij[1]], settings.rank), -abs(c.weight), ij[0], ij[1]

    pool.sort(key=order)
    for i, j in pool[:settings.k * len(replies)]:
        chosen[i].add(j)
    return chosen


def groups_of(requests: Sequence[JudgeRequest]) -> list[list[int]]:
    """Request indices grouped by conversation (a GRPO group: the replies to one prompt), first-seen order."""
    groups: dict = {}
    for i, req in enumerate(requests):
        groups.setdefault(req.conversation, []).append(i)
    return list(groups.values())


# -- the judge --------------------------------------------------------------------------------------


class CriticJudge:
    """A critic judge in front of a verifier judge (module docstring). Its stats add up the critic's and
    the verifier's model calls, tokens, retries and cost, and count its own verdicts and `verified`,
    `unverified` and `confirmed` criteria; its report has parts `critic` and `verifier`."""

    def __init__(self, critic: Judge, verifier: Judge, settings: CriticSettings):
        self.critic, self.verifier, self.settings = critic, verifier, settings
        self.judge_id = f"critic:{settings.label()}:{critic.judge_id}>{verifier.judge_id}"
        self._own = JudgeStats()

    @property
    def explains(self) -> bool:
        return self.verifier.explains

    @property
    def stats(self) -> JudgeStats:
        own = self._own
        total = JudgeStats(verdicts=own.verdicts, errors=own.errors, error_reasons=dict(own.error_reasons),
                           verified=own.verified, unverified=own.unverified, confirmed=own.confirmed)
        return total.add_spend((self.critic, self.verifier))

    def report(self) -> JudgeReport:
        parts = {"critic": self.critic.report(), "verifier": self.verifier.report()}
        return JudgeReport(self.judge_id, self.stats, cache=combined_cache(list(parts.values())),
                           endpoints=tuple(e for r in parts.values() for e in r.endpoints), parts=parts)

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        estimates = await self.critic.judge(requests)
        by_ids = [{v.criterion_id: v for v in row} for row in estimates]
        fails = [[p_fail(c, by_id.get(c.id)) for c in req.criteria] for req, by_id in zip(requests, by_ids)]
        if self.settings.budget == "group":
            picks: list[set[int]] = [set() for _ in requests]
            group_size = [1] * len(requests)
            for group in groups_of(requests):
                picked = select_group([(requests[i].criteria, fails[i]) for i in group], self.settings)
                for i, mine in zip(group, picked):
                    picks[i], group_size[i] = mine, len(group)
        else:
            picks = [set(select(req.criteria, f, self.settings)) for req, f in zip(requests, fails)]
            group_size = [1] * len(requests)
        plans, sub, owners = [], [], []
        for i, req in enumerate(requests):
            plans.append((by_ids[i], fails[i], picks[i], group_size[i]))
            mine = tuple(c for j, c in enumerate(req.criteria) if j in picks[i])
            if mine:
                sub.append(JudgeRequest(req.conversation, req.response, mine))
                owners.append(i)
        answers = await self.verifier.judge(sub) if sub else []
        checked = {i: {v.criterion_id: v for v in row} for i, row in zip(owners, answers)}
        out, outcomes = [], []
        for i, req in enumerate(requests):
            by_id, fail, chosen, size = plans[i]
            row = []
            for j, c in enumerate(req.criteria):
                if j in chosen:
                    v = checked.get(i, {}).get(c.id) or error_verdict(c.id, self.verifier.judge_id,
                                                                        "no verdict from the verifier")
                    self._own.verified += 1
                    self._own.confirmed += bool(failed(c, v))
                    if v.decided:
                        outcomes.append((last_user_text(req.conversation), req.response, c, v))
                else:
                    v = self._unverified(c, by_id[c.id], fail[j], size)
                    self._own.unverified += 1
                row.append(v)
            self._own.count(row)
            out.append(row)
        if outcomes and isinstance(self.critic, OnlineCritic):
            await asyncio.to_thread(self.critic.observe, outcomes)
        return out

    def _unverified(self, criterion: Criterion, estimate: Verdict, fail: float, group_size: int = 1) -> Verdict:
        s = self.settings
        if s.cutoff is not None and fail < s.cutoff:
            why = f"p_fail={fail:.3f} below the cutoff {s.cutoff:g}"
        elif s.doubt is not None and min(fail, 1.0 - fail) < s.doubt:
            why = (f"p_fail={fail:.3f}, the critic's likelier outcome is wrong with p={min(fail, 1.0 - fail):.3f} "
                   f"< u={s.doubt:g}")
        elif s.budget == "group":
            why = (f"p_fail={fail:.3f}, not among the {s.k} x {group_size} criteria ranked first in its group of "
                   f"{group_size} replies ({s.rank})")
        else:
            why = f"p_fail={fail:.3f}, not among the {s.k} criteria ranked first ({s.rank})"
        p = estimate.p_met if estimate.p_met is not None else (1.0 if estimate.status is Status.MET else 0.0)
        evidence = f"unverified: critic estimate p={p:.3f}"
        update = {}
        if s.unverified == "hard":
            met = p >= 0.5
            evidence += f", scored as its likelier outcome ({'met' if met else 'unmet'})"
            update = {"status": Status.MET if met else Status.UNMET, "p_met": 1.0 if met else 0.0}
        evidence += f"; {estimate.evidence}" if estimate.evidence else ""
        return estimate.model_copy(update={"judge_id": UNVERIFIED + estimate.judge_id, "reason": f"unverified: {why}",
                                           "evidence": evidence, "cached": False, **update})


# -- the online critic ------------------------------------------------------------------------------


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -50.0, 50.0)))


def fit_map(X: np.ndarray, y: np.ndarray, w0: np.ndarray, b0: float, prior: float,
            start: np.ndarray | None = None, iterations: int = 50) -> tuple[np.ndarray, float]:
    """Logistic regression of targets `y` in [0, 1] on rows of `X`, maximum a posteriori with a Gaussian
    prior of precision `prior` centred on (w0, b0): minimises
    sum_i [log(1 + e^z_i) - y_i z_i] + prior / 2 * (|w - w0|^2 + (b - b0)^2), z = X w + b,
    by Newton's method with step halving (strictly convex for prior > 0, so one minimum)."""
    Xb = np.hstack([np.asarray(X, dtype=np.float64), np.ones((len(X), 1))])
    y = np.asarray(y, dtype=np.float64)
    centre = np.append(np.asarray(w0, dtype=np.float64), float(b0))
    theta = centre.copy() if start is None else np.asarray(start, dtype=np.float64).copy()

    def loss(t: np.ndarray) -> float:
        z = Xb @ t
        return float(np.sum(np.logaddexp(0.0, z) - y * z) + prior / 2 * np.sum((t - centre) ** 2))

    current = loss(theta)
    for _ in range(iterations):
        p = _sigmoid(Xb @ theta)
        grad = Xb.T @ (p - y) + prior * (theta - centre)
        hess = (Xb.T * (p * (1 - p))) @ Xb + prior * np.eye(len(theta))
        step = np.linalg.solve(hess, grad)
        size = 1.0
        while size > 1e-6:
            trial = theta - size * step
            value = loss(trial)
            if value <= current:
                break
            size /= 2
        else:
            break
        theta, moved = trial, size * float(np.max(np.abs(step)))
        current = value
        if moved < 1e-9:
            break
    return theta[:-1], float(theta[-1])


@dataclass
class CriticHead:
    """One criterion's model: p_met = sigmoid(x . w + b), met at `threshold`; (w0, b0) is its prior."""

    w: np.ndarray
    b: float
    w0: np.ndarray
    b0: float
    threshold: float = 0.5
    ready: bool = True  # gives estimates: warm-started, or refitted at least once
    vectors: list = field(default_factory=list)  # verified replies' embeddings (most recent MAX_OBSERVATIONS)
    targets: list = field(default_factory=list)  # the verifier's p_met on them (1 / 0 without one)
    fresh: bool = False  # has examples the last refit did not see

    def p_met(self, vector: np.ndarray) -> float:
        return float(_sigmoid(np.asarray(vector, dtype=np.float64) @ self.w + self.b))


class OnlineCritic(StatsJudge):
    """A critic that learns from the verifier (module docstring). `heads` maps a criterion key (the
    exemplar judge's `criterion_key` of its text) to its warm start; `inputs` turns (prompt, reply) pairs
    into the heads' input rows (the exemplar judge's: the reply's embedding, and its similarity to the
    prompt for pair-aware models)."""

    def __init__(self, heads: dict[str, CriticHead], inputs: Callable[[list[tuple[str, str]]], np.ndarray], *,
                 every: int, prior: float = 1.0, label: str = "online"):
        from rubricrl.judges.exemplar import criterion_key

        self.heads, self.inputs, self.every, self.prior = heads, inputs, every, prior
        self.key = criterion_key
        self.judge_id = f"online:{label}"
        self.stats = JudgeStats()
        self.pending = 0  # verifications since the last refit
        self.refits = 0
        self.seen = 0

    @classmethod
    def from_exemplar(cls, judge: ExemplarJudge, *, every: int, prior: float = 1.0) -> OnlineCritic:
        """Warm-started from the exemplar judge's models: w0 = a * coef, b0 = a * intercept + b (Platt a, b),
        so its p_met equals the exemplar judge's until the first refit; it sees the same inputs."""
        heads = {}
        for key, m in judge.models.items():
            w0 = m.platt_a * np.asarray(m.coef, dtype=np.float64)
            b0 = m.platt_a * m.intercept + m.platt_b
            heads[key] = CriticHead(w0.copy(), b0, w0, b0, m.threshold)
        return cls(heads, judge.inputs, every=every, prior=prior, label=judge.judge_id)

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        return await asyncio.to_thread(self.judge_sync, requests)

    def judge_sync(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        pairs = [(last_user_text(r.conversation), r.response) for r in requests]
        todo = sorted({pair for pair, r in zip(pairs, requests) if r.response.strip()
                       and any(self.key(c.text) in self.heads for c in r.criteria)})
        vectors = dict(zip(todo, self.inputs(todo))) if todo else {}
        self.stats.model_calls += 1 if todo else 0
        out = []
        for req, pair in zip(requests, pairs):
            row = []
            for c in req.criteria:
                head = self.heads.get(self.key(c.text))
                if head is None or not head.ready:
                    row.append(skipped_verdict(c.id, self.judge_id, "no model for this criterion yet"))
                elif not req.response.strip():
                    row.append(Verdict(criterion_id=c.id, status=Status.UNMET, p_met=0.0, judge_id=self.judge_id,
                                       reason="precheck: empty response cannot meet a criterion"))
                else:
                    p = head.p_met(vectors[pair])
                    row.append(Verdict(criterion_id=c.id, status=Status.MET if p >= head.threshold else Status.UNMET,
                                       p_met=p, judge_id=self.judge_id,
                                       evidence=f"p={p:.3f} (threshold {head.threshold:.2f}); "
                                                f"{len(head.targets)} verifications, {self.refits} refits"))
            self.stats.count(row)
            out.append(row)
        return out

    def observe(self, outcomes: Sequence[tuple[str, str, Criterion, Verdict]]) -> None:
        """Keep each (prompt, reply, criterion, verifier verdict) as a training example; refit every
        criterion that has new examples once `every` verifications arrived since the last refit."""
        outcomes = [(p, r, c, v) for p, r, c, v in outcomes if v.decided and r.strip()]
        if not outcomes:
            return
        vectors = self.inputs([(p, r) for p, r, _, _ in outcomes])
        for (_, _, c, v), x in zip(outcomes, vectors):
            head = self.heads.get(self.key(c.text))
            if head is None:  # a criterion without a warm start begins at zero weights
                zero = np.zeros(len(x))
                head = self.heads[self.key(c.text)] = CriticHead(zero.copy(), 0.0, zero, 0.0, ready=False)
            head.vectors.append(np.asarray(x, dtype=np.float64))
            head.targets.append(v.p_met if v.p_met is not None else float(v.status is Status.MET))
            del head.vectors[:-MAX_OBSERVATIONS], head.targets[:-MAX_OBSERVATIONS]
            head.fresh = True
        self.pending += len(outcomes)
        self.seen += len(outcomes)
        if self.pending >= self.every:
            self.refit()

    def refit(self) -> None:
        """Refit every head with new examples (MAP around its warm start, from its current weights; a head
        without new examples is already at its optimum)."""
        for head in self.heads.values():
            if head.fresh:
                head.w, head.b = fit_map(np.stack(head.vectors), np.array(head.targets), head.w0, head.b0,
                                         self.prior, start=np.append(head.w, head.b))
                head.ready, head.fresh = True, False
        self.pending = 0
        self.refits += 1
