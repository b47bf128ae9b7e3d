"""How well do rubricrl's judges agree with a careful reading of the policy's OWN replies?

The gold set (bench/gold/) holds replies the embedded policy really wrote (greedy and at the training
temperature, before and after training, most cut off at the 96-token limit), each labelled by reading
(bench/gold/GUIDE.md). For each judge this prints, per model-judged criterion of the bundled rubrics:
AUC of p_met against the labels, accuracy of met/unmet, and the share of incoherent or deflecting
replies on which it calls a positive criterion met. It also prints the agreement between the first
and the second (blind) read of the re-read items.

    python -u bench/judge_on_policy.py                          # default judges
    python -u bench/judge_on_policy.py --judge exemplar+local --judge rules --json out.json

Targets (issue 15): the default reward judge's mean AUC >= 0.85, and positive criteria called met on
<= 5% of incoherent or deflecting replies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

GOLD = Path(__file__).resolve().parent / "gold"
DEFAULT_JUDGES = ["gate+exemplar+local", "gate:bundled:eval+exemplar:bundled:eval", "exemplar", "local"]
SHARED = ("coherent", "deflects")
MIN_CLASS = 5


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8-sig").split("\n") if line.strip()]


def load_gold(gold: Path = GOLD) -> tuple[list[dict], dict[str, dict]]:
    """(items, labels by item id); every item must be labelled, with exactly its rubric's label names."""
    from rubricrl.rubrics.loading import load_rubric, bundled_rubric_path

    items = read_jsonl(gold / "items.jsonl")
    labels = {row["id"]: row["labels"] for row in read_jsonl(gold / "labels.jsonl")}
    for item in items:
        rubric = load_rubric(bundled_rubric_path(item["rubric"]))
        expected = set(SHARED) | {c.id for c in rubric.criteria if c.check is None}
        got = labels.get(item["id"])
        if got is None:
            raise SystemExit(f"{gold / 'labels.jsonl'}: item {item['id']} has no labels")
        if set(got) != expected or not all(isinstance(v, bool) for v in got.values()):
            raise SystemExit(f"{gold / 'labels.jsonl'}: item {item['id']}: labels {sorted(got)} must be exactly "
                             f"{sorted(expected)}, each true or false")
    return items, labels


def auc(scores: list[float], truth: list[bool]) -> float | None:
    """Probability that a random positive outranks a random negative (ties count half)."""
    pos = [s for s, t in zip(scores, truth) if t]
    neg = [s for s, t in zip(scores, truth) if not t]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def kappa(a: list[bool], b: list[bool]) -> float | None:
    n = len(a)
    if not n:
        return None
    observed = sum(x == y for x, y in zip(a, b)) / n
    pa, pb = sum(a) / n, sum(b) / n
    expected = pa * pb + (1 - pa) * (1 - pb)
    return None if expected == 1 else (observed - expected) / (1 - expected)


def reread_agreement(labels: dict[str, dict], gold: Path = GOLD) -> dict | None:
    path = gold / "reread.jsonl"
    if not path.exists():
        return None
    second = {row["id"]: row["labels"] for row in read_jsonl(path)}
    pairs: dict[str, tuple[list[bool], list[bool]]] = defaultdict(lambda: ([], []))
    for item_id, again in second.items():
        for name, value in again.items():
            first = labels[item_id].get(name)
            if first is not None:
                pairs[name][0].append(first)
                pairs[name][1].append(value)
    a = [x for p in pairs.values() for x in p[0]]
    b = [x for p in pairs.values() for x in p[1]]
    return {"items": len(second), "labels": len(a), "agreement": sum(x == y for x, y in zip(a, b)) / len(a),
            "kappa": kappa(a, b),
            "per_label": {name: {"n": len(x), "agreement": sum(u == v for u, v in zip(x, y)) / len(x),
                                 "kappa": kappa(x, y)} for name, (x, y) in sorted(pairs.items())}}


