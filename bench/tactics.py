"""Tactic classifier on ESConv vs the frozen-embedding baseline, and stickiness (gold vs predicted).

    python bench/tactics.py [--folds 5]

- baseline: multinomial logistic regression on all-MiniLM-L6-v2 embeddings of the turn alone;
- rubricrl: TacticClassifier (turn + context + previous supporter turn embeddings, TF-IDF
  1-2-grams, question flag, length; one-vs-rest), out-of-fold argmax;
both 5-fold stratified on the 2,985 ESConv dev supporter turns. Then stickiness over consecutive
supporter-turn pairs (each target turn and the supporter turn before it in its context), from the
gold labels and from the classifier's out-of-fold labels.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import StratifiedKFold

sys.path.insert(0, str(Path(__file__).resolve().parent))
from esconv import TO_ESCONV8, load_esconv, previous_supporter  # noqa: E402

from rubricrl.llm.encoder import embed  # noqa: E402
from rubricrl.tactics.classifier import TurnExample, cross_validate  # noqa: E402
from rubricrl.tactics.metrics import stickiness  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    data = load_esconv()
    label = lambda s: TO_ESCONV8.get(s, s)  # noqa: E731
    gold = np.array([label(ex.target.strategy) for ex in data])
    tactics = sorted(set(gold))
    examples = [TurnExample(ex.target.text, frozenset([label(ex.target.strategy)]), ex.last_seeker,
                            (previous_supporter(ex).text if previous_supporter(ex) else "")) for ex in data]

    vectors = embed([ex.target.text for ex in data])
    baseline = np.empty(len(gold), dtype=object)
    for train, test in StratifiedKFold(args.folds, shuffle=True, random_state=0).split(vectors, gold):
        baseline[test] = LogisticRegression(max_iter=3000).fit(vectors[train], gold[train]).predict(vectors[test])
    ours = cross_validate(examples, tactics, folds=args.folds)
    predicted = np.array(ours["predicted"])

    print(f"ESConv dev: {len(data)} supporter turns, {len(tactics)} tactics, {args.folds}-fold stratified CV")
    print(f"{'':28s} {'accuracy':>8s} {'macro-F1':>8s}")
    print(f"{'baseline (turn embedding)':28s} {accuracy_score(gold, baseline):8.3f} "
          f"{f1_score(gold, baseline, average='macro'):8.3f}")
    print(f"{'rubricrl TacticClassifier':28s} {ours['accuracy']:8.3f} {ours['macro_f1']:8.3f}")
    base_f1 = f1_score(gold, baseline, labels=tactics, average=None)
    print(f"\n{'per-class F1':28s} {'n':>5s} {'baseline':>8s} {'rubricrl':>8s}")
    for t, b in zip(tactics, base_f1):
        print(f"{t:28s} {int((gold == t).sum()):5d} {b:8.3f} {ours['per_class_f1'][t]:8.3f}")

    by_text = {ex.target.text: p for ex, p in zip(data, predicted)}
    gold_pairs, predicted_pairs = [], []
    for ex, target_pred in zip(data, predicted):
        prev = previous_supporter(ex)
        if prev is None or prev.strategy is None or prev.text not in by_text:
            continue
        gold_pairs.append([{label(prev.strategy)}, {label(ex.target.strategy)}])
        predicted_pairs.append([{by_text[prev.text]}, {target_pred}])
    g, p = stickiness(gold_pairs), stickiness(predicted_pairs)
    print(f"\nstickiness over {g.pairs} consecutive supporter-turn pairs: gold (human) {g.overall:.3f}, "
          f"classifier labels {p.overall:.3f}")
    print(f"{'per tactic':28s} {'gold':>6s} {'pred':>6s}")
    for t in tactics:
        print(f"{t:28s} {g.per_tactic.get(t, float('nan')):6.3f} {p.per_tactic.get(t, float('nan')):6.3f}")


if __name__ == "__main__":
    main()
