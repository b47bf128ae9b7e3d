"""Critic mode (issue 19, judges/critic.py): how many verifier calls does a critic save, and how faithful
is the reward it leaves?

On the on-policy gold set (bench/gold/), restricted to the items whose prompt the bundled (default)
exemplar models were never fitted on, and grouped by prompt like GRPO groups (5 or 10 replies each),
every reply is scored with the full rubric (rule checks included, soft p_met scores, as the training
reward) twice:
- exhaustive: the verifier judges every model-judged criterion;
- critic mode: `critic:k=K:exemplar>VERIFIER` (fixed: the bundled exemplar models) and
  `critic:k=K,online=32:exemplar>VERIFIER` (refitted from the verifications so far), for K = 1, 2, 4 and
  both rankings (`fail`, `uncertain`), through the real RoutedJudge and CriticJudge. Groups are judged
  one call per group, in a fixed shuffled order, like training steps; the online critic learns as it goes.
Printed per setting: verifier calls per reply, the share saved, Spearman's rho between critic-mode and
exhaustive rewards within each group (mean over groups where both vary; also for the model-judged part
of the reward alone), and the share of verified criteria the verifier found failed (the critic's reward).
Baselines: the critic alone (no verification) and K criteria chosen at random.

The verifier:
- `oracle` (default): the gold labels themselves (p_met 1 or 0), read as if a perfect verifier had
  judged each criterion; it costs nothing, so the bench measures the critic, not a verifier;
- `local`: the embedded LLM judge (SmolLM2-135M, yes/no P(yes)); its verdicts for every (reply,
  criterion) are computed once, exhaustively, and replayed to the critic modes (a verdict of the local
  judge does not depend on the other criteria asked with it), so calls are counted, not re-run.

    python -u bench/critic.py                         # oracle verifier
    python -u bench/critic.py --verifier oracle --verifier local

Targets (issue 19): >= 50% fewer verifier calls at rho >= 0.9; the online critic beats the fixed one.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge_on_policy import GOLD, load_gold, read_jsonl, unseen_items  # noqa: E402

KS = (1, 2, 4)
ONLINE_EVERY = 32
SEED = 0


def ranks(values: list[float]) -> list[float]:
    """Average ranks (ties share the mean of their positions), 1-based."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for m in range(i, j + 1):
            out[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rho (Pearson correlation of average ranks); None when either side is constant."""
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    sa = sum((x - ma) ** 2 for x in ra)
    sb = sum((y - mb) ** 2 for y in rb)
    if sa == 0 or sb == 0:
        return None
    return sum((x - ma) * (y - mb) for x, y in zip(ra, rb)) / (sa * sb) ** 0.5


class TableJudge:
    """A verifier that answers from a table of verdicts, (reply, criterion id) -> Verdict; one call per
    criterion asked (as the logprob and per_criterion HTTP modes)."""

    explains = False

    def __init__(self, judge_id: str, table: dict):
        from rubricrl.judges.base import JudgeStats

        self.judge_id, self.table, self.stats = judge_id, table, JudgeStats()

    def report(self):
        from rubricrl.judges.base import JudgeReport

        return JudgeReport(self.judge_id, self.stats.snapshot())

    async def judge(self, requests):
        out = []
        for r in requests:
            self.stats.model_calls += len(r.criteria)
            out.append([self.table[(r.response, c.id)] for c in r.criteria])
        return out


def oracle_table(items: list[dict], labels: dict, model_criteria: dict) -> dict:
    from rubricrl.core.verdicts import Status, Verdict

    return {(i["reply"], c.id): Verdict(criterion_id=c.id, status=Status.MET if labels[i["id"]][c.id] else Status.UNMET,
                                        p_met=1.0 if labels[i["id"]][c.id] else 0.0, judge_id="oracle:gold-labels")
            for i in items for c in model_criteria[i["rubric"]]}


def local_table(items: list[dict], requests: list) -> dict:
    import torch

    from rubricrl.judges.registry import BuildOptions, lookup

    torch.set_num_threads(1)
    judge = lookup("local").build("", BuildOptions(cache=False))
    table = {}
    for start in range(0, len(requests), 16):
        batch = requests[start:start + 16]
        for req, row in zip(batch, asyncio.run(judge.judge(batch))):
            table.update({(req.response, v.criterion_id): v for v in row})
        print(f"  local verifier: {min(start + 16, len(requests))}/{len(requests)}", file=sys.stderr, flush=True)
    return table


def run_setting(judge, groups: list[list[int]], requests: list, rubrics: list, model_ids: list) -> dict:
    """Judge each group in one call; rewards (full and model-judged part) per item."""
    from rubricrl.scoring.formulas import points_score, score_row

    full, model = {}, {}
    for group in groups:
        answers = asyncio.run(judge.judge([requests[i] for i in group]))
        for i, verdicts in zip(group, answers):
            full[i] = score_row(rubrics[i], verdicts, soft=True).score
            by_id = {v.criterion_id: v for v in verdicts}
            model[i] = points_score([c for c in rubrics[i].criteria if c.id in model_ids[i]], by_id, soft=True)
    return {"full": full, "model": model}


def fidelity(groups: list[list[int]], got: dict, exhaustive: dict) -> tuple[float | None, int]:
    rhos = []
    for group in groups:
        a = [got[i] for i in group]
        b = [exhaustive[i] for i in group]
        if any(x is None for x in a + b):
            continue
        rho = spearman(a, b)
        if rho is not None:
            rhos.append(rho)
    return (sum(rhos) / len(rhos) if rhos else None), len(rhos)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verifier", action="append", choices=("oracle", "local"))
    parser.add_argument("--groups", type=int, default=None, help="only the first N prompt groups (a smoke run)")
    args = parser.parse_args()
    verifiers = args.verifier or ["oracle"]
    started = time.perf_counter()

    from rubricrl.core.messages import as_conversation
    from rubricrl.judges import Defences, JudgeRequest, RoutedJudge
    from rubricrl.judges.critic import CriticJudge, CriticSettings, OnlineCritic
    from rubricrl.judges.exemplar import ExemplarJudge
    from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric

    items, labels = load_gold()
    prompt_of = {row["id"]: row["prompt_id"] for row in read_jsonl(GOLD / "sources.jsonl")}
    items = unseen_items("exemplar", items)
    prompts = sorted({prompt_of[i["id"]] for i in items})
    random.Random(SEED).shuffle(prompts)  # the order groups are judged in, like training steps
    prompts = prompts[:args.groups] if args.groups is not None else prompts
    items = sorted((i for i in items if prompt_of[i["id"]] in prompts),
                   key=lambda i: prompts.index(prompt_of[i["id"]]))
    rubric_by_name = {n: load_rubric(bundled_rubric_path(n)) for n in sorted({i["rubric"] for i in items})}
    model_criteria = {n: [c for c in r.criteria if c.check is None] for n, r in rubric_by_name.items()}
    requests = [JudgeRequest(as_conversation([{"role": "user", "content": i["prompt"]}]), i["reply"],
                             rubric_by_name[i["rubric"]].criteria) for i in items]
    rubrics = [rubric_by_name[i["rubric"]] for i in items]
    model_ids = [{c.id for c in model_criteria[i["rubric"]]} for i in items]
    by_prompt = defaultdict(list)
    for n, item in enumerate(items):
        by_prompt[prompt_of[item["id"]]].append(n)
    groups = [by_prompt[p] for p in prompts]
    n_model = sum(len(m) for m in model_ids)
    print(f"gold items never seen by the bundled exemplar models: {len(items)} replies in {len(groups)} prompt "
          f"groups ({sorted({len(g) for g in groups})} replies each), {n_model} model-judged (reply, criterion) "
          f"pairs, {n_model / len(items):.2f} per reply; online critic refits every {ONLINE_EVERY} verifications")

    exemplar = ExemplarJudge()
    model_only_requests = [JudgeRequest(r.conversation, r.response, tuple(c for c in r.criteria if c.check is None))
                           for r in requests]
    estimates = {}
    for start in range(0, len(items), 64):
        batch = model_only_requests[start:start + 64]
        for req, row in zip(batch, asyncio.run(exemplar.judge(batch))):
            estimates.update({(req.response, v.criterion_id): v for v in row})

    for name in verifiers:
        table = (oracle_table(items, labels, model_criteria) if name == "oracle"
                 else local_table(items, model_only_requests))
        verifier_id = "oracle:gold-labels" if name == "oracle" else "local (replayed)"
        print(f"\n## verifier: {name}" + (" (the gold labels as a perfect verifier)" if name == "oracle" else
                                         " (the embedded SmolLM2-135M yes/no judge, verdicts computed once)"))
        exhaustive_judge = TableJudge(verifier_id, table)
        exhaustive = run_setting(RoutedJudge(exhaustive_judge, defences=Defences()), groups, requests, rubrics,
                                 model_ids)
        calls_all = exhaustive_judge.stats.model_calls
        rows = [("exhaustive", "-", calls_all / len(items), 0.0, 1.0, 1.0, 1.0, len(groups), None)]
        later = groups[len(groups) // 2:]  # the second half: the online critic has learned from the first

        def add(label: str, k, calls: int, got: dict, hit: float | None) -> None:
            rho_full, n_groups = fidelity(groups, got["full"], exhaustive["full"])
            rho_model, _ = fidelity(groups, got["model"], exhaustive["model"])
            rho_later, _ = fidelity(later, got["full"], exhaustive["full"])
            rows.append((label, k, calls / len(items), 1 - calls / calls_all, rho_full, rho_model, rho_later, n_groups,
                         hit))

        critic_only = TableJudge("exemplar estimates", estimates)
        add("critic alone (no verification)", 0, 0,
            run_setting(RoutedJudge(critic_only, defences=Defences()), groups, requests, rubrics, model_ids), None)
        for k in KS:
            rng = random.Random(SEED + k)
            mixed = {}
            for n, item in enumerate(items):
                ids = [c.id for c in model_criteria[item["rubric"]]]
                chosen = set(rng.sample(ids, min(k, len(ids))))
                mixed.update({(item["reply"], cid): table[(item["reply"], cid)] if cid in chosen
                              else estimates[(item["reply"], cid)] for cid in ids})
            calls = sum(min(k, len(m)) for m in model_ids)
            add("random k", k, calls, run_setting(RoutedJudge(TableJudge("random", mixed), defences=Defences()),
                                                  groups, requests, rubrics, model_ids), None)
        for rank in ("fail", "uncertain"):
            for online in (False, True):
                for k in KS:
                    verifier = TableJudge(verifier_id, table)
                    critic = (OnlineCritic.from_exemplar(exemplar, every=ONLINE_EVERY) if online else exemplar)
                    judge = CriticJudge(critic, verifier, CriticSettings(k=k, rank=rank))
                    got = run_setting(RoutedJudge(judge, defences=Defences()), groups, requests, rubrics, model_ids)
                    st = judge.stats
                    label = f"{'online' if online else 'fixed'} critic, rank={rank}"
                    add(label, k, verifier.stats.model_calls, got, st.confirmed / st.verified if st.verified else None)

        print("| setting | k | verifier calls / reply | saved | rho, reward | rho, model-judged part | "
              "rho, reward, 2nd half of groups | groups with rho | verified found failed |")
        print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
        for label, k, per_reply, saved, rho_full, rho_model, rho_later, n_groups, hit in rows:
            print(f"| {label} | {k} | {per_reply:.2f} | {saved:.0%} | {fmt(rho_full)} | {fmt(rho_model)} | "
                  f"{fmt(rho_later)} | {n_groups} | {'-' if hit is None else f'{hit:.0%}'} |")
        print(f"({time.perf_counter() - started:.0f} s so far)", flush=True)


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


if __name__ == "__main__":
    main()
