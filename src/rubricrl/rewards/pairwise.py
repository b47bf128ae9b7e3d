"""Group-relative GRPO rewards from pairwise rubric judging (OpenRS style): `pairwise_results` (awaited,
for any caller) and `PairwiseRubricReward` (TRL's reward function).

A group is the completions of one prompt and rubric; each caller forms it from what its trainer sends:
TRL, `num_generations` consecutive completions (`consecutive_groups`: TRL repeats each prompt that many
times in a row); verl's batch reward function, every sample of the call with that conversation and rubric
(`groups_by_key`: verl may reorder a batch); the reward server, the first `--group-size` rows of that
conversation and rubric, across requests (serve/groups.py). A completion's reward is its
criterion-weighted win rate against the other members of its group:

- pairs: every pair of the group (round robin), or at most `max_pairs` per group, taken round by round
  from a round-robin schedule (circle method) in a seeded random order, so that every completion takes
  part in about as many comparisons (`schedule_pairs`);
- per pair and criterion a preference (judges/pairwise.py `PairwiseRubricJudge`): the pairwise judge,
  asked in both orders, for the model-judged principles; the two pointwise verdicts for rule checks,
  exemplar criteria and hard rules;
- points (`add_points`): a criterion of weight w > 0 gives w to the response that matches it more; a
  pitfall of weight -w gives w to the response that matches it LESS; a tie gives w/2 to each; an
  undecided preference counts for nobody;
- win rate = points won / weights at stake over every pair the completion is in: a number in [0, 1].

Gating, as in pointwise scoring (scoring/formulas.py): a completion that fails a hard rule (or, with
`judged_span`, has no single span) loses every criterion to a completion that passes and ties with
another failing one, without a judge call; its reward is min(win rate, the rubric's hard_rule_gate).
A completion with an `error` verdict follows `error_policy` (None, 0.0 or JudgeFailure) and is left
out of the pairs; a completion left with no decided comparison (or alone in its group) gets None
(`uncompared`; the reward server and verl give it 0.0 flagged `unscored`, `pairwise_row_reward`).

Cost: `last_cost` (and the logged metrics `NAME/pairwise_*`) counts the pairs scheduled, the pairs that
needed the pairwise judge and the comparisons asked of it (2 per model-judged criterion and pair).
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from rubricrl.core.messages import Conversation
from rubricrl.core.verdicts import Status, Verdict
from rubricrl.judges.pairwise import PairItem, PairwiseRubricJudge, Preference
from rubricrl.rewards.functions import (ErrorPolicy, JudgeFailure, RubricReward, SampleRecord, _conversation,
                                        _log_metrics, _run, completion_text, log_judge_spend, unique_requests)
from rubricrl.rewards.rows import RowReward, row_reward
from rubricrl.rubrics.model import Criterion, Rubric
from rubricrl.scoring.formulas import failed_hard_rules


def round_robin_rounds(n: int) -> list[list[tuple[int, int]]]:
    """Every pair of n players in rounds where each player appears at most once (the circle method):
    n - 1 rounds of n / 2 pairs for even n, n rounds of (n - 1) / 2 for odd n. Pairs as (low, high)."""
    players: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        pairs = [(players[k], players[m - 1 - k]) for k in range(m // 2)]
        rounds.append([(min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]
    return [r for r in rounds if r]


def schedule_pairs(n: int, max_pairs: int | None = None, rng: random.Random | None = None) -> list[tuple[int, int]]:
    """The pairs of a group of n to compare: all n(n-1)/2 of them, or the first `max_pairs` of the
    round-robin rounds taken in a random order (each round's pairs shuffled too)."""
    rounds = round_robin_rounds(n)
    total = n * (n - 1) // 2
    if max_pairs is None or max_pairs >= total:
        return sorted(p for r in rounds for p in r)
    rng = rng or random.Random(0)
    rng.shuffle(rounds)
    for r in rounds:
        rng.shuffle(r)
    return [p for r in rounds for p in r][:max_pairs]


def add_points(points: list[float], stakes: list[float], i: int, j: int, criteria: Sequence[Criterion],
               preferences: Sequence[Preference]) -> None:
    """Add the pair (i as A, j as B)'s criterion preferences to the running points and stakes."""
    for c, p in zip(criteria, preferences):
        w = abs(c.weight)
        if p.winner is None or w == 0:
            continue
        stakes[i] += w
        stakes[j] += w
        if p.winner == "tie":
            points[i] += w / 2
            points[j] += w / 2
            continue
        more, less = (i, j) if p.winner == "A" else (j, i)
        points[more if c.weight > 0 else less] += w


Outcome = Literal["scored", "judge_error", "uncompared"]


@dataclass(frozen=True)
class PairwiseRow:
    """One completion to compare: its conversation, the text judged (None: it has no single judged span,
    so it is gated without a judge call) and its rubric."""

    conversation: Conversation
    text: str | None
    rubric: Rubric


@dataclass(frozen=True)
class PairwiseResult:
    """A completion's pairwise outcome. `reward`: its win rate (capped at the rubric's hard_rule_gate when
    `gated`), None unless `status` is `scored`; `problem` says why not (judge errors, no decided
    comparison); `points` of `stakes` weighted points won in `pairs` pairs; `verdicts` are its pointwise
    verdicts (model-judged principles `skipped` with reason DEFERRED); `note` is samples.jsonl's note."""

    reward: float | None
    status: Outcome
    verdicts: tuple[Verdict, ...]
    points: float = 0.0
    stakes: float = 0.0
    pairs: int = 0
    gated: bool = False
    format_gated: bool = False
    error_verdicts: int = 0
    problem: str = ""
    note: str = ""


@dataclass(frozen=True)
class PairwiseCost:
    """What one batch of groups cost: pairs scheduled, pairs that needed the pairwise judge, comparisons
    asked of it (2 per model-judged criterion and pair: both orders) and how many of those disagreed."""

    pairs: int = 0
    judged_pairs: int = 0
    comparisons: int = 0
    disagreements: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


async def pairwise_results(judge: PairwiseRubricJudge, rows: Sequence[PairwiseRow], groups: Sequence[Sequence[int]],
                           *, max_pairs: int | None = None, seed: str = "0",
                           stop_on_error: bool = False) -> tuple[list[PairwiseResult], PairwiseCost]:
    """Every row's win rate within its group (the module docstring), awaited: pointwise verdicts first,
    then the preferences of the scheduled pairs. `groups` are lists of row indices (every row in one);
    group g's pairs are drawn with `random.Random(f"{seed}:{g}")`. `stop_on_error` raises JudgeFailure
    as soon as a pointwise verdict is an error (error policy `raise`), before any pairwise call."""
    requests, unique = unique_requests([r.conversation for r in rows], [r.text for r in rows],
                                       [r.rubric for r in rows])
    answers = await judge.pointwise(requests) if requests else []
    verdicts: list[list[Verdict]] = []
    state: list[str] = []  # "ok", "gated" (hard rule or format) or "out" (judge error)
    notes: list[str] = []
    for row in rows:
        found = answers[unique[(row.conversation, row.text, row.rubric.content_hash())]] if row.text is not None else []
        verdicts.append(found)
        errors = [v for v in found if v.status is Status.ERROR]
        if row.text is None:
            state.append("gated")
            notes.append("format: no single judged span")
        elif errors:
            reasons = "; ".join(sorted({v.reason for v in errors}))[:300]
            if stop_on_error:
                raise JudgeFailure(f"{len(errors)} judge error(s): {reasons}")
            state.append("out")
            notes.append(f"{len(errors)} judge error(s): {reasons}")
        else:
            failed = failed_hard_rules(row.rubric.criteria, {v.criterion_id: v for v in found})
            state.append("gated" if failed else "ok")
            notes.append(f"hard rule failed: {', '.join(failed)}" if failed else "")

    n = len(rows)
    points, stakes, n_pairs = [0.0] * n, [0.0] * n, [0] * n
    items: list[PairItem] = []
    owners: list[tuple[int, int]] = []
    scheduled = 0
    pair_before = judge.pair_stats.snapshot()
    for g, group in enumerate(groups):
        members = [i for i in group if state[i] != "out"]
        for a, b in schedule_pairs(len(members), max_pairs, random.Random(f"{seed}:{g}")):
            i, j = members[a], members[b]
            scheduled += 1
            n_pairs[i] += 1
            n_pairs[j] += 1
            criteria = rows[i].rubric.criteria
            if state[i] == "gated" or state[j] == "gated" or rows[i].text == rows[j].text:
                winner = "tie" if state[i] == state[j] else "A" if state[i] == "ok" else "B"
                add_points(points, stakes, i, j, [_at_stake(c) for c in criteria],
                           [Preference(c.id, winner) for c in criteria])
                continue
            items.append(PairItem(rows[i].conversation, criteria, rows[i].text, verdicts[i], rows[j].text,
                                  verdicts[j]))
            owners.append((i, j))
    preferences = await judge.prefer(items) if items else []
    for (i, j), item, prefs in zip(owners, items, preferences):
        add_points(points, stakes, i, j, item.criteria, prefs)

    results = []
    for i, row in enumerate(rows):
        common = dict(verdicts=tuple(verdicts[i]), points=points[i], stakes=stakes[i], pairs=n_pairs[i],
                      gated=state[i] == "gated", format_gated=row.text is None,
                      error_verdicts=sum(v.status is Status.ERROR for v in verdicts[i]))
        if state[i] == "out":
            results.append(PairwiseResult(None, "judge_error", problem=notes[i], note=notes[i], **common))
        elif stakes[i] > 0:
            reward = points[i] / stakes[i]
            if state[i] == "gated":
                reward = min(reward, row.rubric.hard_rule_gate)
            tally = f"pairwise: {points[i]:g} of {stakes[i]:g} weighted points in {n_pairs[i]} pair(s)"
            results.append(PairwiseResult(reward, "scored", note=f"{tally}; {notes[i]}" if notes[i] else tally,
                                          **common))
        else:
            why = ("pairwise: no other completion of its prompt and rubric to compare with (a group needs at least "
                   "two)" if n_pairs[i] == 0 else "pairwise: no decided comparison")
            results.append(PairwiseResult(None, "uncompared", problem=why,
                                          note=f"{why}; {notes[i]}" if notes[i] else why, **common))
    after = judge.pair_stats
    cost = PairwiseCost(scheduled, len(items), after.comparisons - pair_before.comparisons,
                        after.disagreements - pair_before.disagreements)
    return results, cost


def consecutive_groups(keys: Sequence[Hashable], size: int | None) -> list[list[int]]:
    """TRL's GRPO groups: consecutive blocks of `size` completions, each of one prompt and rubric (`keys`);
    without `size`, the runs of consecutive completions with the same key."""
    n = len(keys)
    if size is None:
        groups: list[list[int]] = []
        for i, key in enumerate(keys):
            if groups and keys[groups[-1][0]] == key:
                groups[-1].append(i)
            else:
                groups.append([i])
        return groups
    if n % size:
        raise ValueError(f"{n} completions do not make whole groups of num_generations={size}; pairwise rewards "
                         "compare the completions of one prompt, so each call must hold whole groups")
    groups = [list(range(s, s + size)) for s in range(0, n, size)]
    for group in groups:
        if len({keys[i] for i in group}) > 1:
            raise ValueError(f"completions {group[0]} to {group[-1]} are not all for one prompt and rubric; "
                             f"pairwise rewards need each prompt's {size} completions one after another (TRL's "
                             "GRPO order)")
    return groups


def groups_by_key(keys: Sequence[Hashable]) -> list[list[int]]:
    """Every completion of one prompt and rubric (`keys`) in one group, wherever it stands in the batch (verl
    may reorder a batch to balance its workers), in order of first appearance."""
    groups: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return list(groups.values())


class PairwiseRubricReward(RubricReward):
    """TRL reward function `f(prompts, completions, **columns) -> list[float | None]` (module doc).

    `judge`: a PairwiseRubricJudge (judges/pairwise.py). `num_generations`: the GRPO group size (None:
    a group is a run of consecutive completions of the same prompt and rubric). `max_pairs`: at most
    this many pairs per group (None: every pair). `seed`: the pair sampling's seed (each call draws
    anew). `last_records` and `totals` as in RubricReward."""

    def __init__(self, judge: PairwiseRubricJudge, rubric: Rubric | None = None, *, num_generations: int | None = None,
                 max_pairs: int | None = None, seed: int = 0, error_policy: ErrorPolicy = "mask",
                 judged_span: str | None = None, name: str = "rubric", rubrics: dict[str, Rubric] | None = None):
        if num_generations is not None and num_generations < 2:
            raise ValueError("num_generations must be at least 2: a group needs two completions to compare")
        if max_pairs is not None and max_pairs < 1:
            raise ValueError("max_pairs must be at least 1")
        super().__init__(judge, rubric, error_policy=error_policy, soft=judge.soft, judged_span=judged_span,
                         name=name, rubrics=rubrics)
        self.pairwise = judge
        self.num_generations, self.max_pairs, self.seed = num_generations, max_pairs, seed
        self.calls = 0
        self.last_cost: dict[str, int] = {}

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        rubrics = self._rubrics(columns.get("rubric"), len(prompts))
        conversations = [_conversation(p) for p in columns.get("original_prompt") or prompts]
        texts = [completion_text(c) for c in completions]
        rows = [PairwiseRow(conv, self._judged_text(t), rubric)
                for conv, t, rubric in zip(conversations, texts, rubrics)]
        groups = consecutive_groups([(conv, r.content_hash()) for conv, r in zip(conversations, rubrics)],
                                    self.num_generations)
        before = self.judge.report()
        results, cost = _run(pairwise_results(self.pairwise, rows, groups, max_pairs=self.max_pairs,
                                              seed=f"{self.seed}:{self.calls}",
                                              stop_on_error=self.error_policy == "raise"))
        rewards: list[float | None] = []
        records: list[SampleRecord] = []
        for row, text, result in zip(rows, texts, results):
            note = result.note
            if result.format_gated:
                note = note.replace("no single judged span", f"no single <{self.judged_span}> span")
                self.totals["format_gated"] += 1
            if result.status == "judge_error":
                self.totals["rows_with_errors"] += 1
                self.totals["error_verdicts"] += result.error_verdicts
                reward = None if self.error_policy == "mask" else 0.0
                note = f"judge error ({self.error_policy}): {note.split(': ', 1)[1]}"
            else:
                reward = result.reward
                if result.status == "uncompared":
                    self.totals["uncompared"] += 1
            rewards.append(reward)
            records.append(SampleRecord(prompt=row.conversation[-1].content, completion=text, reward=reward,
                                        note=note, verdicts=[v.model_dump(mode="json") for v in result.verdicts]))
        self.last_cost = cost.to_dict()
        self.calls += 1
        judged = len({(r.conversation, r.text, r.rubric.content_hash()) for r in rows if r.text is not None})
        self.totals["completions"] += len(rows)
        self.totals["judged"] += judged
        for key, value in self.last_cost.items():
            self.totals[f"pairwise_{key}"] += value
        self.last_records = records
        log_metric = columns.get("log_metric")
        _log_metrics(log_metric, self.__name__, records, judged, len(rows))
        if log_metric is not None:
            log_judge_spend(log_metric, self.__name__, before, self.judge.report())
            for key, value in self.last_cost.items():
                log_metric(f"{self.__name__}/pairwise_{key}", float(value))
        return rewards


def pairwise_row_reward(rubric: Rubric, result: PairwiseResult, *, soft: bool = True,
                        verifiers: frozenset[str] = frozenset()) -> RowReward:
    """A pairwise result as the reward server and verl report a row (rewards/rows.py): the reward is the win
    rate; the score, points, coverage, skipped and gated logs describe its pointwise part (rule checks,
    exemplar criteria, hard rules; the principles compared pairwise count as skipped there); `pairs` the
    pairs it was compared in. A row with a judge error or without a decided comparison gets 0.0 under
    the error policy, like a pointwise row."""
    base = row_reward(rubric, result.verdicts, soft=soft, verifiers=verifiers)
    if result.status == "scored":
        return replace(base, reward=result.reward, status="scored", problem="", pairs=result.pairs)
    if result.status == "judge_error":
        return replace(base, reward=0.0, status="judge_error", pairs=result.pairs)
    return replace(base, reward=0.0, status="unscored", problem=result.problem, pairs=result.pairs)


def _at_stake(c: Criterion) -> Criterion:
    """A criterion counted as positive: a pair decided by a gate gives the passing completion every
    criterion, pitfalls included."""
    return c if c.weight >= 0 else c.model_copy(update={"weight": -c.weight})
