"""Agreement of the embedded LLM judge with human labels on ESConv, and what calibration gains.

    python bench/judge_agreement.py [--per-strategy 50] [--folds 5] [--seed 0] [--judge local]

Each of the 7 ESConv support strategies is a criterion ("The reply asks the person a question.",
... from bench/esconv.py); a supporter turn meets it when its human strategy label is that
strategy. The sample takes `--per-strategy` turns of each strategy (seeded), so every criterion
has that many positives, and judges every sampled turn on all 7 criteria (the conversation is the
seeker's last message, as in bench/exemplar_judge.py). Per criterion it reports AUC of p_met,
balanced F1 (mean of the met-class and unmet-class F1) of the judge's own decisions (p_met >= 0.5),
and balanced F1 with per-criterion thresholds fitted by `rubricrl judge calibrate`'s rule on the
other folds of a `--folds`-fold stratified cross-validation (out-of-fold, so the gain is honest).
ESConv is CC BY-NC 4.0: read from ../shared/data/esconv/, never shipped.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.model_selection import StratifiedKFold

sys.path.insert(0, str(Path(__file__).resolve().parent))
from esconv import STRATEGY_CRITERIA, load_esconv

from rubricrl.judge_tools.agreement import Label, binary_metrics, judge_labels
from rubricrl.core.messages import as_conversation
from rubricrl.judges import make_judge
from rubricrl.judge_tools.calibrate import fit_threshold
from rubricrl.rubrics.model import Criterion


def sample_turns(data, per_strategy: int, seed: int):
    rng = random.Random(seed)
    chosen = []
    for strategy in STRATEGY_CRITERIA:
        pool = [ex for ex in data if ex.target.strategy == strategy]
        chosen += rng.sample(pool, min(per_strategy, len(pool)))
    return chosen


def cross_validated(p: np.ndarray, y: np.ndarray, folds: int, seed: int) -> tuple[np.ndarray, list[float]]:
    """Out-of-fold met/unmet at thresholds fitted on the other folds (0.5 when a fold cannot fit one)."""
    predicted = np.zeros(len(y), dtype=bool)
    thresholds = []
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(p, y):
        fitted = fit_threshold(p[train], y[train])
        t = fitted[0] if fitted else 0.5
        thresholds.append(t)
        predicted[test] = p[test] >= t
    return predicted, thresholds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-strategy", type=int, default=50)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--judge", default="local")
    args = parser.parse_args()
    data = load_esconv()
    turns = sample_turns(data, args.per_strategy, args.seed)
    criteria = {s: Criterion(id=f"s{i}", text=t) for i, (s, t) in enumerate(STRATEGY_CRITERIA.items())}
    labels = [Label(f"{n}-{c.id}", n, as_conversation(ex.last_seeker or "(no message)"), ex.target.text, c,
                    ex.target.strategy == s) for n, ex in enumerate(turns) for s, c in criteria.items()]
    judge = make_judge(args.judge, cache=False)
    start = time.perf_counter()
    verdicts = judge_labels(judge, labels, batch_size=16)
    seconds = time.perf_counter() - start
    errors = sum(not v.decided for v in verdicts)

    print(f"ESConv dev: {len(data)} supporter turns; sample {len(turns)} turns ({args.per_strategy} per strategy, "
          f"seed {args.seed}) x {len(criteria)} criteria = {len(labels)} labels; judge {judge.judge_id}")
    print(f"judged in {seconds:.0f} s ({len(labels) / seconds:.1f} verdicts/s); {errors} errors or skips excluded")
    print(f"{'criterion (strategy)':30s} {'n':>4s} {'pos':>4s} | {'AUC':>6s} | {'balF1@0.5':>9s} "
          f"{'balF1 cal':>9s} {'gain':>7s} | {'CV thresholds':>15s} | {'p_met range':>11s}")
    rows = []
    for s, c in criteria.items():
        pairs = [(lab, v) for lab, v in zip(labels, verdicts) if lab.criterion is c and v.decided]
        y = np.array([lab.label for lab, _ in pairs])
        p = np.array([v.p_met for _, v in pairs], dtype=float)
        raw = binary_metrics(y, p >= 0.5, p)
        predicted, thresholds = cross_validated(p, y, args.folds, args.seed)
        cal = binary_metrics(y, predicted)
        rows.append((raw["auc"], raw["balanced_f1"], cal["balanced_f1"]))
        print(f"{s:30s} {len(y):4d} {int(y.sum()):4d} | {raw['auc']:6.3f} | {raw['balanced_f1']:9.3f} "
              f"{cal['balanced_f1']:9.3f} {cal['balanced_f1'] - raw['balanced_f1']:+7.3f} | "
              f"{min(thresholds):.3f}-{max(thresholds):.3f} | {p.min():.2f}-{p.max():.2f}")
    auc, before, after = (float(np.mean(col)) for col in zip(*rows))
    print(f"{'mean':30s} {'':4s} {'':4s} | {auc:6.3f} | {before:9.3f} {after:9.3f} {after - before:+7.3f} |")
    print("balanced F1 = mean of the met-class and unmet-class F1; 'cal' = per-criterion thresholds fitted on the "
          f"other folds ({args.folds}-fold stratified CV), pooled out-of-fold")


if __name__ == "__main__":
    main()
