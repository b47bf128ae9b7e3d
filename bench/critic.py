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
exhaustive rewards within each group (mean over the groups where the exhaustive reward varies, a group
the setting gives one reward for all replies counting 0; also for the model-judged part alone), the mean absolute reward error and GRPO advantage error against exhaustive
verification (advantages as TRL computes them, (r - group mean) / (group std + 1e-4)), and the share of
verified criteria the verifier found failed (the critic's reward).
Baselines: the critic alone (no verification) and K criteria chosen at random.

A second table holds the settings of issue 19's second round (same runs, same groups): the group budget
(`budget=group`: k x n verifications per group of n replies, spent on the group's most uncertain
criteria), the critic's likelier outcome for unverified criteria (`unverified=hard`), the uncertainty
cutoff (`u=X`) and the p_fail cutoff (`p=X`), both with a variable number of calls per reply, each with
the fixed and the online critic; plus random k and the critic alone with hard estimates, as controls,
an experiment that is no spec option: the fixed critic's p_met of a positive criterion times the
quality gate's p_ok; and hindsight rows (not a critic): per group, the k x n pairs whose estimate is
furthest from the verifier's verdict are verified, what a critic that knew its own errors would reach.

Before the tables, per verifier: how predictable it is from the reply (per criterion: its p_met's mean
and standard deviation, the out-of-fold R^2 of a ridge regression on the reply's sentence embedding,
folds grouped by prompt, and the correlation with the exemplar critic), and the mean within-group
standard deviation of the exhaustive reward: what any embedding critic is up against.

Fixed vs online, fairly: the fixed critic does not depend on the order of the groups, the online one
does (it learns from the groups before). `--orders N` re-runs the online critic for the settings of the
third table over N shuffled group orders (seeds 0..N-1) and prints, per setting, the fixed critic's rho,
the online critic's mean rho over the orders, and in how many orders the online one is higher (over all
groups and over the second half of each order).

The verifier:
- `oracle` (default): the gold labels themselves (p_met 1 or 0), read as if a perfect verifier had
  judged each criterion; it costs nothing, so the bench measures the critic, not a verifier;
- `local`: the embedded LLM judge (SmolLM2-135M, yes/no P(yes)); its verdicts for every (reply,
  criterion) are computed once, exhaustively, and replayed to the critic modes (a verdict of the local
  judge does not depend on the other criteria asked with it), so calls are counted, not re-run.

    python -u bench/critic.py                         # oracle verifier
    python -u bench/critic.py --verifier oracle --verifier local --local-verdicts /tmp/local-verdicts.json

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

import numpy as np  # noqa: E402

from judge_on_policy import GOLD, load_gold, read_jsonl, unseen_items  # noqa: E402