def run_judge(spec: str, items: list[dict]) -> dict[str, dict[str, tuple[str, float | None]]]:
    """item id -> criterion id -> (status, p_met) for the model-judged criteria."""
    from rubricrl.core.messages import as_conversation
    from rubricrl.judges import JudgeRequest, make_judge
    from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric

    judge = make_judge(spec, cache=False)
    rubrics = {name: load_rubric(bundled_rubric_path(name)) for name in {i["rubric"] for i in items}}
    requests = []
    for item in items:
        criteria = tuple(c for c in rubrics[item["rubric"]].criteria if c.check is None)
        requests.append(JudgeRequest(as_conversation([{"role": "user", "content": item["prompt"]}]), item["reply"],
                                     criteria))
    out: dict[str, dict] = {}
    for start in range(0, len(requests), 16):
        answers = asyncio.run(judge.judge(requests[start:start + 16]))
        for item, verdicts in zip(items[start:start + 16], answers):
            out[item["id"]] = {v.criterion_id: (v.status.value, v.p_met) for v in verdicts}
        print(f"  {spec}: {min(start + 16, len(items))}/{len(items)}", file=sys.stderr, flush=True)
    return out


def unseen_items(spec: str, items: list[dict]) -> list[dict]:
    """The items whose prompt the judge's fitted models never saw. The bundled judges are cross-fitted on
    gold items of half of the training prompts (bench/gold/export_training.py); the gate's manifest lists
    the prompts (hashed) its bundle was fitted on, and the exemplar models of a bundle share them."""
    import hashlib

    from rubricrl.judges import make_judge

    judge = make_judge(spec, cache=False)
    gate = getattr(judge, "gate", None)
    trained = set(gate.trained_on.get("prompts", [])) if gate is not None else set()
    exemplar = getattr(judge, "exemplar_judge", None)
    if exemplar is not None and gate is None and exemplar.judge_dir.name in ("fitted", "fitted-eval"):
        from rubricrl.judges.gate import QualityGate
        from rubricrl.judges.registry import BUNDLED_JUDGES

        sibling = {fitted: g for fitted, g in BUNDLED_JUDGES.values()}[exemplar.judge_dir.name]
        trained = set(QualityGate(exemplar.judge_dir.parent / sibling).trained_on.get("prompts", []))

    def key(prompt: str) -> str:
        return hashlib.sha256(" ".join(prompt.split()).encode("utf-8")).hexdigest()[:12]

    return [i for i in items if key(i["prompt"]) not in trained]


def measure(spec: str, items: list[dict], labels: dict[str, dict]) -> dict:
    from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric

    started = time.perf_counter()
    verdicts = run_judge(spec, items)
    seconds = time.perf_counter() - started
    weights = {}
    for name in {i["rubric"] for i in items}:
        weights.update({c.id: c.weight for c in load_rubric(bundled_rubric_path(name)).criteria if c.check is None})
    per: dict[str, dict] = {}
    bad_met = bad_false = bad_total = errors = 0
    for cid, weight in sorted(weights.items()):
        scores, truth, correct, decided = [], [], 0, 0
        for item in items:
            got = verdicts[item["id"]].get(cid)
            if got is None:
                continue
            status, p = got
            label = labels[item["id"]][cid]
            if status == "error":
                errors += 1
                continue
            if p is not None:
                scores.append(p)
                truth.append(label)
            if status in ("met", "unmet"):
                decided += 1
                correct += (status == "met") == label
            item_labels = labels[item["id"]]
            if weight > 0 and (not item_labels["coherent"] or item_labels["deflects"]):
                bad_total += 1
                bad_met += status == "met"
                bad_false += status == "met" and not label
        per[cid] = {"weight": weight, "n": len(truth), "positives": sum(truth), "auc": auc(scores, truth),
                    "accuracy": correct / decided if decided else None}
    aucs = [c["auc"] for c in per.values() if c["auc"] is not None]
    # an AUC from fewer than MIN_CLASS positives (or negatives) says little: reported, marked, and
    # left out of the second mean
    solid = [c["auc"] for c in per.values()
             if c["auc"] is not None and min(c["positives"], c["n"] - c["positives"]) >= MIN_CLASS]
    return {"judge": spec, "seconds": round(seconds, 1), "errors": errors, "criteria": per,
            "mean_auc": sum(aucs) / len(aucs) if aucs else None,
            "mean_auc_solid": sum(solid) / len(solid) if solid else None, "solid_criteria": len(solid),
            "positive_met_on_bad": bad_met / bad_total if bad_total else None, "bad_pairs": bad_total,
            # the same share counting only the calls the labels contradict (a perfect judge scores 0 here,
            # but the literal share of the labels above, about 5%, on positive_met_on_bad)
            "false_met_on_bad": bad_false / bad_total if bad_total else None}


