"""Group-relative GRPO rewards from pairwise rubric judging (OpenRS style): `PairwiseRubricReward`.

A GRPO group is `num_generations` consecutive completions of one prompt (TRL repeats each prompt that
many times in a row). A completion's reward is its criterion-weighted win rate against the other
members of its group:

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
out of the pairs; a completion left with no decided comparison gets None.

Cost: `last_cost` (and the logged metrics `NAME/pairwise_*`) counts the pairs scheduled, the pairs that
needed the pairwise judge and the comparisons asked of it (2 per model-judged criterion and pair).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from rubricrl.core.verdicts import Status, Verdict
from rubricrl.judges.pairwise import PairItem, PairwiseRubricJudge, Preference
from rubricrl.rewards.functions import (ErrorPolicy, JudgeFailure, RubricReward, SampleRecord, _conversation,
                                        _log_judge_spend, _log_metrics, _run, completion_text, unique_requests)
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
        judged = [self._judged_text(t) for t in texts]
        groups = self._groups([(conv, r.content_hash()) for conv, r in zip(conversations, rubrics)])
        before, pair_before = self.judge.report(), self.pairwise.pair_stats.snapshot()

        requests, unique = unique_requests(conversations, judged, rubrics)
        answers = _run(self.pairwise.pointwise(requests)) if requests else []
        verdicts: list[list[Verdict]] = []
        state: list[str] = []  # "ok", "gated" (hard rule or format) or "out" (error policy)
        notes: list[str] = []
        for conv, text, rubric in zip(conversations, judged, rubrics):
            found = answers[unique[(conv, text, rubric.content_hash())]] if text is not None else []
            verdicts.append(found)
            errors = [v for v in found if v.status is Status.ERROR]
            if text is None:
                self.totals["format_gated"] += 1
                state.append("gated")
                notes.append(f"format: no single <{self.judged_span}> span")
            elif errors:
                self.totals["rows_with_errors"] += 1
                self.totals["error_verdicts"] += len(errors)
                reasons = "; ".join(sorted({v.reason for v in errors}))[:300]
                if self.error_policy == "raise":
                    raise JudgeFailure(f"{len(errors)} judge error(s): {reasons}")
                state.append("out")
                notes.append(f"judge error ({self.error_policy}): {reasons}")
            else:
                failed = failed_hard_rules(rubric.criteria, {v.criterion_id: v for v in found})
                state.append("gated" if failed else "ok")
                notes.append(f"hard rule failed: {', '.join(failed)}" if failed else "")

        n = len(texts)
        points, stakes, n_pairs = [0.0] * n, [0.0] * n, [0] * n
        items: list[PairItem] = []
        owners: list[tuple[int, int]] = []
        scheduled = 0
        for g, group in enumerate(groups):
            members = [i for i in group if state[i] != "out"]
            rng = random.Random(f"{self.seed}:{self.calls}:{g}")
            for a, b in schedule_pairs(len(members), self.max_pairs, rng):
                i, j = members[a], members[b]
                scheduled += 1
                n_pairs[i] += 1
                n_pairs[j] += 1
                criteria = rubrics[i].criteria
                if state[i] == "gated" or state[j] == "gated" or judged[i] == judged[j]:
                    winner = "tie" if state[i] == state[j] else "A" if state[i] == "ok" else "B"
                    add_points(points, stakes, i, j, [_at_stake(c) for c in criteria],
                               [Preference(c.id, winner) for c in criteria])
                    continue
                items.append(PairItem(conversations[i], criteria, judged[i], verdicts[i], judged[j], verdicts[j]))
                owners.append((i, j))
        preferences = _run(self.pairwise.prefer(items)) if items else []
        for (i, j), item, prefs in zip(owners, items, preferences):
            add_points(points, stakes, i, j, item.criteria, prefs)

        rewards: list[float | None] = []
        records: list[SampleRecord] = []
        for i in range(n):
            reward: float | None
            note = notes[i]
            if state[i] == "out":
                reward = None if self.error_policy == "mask" else 0.0
            elif stakes[i] > 0:
                reward = points[i] / stakes[i]
                tally = f"pairwise: {points[i]:g} of {stakes[i]:g} weighted points in {n_pairs[i]} pair(s)"
                if state[i] == "gated":
                    reward = min(reward, rubrics[i].hard_rule_gate)
                note = f"{tally}; {note}" if note else tally
            else:
                reward = None
                self.totals["uncompared"] += 1
                note = f"pairwise: no decided comparison; {note}" if note else "pairwise: no decided comparison"
            rewards.append(reward)
            records.append(SampleRecord(prompt=conversations[i][-1].content, completion=texts[i], reward=reward,
                                        note=note, verdicts=[v.model_dump(mode="json") for v in verdicts[i]]))
        pair_after = self.pairwise.pair_stats
        self.last_cost = {"pairs": scheduled, "judged_pairs": len(items),
                          "comparisons": pair_after.comparisons - pair_before.comparisons,
                          "disagreements": pair_after.disagreements - pair_before.disagreements}
        self.calls += 1
        self.totals["completions"] += n
        self.totals["judged"] += len(requests)
        for key, value in self.last_cost.items():
            self.totals[f"pairwise_{key}"] += value
        self.last_records = records
        log_metric = columns.get("log_metric")
        _log_metrics(log_metric, self.__name__, records, len(requests), n)
        if log_metric is not None:
            _log_judge_spend(log_metric, self.__name__, before, self.judge.report())
            for key, value in self.last_cost.items():
                log_metric(f"{self.__name__}/pairwise_{key}", float(value))
        return rewards

    def _groups(self, keys: list[tuple]) -> list[list[int]]:
        """GRPO groups: consecutive blocks of `num_generations`, each of one prompt and rubric; without
        `num_generations`, the runs of consecutive completions with the same prompt and rubric."""
        n, size = len(keys), self.num_generations
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


def _at_stake(c: Criterion) -> Criterion:
    """A criterion counted as positive: a pair decided by a gate gives the passing completion every
    criterion, pitfalls included."""
    return c if c.weight >= 0 else c.model_copy(update={"weight": -c.weight})