KS = (1, 2, 4)
CUTOFFS = (0.05, 0.1, 0.2)  # u=X
P_CUTOFFS = (0.5, 0.9)  # p=X
ONLINE_EVERY = 32
SEED = 0
# the third table: fixed vs online over several group orders
ORDER_SETTINGS = ("k=2", "k=2,rank=uncertain", "k=1,rank=uncertain,budget=group,unverified=hard",
                  "k=2,rank=uncertain,budget=group,unverified=hard", "u=0.1,unverified=hard")


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rho (scipy: Pearson correlation of average ranks); None when either side is constant."""
    from scipy.stats import spearmanr

    if len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return float(spearmanr(a, b).statistic)


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


def local_table(items: list[dict], requests: list, keep: Path | None = None) -> dict:
    """The local judge's verdict for every (reply, criterion); with `keep`, read from that JSON file when it
    exists (written by an earlier run on the same items), else computed and written there."""
    import json

    from rubricrl.core.verdicts import Verdict

    if keep is not None and keep.is_file():
        rows = json.loads(keep.read_text("utf-8"))
        table = {(r["reply"], r["verdict"]["criterion_id"]): Verdict.model_validate(r["verdict"]) for r in rows}
        missing = [(q.response, c.id) for q in requests for c in q.criteria if (q.response, c.id) not in table]
        if missing:
            raise SystemExit(f"{keep}: no local verdict for {len(missing)} (reply, criterion) pairs; delete the file "
                             "to judge them again")
        print(f"  local verifier: {len(table)} verdicts read from {keep}", file=sys.stderr, flush=True)
        return table
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
    if keep is not None:
        keep.write_text(json.dumps([{"reply": r, "verdict": v.model_dump(mode="json")} for (r, _), v in table.items()]),
                        "utf-8")
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
    """Mean within-group Spearman's rho over the groups whose exhaustive reward varies; a setting that gives
    such a group one reward for all replies (no order at all) counts as rho 0. Also returns how many
    groups that was."""
    rhos, constant = [], 0
    for group in groups:
        a = [got[i] for i in group]
        b = [exhaustive[i] for i in group]
        if any(x is None for x in a + b) or len(set(b)) < 2:
            continue
        rho = spearman(a, b)
        constant += rho is None
        rhos.append(0.0 if rho is None else rho)
    return (sum(rhos) / len(rhos) if rhos else None), constant


def advantages(rewards: list[float]):
    """GRPO advantages of one group as TRL computes them: (r - group mean) / (group std + 1e-4), std with
    Bessel's correction (torch.std)."""
    import numpy as np

    r = np.asarray(rewards, dtype=np.float64)
    return (r - r.mean()) / (r.std(ddof=1) + 1e-4)


def errors(groups: list[list[int]], got: dict, exhaustive: dict) -> tuple[float, float]:
    """Mean |reward - exhaustive reward| over replies, and mean |advantage - exhaustive advantage| (GRPO)."""
    import numpy as np

    pairs = [(got[i], exhaustive[i]) for g in groups for i in g if got[i] is not None and exhaustive[i] is not None]
    reward_error = float(np.mean([abs(a - b) for a, b in pairs]))
    adv = [np.abs(advantages([got[i] for i in g]) - advantages([exhaustive[i] for i in g]))
           for g in groups if all(got[i] is not None and exhaustive[i] is not None for i in g)]
    return reward_error, float(np.mean(np.concatenate(adv)))