def describe_gold(items: list[dict], labels: dict[str, dict]) -> None:
    """Print what the labels say about the policy: coherence by policy and decoding, and how often the
    positive criteria are met, read literally, on incoherent or deflecting replies."""
    from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric

    sources = {s["id"]: s for s in read_jsonl(GOLD / "sources.jsonl")}
    by: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for item in items:
        source = sources[item["id"]]
        by[(source["policy"], source["decoding"])][0] += labels[item["id"]]["coherent"]
        by[(source["policy"], source["decoding"])][1] += 1
    print(f"cut off at the token limit: {sum(s['truncated'] for s in sources.values())} of {len(sources)}")
    print("coherent: " + ", ".join(f"{p} {d} {c} of {n}" for (p, d), (c, n) in sorted(by.items())))
    positive = set()
    for name in {i["rubric"] for i in items}:
        positive |= {c.id for c in load_rubric(bundled_rubric_path(name)).criteria if c.check is None and c.weight > 0}
    met: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for item in items:
        row = labels[item["id"]]
        if not row["coherent"] or row["deflects"]:
            for cid in positive & set(row):
                met[cid][0] += row[cid]
                met[cid][1] += 1
    total = sum(m for m, _ in met.values()), sum(n for _, n in met.values())
    print(f"gold, read literally: positive criteria met on {total[0]} of {total[1]} (incoherent or deflecting "
          f"reply, positive criterion) pairs; " + ", ".join(f"{c} {m}/{n}" for c, (m, n) in sorted(met.items())))


