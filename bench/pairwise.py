"""Pairwise vs pointwise rubric judging on pairs with a known winner, one judge model (issue 19, part 2).

Both methods use the same LocalJudge (default: the embedded SmolLM2-135M, no cache, no defences):
- pointwise: each reply judged alone, P(yes) per criterion; the pair's winner is the reply with the
  higher P(yes) (gold pairs) or the higher soft points score over the rubric's model-judged criteria
  (example pairs);
- pairwise: the pair asked in both orders, P(A)/P(B)/P(tie) per criterion (judges/pairwise.py); the
  orders' disagreements are ties; the winner is the criterion's preference (gold pairs) or the higher
  criterion-weighted win rate, pitfalls reversed (example pairs, rewards/pairwise.py `add_points`).
  "soft" also prints the answer averaged over both orders (mean P(A) vs mean P(B)), which cancels an
  additive position bias instead of turning it into ties.

Pairs:
- gold: bench/gold (load_gold from bench/judge_on_policy.py): for one prompt and one model-judged
  criterion, a reply labelled met and a reply labelled unmet; the met one "matches the criterion more"
  (for a pitfall the unmet one is the better reply; agreement is the same either way). One pair per
  (prompt, criterion) at most, then a seeded sample of --gold-pairs;
- examples: examples/generate/pairs.jsonl (chosen beats rejected) on the empathy rubric.

Agreement counts a tie as half right. Cost: forward passes and forward tokens of the judge.

    python -u bench/pairwise.py                       # 100 gold pairs + the 6 example pairs
    python -u bench/pairwise.py --gold-pairs 0           # the example pairs only
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from judge_on_policy import load_gold, read_jsonl  # noqa: E402


def gold_pairs(n: int, seed: int) -> list[dict]:
    """Up to n pairs {prompt, rubric, criterion, met, unmet}, at most one per (prompt, criterion)."""
    from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric

    items, labels = load_gold()
    rng = random.Random(seed)
    by_key: dict[tuple, tuple[list, list]] = defaultdict(lambda: ([], []))
    rubrics = {}
    for item in items:
        rubric = rubrics.setdefault(item["rubric"], load_rubric(bundled_rubric_path(item["rubric"])))
        for c in rubric.criteria:
            if c.check is None:
                by_key[(item["prompt"], item["rubric"], c.id)][0 if labels[item["id"]][c.id] else 1].append(item)
    pairs = []
    for (prompt, rubric, cid), (met, unmet) in sorted(by_key.items()):
        if met and unmet:
            pairs.append({"prompt": prompt, "rubric": rubric, "criterion": rubrics[rubric].criterion(cid),
                          "met": rng.choice(met)["reply"], "unmet": rng.choice(unmet)["reply"]})
    rng.shuffle(pairs)
    return pairs[:n]


def pointwise(judge, jobs: list[tuple]) -> list[list[float]]:
    """P(yes) per criterion for each job (conversation, reply, criteria)."""
    from rubricrl.judges.base import JudgeRequest

    requests = [JudgeRequest(conv, reply, criteria) for conv, reply, criteria in jobs]
    verdicts = judge.judge_sync(requests)
    return [[v.p_met for v in row] for row in verdicts]


def pairwise(judge, jobs: list[tuple], stats) -> list[list]:
    """Both-order preferences per criterion for each job (conversation, a, b, criteria)."""
    from rubricrl.judges.pairwise import PairRequest, compare_both_orders

    requests = [PairRequest(conv, a, b, criteria) for conv, a, b, criteria in jobs]
    return asyncio.run(compare_both_orders(judge, requests, stats))


class Tally:
    def __init__(self):
        self.counts = Counter()

    def add(self, predicted: str, truth: str) -> None:
        self.counts["right" if predicted == truth else "tie" if predicted == "tie" else "wrong"] += 1

    def line(self) -> str:
        c = self.counts
        n = sum(c.values())
        agreement = (c["right"] + 0.5 * c["tie"]) / n if n else float("nan")
        decided = c["right"] + c["wrong"]
        strict = f"{c['right'] / decided:.3f}" if decided else "n/a"
        return (f"agreement {agreement:.3f} (ties half) | right {c['right']}, wrong {c['wrong']}, tie {c['tie']} "
                f"of {n} | accuracy where decided {strict}")


def decide(x: float, y: float) -> str:
    return "A" if x > y else "B" if y > x else "tie"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="judge model (default: the embedded SmolLM2-135M)")
    parser.add_argument("--gold-pairs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the bench machine is shared)")
    args = parser.parse_args()

    import torch

    from rubricrl.core.messages import as_conversation
    from rubricrl.judges.local import LocalJudge

    torch.set_num_threads(args.threads)
    judge = LocalJudge(args.model)
    rng = random.Random(args.seed)
    print(f"judge: {judge.judge_id} / {judge.pair_judge_id}, torch threads {args.threads}")

    def conv(prompt):
        """A prompt string as one user message; a list of messages as it is."""
        return as_conversation([{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt)

    def cost(start, seconds) -> str:
        calls, tokens = judge.stats.model_calls - start[0], judge.stats.tokens - start[1]
        return f"{calls} forward passes, {tokens} forward tokens, {seconds:.0f} s"

    # -- gold pairs: one criterion each --------------------------------------------------------------
    pairs = gold_pairs(args.gold_pairs, args.seed) if args.gold_pairs > 0 else []
    if pairs:
        gold_section(judge, pairs, rng, conv, cost)
    else:
        print("\ngold pairs: none (--gold-pairs 0)")
    example_section(judge, conv, cost)


def gold_section(judge, pairs, rng, conv, cost) -> None:
    from rubricrl.judges.pairwise import PairwiseStats

    shown = [rng.random() < 0.5 for _ in pairs]  # True: the met reply is shown as A in the first order
    by_criterion = Counter(p["criterion"].id for p in pairs)
    print(f"\ngold pairs: {len(pairs)} (one met and one unmet reply to one prompt, one criterion): "
          + ", ".join(f"{k} {v}" for k, v in sorted(by_criterion.items())))

    start, t0 = (judge.stats.model_calls, judge.stats.tokens), time.time()
    jobs = [(conv(p["prompt"]), p[kind], (p["criterion"],)) for p in pairs for kind in ("met", "unmet")]
    p_yes = pointwise(judge, jobs)
    point_cost = cost(start, time.time() - t0)
    point = Tally()
    for k in range(len(pairs)):
        point.add(decide(p_yes[2 * k][0], p_yes[2 * k + 1][0]), "A")  # A = the met reply

    start, t0 = (judge.stats.model_calls, judge.stats.tokens), time.time()
    stats = PairwiseStats()
    jobs = [(conv(p["prompt"]), *((p["met"], p["unmet"]) if s else (p["unmet"], p["met"])), (p["criterion"],))
            for p, s in zip(pairs, shown)]
    prefs = pairwise(judge, jobs, stats)
    pair_cost = cost(start, time.time() - t0)
    pair, soft = Tally(), Tally()
    for s, [pref] in zip(shown, prefs):
        truth = "A" if s else "B"
        pair.add(pref.winner or "tie", truth)
        soft.add(decide(pref.p_a or 0.0, pref.p_b or 0.0), truth)
    print(f"  pointwise (P(yes) of each reply)  : {point.line()}")
    print(f"    cost: {point_cost}")
    print(f"  pairwise (both orders, A/B/tie)   : {pair.line()}")
    print(f"  pairwise soft (mean P(A) vs P(B)) : {soft.line()}")
    print(f"    cost: {pair_cost} ({stats.comparisons} comparisons)")
    print(f"    orders disagreed on {stats.disagreements} of {stats.agreed + stats.disagreements} preferences; "
          f"single-order answers naming the response shown first: {stats.first_shown} of {stats.order_answers}; "
          f"errors {stats.errors}")
    per = defaultdict(lambda: [Tally(), Tally()])
    for p, s, [pref], k in zip(pairs, shown, prefs, range(len(pairs))):
        per[p["criterion"].id][0].add(decide(p_yes[2 * k][0], p_yes[2 * k + 1][0]), "A")
        per[p["criterion"].id][1].add(pref.winner or "tie", "A" if s else "B")
    for cid, (a, b) in sorted(per.items()):
        print(f"    {cid:26s} pointwise {a.line().split(' |')[0]}; pairwise {b.line().split(' |')[0]}")


def example_section(judge, conv, cost) -> None:
    """examples/generate/pairs.jsonl on the empathy rubric's model-judged criteria."""
    from rubricrl.core.verdicts import Status, Verdict
    from rubricrl.judges.pairwise import PairwiseStats
    from rubricrl.rewards.pairwise import add_points
    from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric
    from rubricrl.scoring.formulas import points_score

    rubric = load_rubric(bundled_rubric_path("empathy"))
    criteria = tuple(c for c in rubric.criteria if c.check is None)
    examples = read_jsonl(HERE.parent / "examples" / "generate" / "pairs.jsonl")
    print(f"\nexample pairs: {len(examples)} (examples/generate/pairs.jsonl, chosen beats rejected), "
          f"empathy rubric's {len(criteria)} model-judged criteria: "
          + ", ".join(f"{c.id} {c.weight:+g}" for c in criteria))
    start, t0 = (judge.stats.model_calls, judge.stats.tokens), time.time()
    p_yes = pointwise(judge, [(conv(e["prompt"]), e[kind], criteria) for e in examples
                              for kind in ("chosen", "rejected")])
    point_cost = cost(start, time.time() - t0)
    point = Tally()
    for k in range(len(examples)):
        scores = [points_score(criteria, {c.id: Verdict(criterion_id=c.id, status=Status.MET if p >= 0.5 else
                                                        Status.UNMET, p_met=p, judge_id="bench")
                                          for c, p in zip(criteria, p_yes[2 * k + j])}, soft=True) for j in (0, 1)]
        point.add(decide(*scores), "A")
    start, t0 = (judge.stats.model_calls, judge.stats.tokens), time.time()
    stats = PairwiseStats()
    prefs = pairwise(judge, [(conv(e["prompt"]), e["chosen"], e["rejected"], criteria) for e in examples], stats)
    pair_cost = cost(start, time.time() - t0)
    pair = Tally()
    for row in prefs:
        points, stakes = [0.0, 0.0], [0.0, 0.0]
        add_points(points, stakes, 0, 1, criteria, row)
        pair.add(decide(*points), "A")
    print(f"  pointwise (soft points score)     : {point.line()}")
    print(f"    cost: {point_cost}")
    print(f"  pairwise (weighted win rate)      : {pair.line()}")
    print(f"    cost: {pair_cost} ({stats.comparisons} comparisons)")
    print(f"    orders disagreed on {stats.disagreements} of {stats.agreed + stats.disagreements} criterion "
          f"preferences; first-shown answers {stats.first_shown} of {stats.order_answers}")


if __name__ == "__main__":
    main()