def predictability(items: list[dict], model_criteria: dict, table: dict, estimates: dict, prompts: list[str],
                   encoder: str) -> None:
    """How well could any critic that reads the reply's sentence embedding predict this verifier? Per
    criterion: the verifier's p_met (mean, standard deviation), the out-of-fold R^2 of a ridge regression
    of it on the reply's embedding (5 folds grouped by prompt, scikit-learn), and its correlation with the
    bundled exemplar critic's p_met."""
    from sklearn.linear_model import RidgeCV
    from sklearn.metrics import r2_score
    from sklearn.model_selection import GroupKFold, cross_val_predict

    from rubricrl.llm.encoder import embed

    vectors = embed([i["reply"] for i in items], encoder)
    print("\n| criterion | pairs | verifier p_met, mean | sd | out-of-fold R^2 from the reply's embedding | "
          "correlation with the exemplar critic |")
    print("|---|--:|--:|--:|--:|--:|")
    for cid in sorted({c.id for cs in model_criteria.values() for c in cs}):
        rows = [n for n, i in enumerate(items) if any(c.id == cid for c in model_criteria[i["rubric"]])]
        y = np.array([table[(items[n]["reply"], cid)].p_met for n in rows])
        q = np.array([estimates[(items[n]["reply"], cid)].p_met for n in rows])
        if y.std() == 0:
            print(f"| {cid} | {len(rows)} | {y.mean():.3f} | 0 | - (constant) | - |")
            continue
        oof = cross_val_predict(RidgeCV(alphas=np.logspace(-2, 3, 12)), vectors[rows], y,
                                groups=[prompts[n] for n in rows], cv=GroupKFold(5))
        print(f"| {cid} | {len(rows)} | {y.mean():.3f} | {y.std():.3f} | {r2_score(y, oof):+.2f} | "
              f"{np.corrcoef(y, q)[0, 1]:+.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verifier", action="append", choices=("oracle", "local"))
    parser.add_argument("--groups", type=int, default=None, help="only the first N prompt groups (a smoke run)")
    parser.add_argument("--orders", type=int, default=10, help="group orders for the fixed vs online table (0: none)")
    parser.add_argument("--local-verdicts", type=Path, default=None,
                        help="JSON file keeping the local verifier's verdicts between runs (read when it exists)")
    args = parser.parse_args()
    verifiers = args.verifier or ["oracle"]
    started = time.perf_counter()

    from rubricrl.core.messages import as_conversation
    from rubricrl.core.verdicts import Status
    from rubricrl.judges import Defences, JudgeRequest, RoutedJudge
    from rubricrl.judges.critic import CriticJudge, CriticSettings, OnlineCritic
    from rubricrl.judges.exemplar import ExemplarJudge
    from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric

    items, labels = load_gold()
    prompt_of = {row["id"]: row["prompt_id"] for row in read_jsonl(GOLD / "sources.jsonl")}
    items = unseen_items("exemplar", items)
    all_prompts = sorted({prompt_of[i["id"]] for i in items})
    prompts = list(all_prompts)
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
    hard_estimates = {key: v.model_copy(update={"status": Status.MET if v.p_met >= 0.5 else Status.UNMET,
                                                "p_met": 1.0 if v.p_met >= 0.5 else 0.0})
                      for key, v in estimates.items()}
    # an experiment, not a spec option: the exemplar estimate of a positive criterion times the quality gate's
    # p_ok (the probability that the reply is coherent and does not deflect), as a critic
    from rubricrl.judges.gate import QualityGate

    gate = QualityGate().assess([i["prompt"] for i in items], [i["reply"] for i in items])
    weight = {c.id: c.weight for cs in model_criteria.values() for c in cs}
    p_ok = {i["reply"]: g.p_ok for i, g in zip(items, gate)}
    gated_estimates = {}
    for (reply, cid), v in estimates.items():
        p = v.p_met * p_ok[reply] if weight[cid] > 0 else v.p_met
        gated_estimates[(reply, cid)] = v.model_copy(update={"p_met": p, "status": Status.MET if p >= 0.5
                                                             else Status.UNMET})

    for name in verifiers:
        table = (oracle_table(items, labels, model_criteria) if name == "oracle"
                 else local_table(items, model_only_requests, args.local_verdicts))
        verifier_id = "oracle:gold-labels" if name == "oracle" else "local (replayed)"
        print(f"\n## verifier: {name}" + (" (the gold labels as a perfect verifier)" if name == "oracle" else
                                         " (the embedded SmolLM2-135M yes/no judge, verdicts computed once)"))
        exhaustive_judge = TableJudge(verifier_id, table)
        exhaustive = run_setting(RoutedJudge(exhaustive_judge, defences=Defences()), groups, requests, rubrics,
                                 model_ids)
        calls_all = exhaustive_judge.stats.model_calls
        varies = sum(len({exhaustive["full"][i] for i in g}) > 1 for g in groups)
        print(f"the exhaustive reward varies in {varies} of the {len(groups)} groups: rho is averaged over those")
        predictability(items, model_criteria, table, estimates, [prompt_of[i["id"]] for i in items], exemplar.encoder)
        wrong = sum(table[key].status is not hard_estimates[key].status for key in hard_estimates)
        print(f"the critic's likelier outcome (p_met >= 0.5) disagrees with the verifier's status on {wrong} of "
              f"{len(hard_estimates)} distinct (reply, criterion) pairs")
        spread = [float(np.std([exhaustive["full"][i] for i in g])) for g in groups]
        print(f"within-group standard deviation of the exhaustive reward: mean {np.mean(spread):.3f} (reward scale 0-1)")
        exhaustive_row = ("exhaustive", "-", calls_all / len(items), 0.0, 1.0, 1.0, 1.0, 0, 0.0, 0.0, None)
        first, second = [exhaustive_row], [exhaustive_row]
        later = groups[len(groups) // 2:]  # the second half: the online critic has learned from the first

        def add(rows: list, label: str, k, calls: int, got: dict, hit: float | None) -> None:
            rho_full, n_constant = fidelity(groups, got["full"], exhaustive["full"])
            rho_model, _ = fidelity(groups, got["model"], exhaustive["model"])
            rho_later, _ = fidelity(later, got["full"], exhaustive["full"])
            reward_error, advantage_error = errors(groups, got["full"], exhaustive["full"])
            rows.append((label, k, calls / len(items), 1 - calls / calls_all, rho_full, rho_model, rho_later, n_constant,
                         reward_error, advantage_error, hit))

        def random_k(k: int, source: dict) -> dict:
            rng = random.Random(SEED + k)
            mixed = {}
            for item in items:
                ids = [c.id for c in model_criteria[item["rubric"]]]
                chosen = set(rng.sample(ids, min(k, len(ids))))
                mixed.update({(item["reply"], cid): table[(item["reply"], cid)] if cid in chosen
                              else source[(item["reply"], cid)] for cid in ids})
            return run_setting(RoutedJudge(TableJudge("random", mixed), defences=Defences()), groups, requests,
                               rubrics, model_ids)

        def hindsight(k: int, source: dict) -> dict:
            """Not a critic: per group, the k x n (reply, criterion) pairs whose estimate is furthest from the
            verifier's verdict (|weight| x |difference|) are verified: what a critic that knew its own errors
            would reach with the group budget (greedy by error size, not by effect on the order, so no strict
            upper bound)."""
            mixed = {}
            for group in groups:
                pairs = [(abs(c.weight) * abs(table[(items[n]["reply"], c.id)].p_met
                                              - source[(items[n]["reply"], c.id)].p_met), n, c.id)
                         for n in group for c in model_criteria[items[n]["rubric"]]]
                pairs.sort(key=lambda t: -t[0])
                chosen = {(n, cid) for _, n, cid in pairs[:k * len(group)]}
                for n in group:
                    for c in model_criteria[items[n]["rubric"]]:
                        key = (items[n]["reply"], c.id)
                        mixed[key] = table[key] if (n, c.id) in chosen else source[key]
            return run_setting(RoutedJudge(TableJudge("hindsight", mixed), defences=Defences()), groups, requests,
                               rubrics, model_ids)

        def critic_mode(settings: CriticSettings, online: bool, order: list[list[int]] = groups, critic=None):
            verifier = TableJudge(verifier_id, table)
            critic = critic or (OnlineCritic.from_exemplar(exemplar, every=ONLINE_EVERY) if online else exemplar)
            judge = CriticJudge(critic, verifier, settings)
            got = run_setting(RoutedJudge(judge, defences=Defences()), order, requests, rubrics, model_ids)
            st = judge.stats
            return got, verifier.stats.model_calls, st.confirmed / st.verified if st.verified else None

        add(first, "critic alone (no verification)", 0, 0, run_setting(
            RoutedJudge(TableJudge("exemplar estimates", estimates), defences=Defences()), groups, requests, rubrics,
            model_ids), None)
        for k in KS:
            add(first, "random k", k, sum(min(k, len(m)) for m in model_ids), random_k(k, estimates), None)
        for rank in ("fail", "uncertain"):
            for online in (False, True):
                for k in KS:
                    got, calls, hit = critic_mode(CriticSettings(k=k, rank=rank), online)
                    add(first, f"{'online' if online else 'fixed'} critic, rank={rank}", k, calls, got, hit)

        add(second, "critic alone, unverified=hard", 0, 0, run_setting(
            RoutedJudge(TableJudge("exemplar estimates", hard_estimates), defences=Defences()), groups, requests,
            rubrics, model_ids), None)
        for k in KS:
            add(second, "random k, unverified=hard", k, sum(min(k, len(m)) for m in model_ids),
                random_k(k, hard_estimates), None)
        new_settings = [f"k={k},rank=uncertain,{extra}" for extra in ("budget=group", "unverified=hard",
                                                                      "budget=group,unverified=hard") for k in KS]
        new_settings += [f"k={k},budget=group,unverified=hard" for k in KS]  # rank=fail
        new_settings += [f"u={u}{extra}" for extra in ("", ",unverified=hard") for u in CUTOFFS]
        new_settings += [f"p={p}{extra}" for extra in ("", ",unverified=hard") for p in P_CUTOFFS]
        for text in new_settings:
            settings = CriticSettings.parse(text)
            for online in (False, True):
                got, calls, hit = critic_mode(settings, online)
                add(second, f"{'online' if online else 'fixed'} critic, {text}", settings.k or "-", calls, got, hit)
        for text in [f"k={k},rank=uncertain,budget=group{extra}" for extra in ("", ",unverified=hard") for k in (1, 2)]:
            settings = CriticSettings.parse(text)
            got, calls, hit = critic_mode(settings, False, critic=TableJudge("exemplar x gate p_ok", gated_estimates))
            add(second, f"fixed critic x gate p_ok, {text}", settings.k, calls, got, hit)
        for mode, source in (("soft", estimates), ("hard", hard_estimates)):
            for k in (1, 2):
                add(second, f"hindsight (not a critic: largest errors verified), budget=group,unverified={mode}", k,
                    sum(min(k, len(m)) for m in model_ids), hindsight(k, source), None)

        for rows in (first, second):
            print("\n| setting | k | verifier calls / reply | saved | rho, reward | rho, model-judged part | "
                  "rho, reward, 2nd half of groups | groups given one reward | reward error | advantage error | "
                  "verified found failed |")
            print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
            for label, k, per_reply, saved, rho_full, rho_model, rho_later, n_constant, r_err, a_err, hit in rows:
                print(f"| {label} | {k} | {per_reply:.2f} | {saved:.0%} | {fmt(rho_full)} | {fmt(rho_model)} | "
                      f"{fmt(rho_later)} | {n_constant} | {r_err:.3f} | {a_err:.3f} | "
                      f"{'-' if hit is None else f'{hit:.0%}'} |")
        print(f"({time.perf_counter() - started:.0f} s so far)", flush=True)

        if args.orders > 0:
            orders = []
            for seed in range(args.orders):
                shuffled = list(prompts)
                random.Random(seed).shuffle(shuffled)
                orders.append([by_prompt[p] for p in shuffled])
            print(f"\nfixed vs online critic over {args.orders} group orders (seeds 0..{args.orders - 1}; rho over all "
                  "groups, and over the second half of each order, where the online critic has learned from the "
                  "first half):")
            print("\n| setting | fixed, rho | online, mean rho | online higher | fixed, rho 2nd half (mean) | "
                  "online, rho 2nd half (mean) | online higher, 2nd half |")
            print("|---|--:|--:|--:|--:|--:|--:|")
            for text in ORDER_SETTINGS:
                settings = CriticSettings.parse(text)
                fixed, _, _ = critic_mode(settings, False)
                fixed_rho = fidelity(groups, fixed["full"], exhaustive["full"])[0]
                on, fixed_late, on_late = [], [], []
                for order in orders:
                    got, _, _ = critic_mode(settings, True, order)
                    late = order[len(order) // 2:]
                    on.append(fidelity(groups, got["full"], exhaustive["full"])[0])
                    on_late.append(fidelity(late, got["full"], exhaustive["full"])[0])
                    fixed_late.append(fidelity(late, fixed["full"], exhaustive["full"])[0])
                print(f"| {text} | {fixed_rho:.3f} | {sum(on) / len(on):.3f} | {sum(o > fixed_rho for o in on)} of "
                      f"{len(on)} | {sum(fixed_late) / len(fixed_late):.3f} | {sum(on_late) / len(on_late):.3f} | "
                      f"{sum(o > f for o, f in zip(on_late, fixed_late))} of {len(on)} |", flush=True)
            print(f"({time.perf_counter() - started:.0f} s so far)", flush=True)


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


if __name__ == "__main__":
    main()