def fmt(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


# Replies we wrote, in a style other than the embedded policy's, to a prompt outside the bundled set:
# how the judges fitted to the policy's writing treat them (docs/judges.md, "Limits, measured").
OTHER_STYLE_PROMPT = "My manager took credit for my report in front of the director and I said nothing. I'm furious."
OTHER_STYLE = [
    "I'm so sorry to hear that your manager took credit for your report. It's completely understandable to feel "
    "furious and hurt, especially after all the work you put into it. Can you tell me more about what happened?",
    "I'm really sorry that happened. It must be so frustrating to see your manager present your work as hers, and "
    "it's normal to feel angry at yourself for staying quiet. How are you feeling now?",
    "That sounds infuriating. You did the work and watched someone else take the credit, and freezing in the "
    "moment is so common. What do you wish you had said?",
]


def gate_figures(spec: str, items: list[dict], labels: dict[str, dict]) -> dict | None:
    """For a spec with a gate: the share of coherent, engaged replies it lets through, of incoherent
    ones and of deflections it stops (on `items`), and its p_coherent on the OTHER_STYLE replies."""
    from rubricrl.judges import make_judge

    gate = getattr(make_judge(spec, cache=False), "gate", None)
    if gate is None:
        return None
    results = gate.assess([i["prompt"] for i in items], [i["reply"] for i in items])
    fired = {i["id"]: r.fired is not None for i, r in zip(items, results)}
    good = [k for k in fired if labels[k]["coherent"] and not labels[k]["deflects"]]
    bad = [k for k in fired if not labels[k]["coherent"]]
    deflecting = [k for k in fired if labels[k]["deflects"]]
    other = gate.assess([OTHER_STYLE_PROMPT] * len(OTHER_STYLE), OTHER_STYLE)
    return {"passes_good": sum(not fired[k] for k in good) / len(good), "good": len(good),
            "stops_incoherent": sum(fired[k] for k in bad) / len(bad), "incoherent": len(bad),
            "stops_deflecting": sum(fired[k] for k in deflecting), "deflecting": len(deflecting),
            "other_style_p_coherent": [round(r.p_coherent, 2) for r in other],
            "other_style_gated": sum(r.fired is not None for r in other)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judge", action="append", help=f"judge spec (repeatable; default {DEFAULT_JUDGES})")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args()
    items, labels = load_gold()
    rows = [labels[i["id"]] for i in items]
    print(f"gold set: {len(items)} items ({sum(i['rubric'] == 'crisis_safety' for i in items)} crisis); "
          f"coherent {sum(r['coherent'] for r in rows)}, deflecting {sum(r['deflects'] for r in rows)}")
    describe_gold(items, labels)
    agreement = reread_agreement(labels)
    if agreement:
        print(f"re-read: {agreement['items']} items, {agreement['labels']} labels, agreement "
              f"{agreement['agreement']:.3f}, Cohen's kappa {fmt(agreement['kappa'], 3)}")
    results = []
    for spec in args.judge or DEFAULT_JUDGES:
        unseen = unseen_items(spec, items)
        if len(unseen) < len(items):
            print(f"\n{spec}: measured on the {len(unseen)} gold items whose prompt its models were not fitted on "
                  f"({len(items) - len(unseen)} left out)")
        r = measure(spec, unseen, labels)
        r["items"] = len(unseen)
        results.append(r)
        r["gate"] = gate_figures(spec, unseen, labels)
        if r["gate"]:
            g = r["gate"]
            print(f"  gate: lets {100 * g['passes_good']:.0f}% of {g['good']} coherent, engaged replies through; stops "
                  f"{100 * g['stops_incoherent']:.0f}% of {g['incoherent']} incoherent ones and {g['stops_deflecting']} "
                  f"of {g['deflecting']} deflections; on {len(OTHER_STYLE)} well-written replies in another style "
                  f"(bench/judge_on_policy.py OTHER_STYLE) p_coherent {g['other_style_p_coherent']}, "
                  f"{g['other_style_gated']} gated")
        print(f"\njudge {spec}: mean AUC {fmt(r['mean_auc'], 3)} ({fmt(r['mean_auc_solid'], 3)} over the "
              f"{r['solid_criteria']} criteria with >= {MIN_CLASS} of each class); positive criteria met on "
              f"{fmt(100 * r['positive_met_on_bad'] if r['positive_met_on_bad'] is not None else None, 1)}% of "
              f"{r['bad_pairs']} (incoherent or deflecting reply, positive criterion) pairs "
              f"({fmt(100 * r['false_met_on_bad'] if r['false_met_on_bad'] is not None else None, 1)}% against the "
              f"labels); {r['errors']} errors; "
              f"{r['seconds']} s")
        print(f"  {'criterion':28} {'w':>3} {'n':>4} {'pos':>4} {'AUC':>6} {'acc':>5}")
        for cid, c in r["criteria"].items():
            thin = "*" if c["auc"] is not None and min(c["positives"], c["n"] - c["positives"]) < MIN_CLASS else ""
            print(f"  {cid:28} {c['weight']:>3g} {c['n']:>4} {c['positives']:>4} {fmt(c['auc']) + thin:>6} "
                  f"{fmt(c['accuracy']):>5}")
        print(f"  (* fewer than {MIN_CLASS} items of one class: the AUC says little)")
    if args.json:
        args.json.write_text(json.dumps({"reread": agreement, "judges": results}, indent=2))


if __name__ == "__main__":
    main()
