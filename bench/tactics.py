"""Tactic classifier on ESConv: classify speed, the bundled classifier vs one fitted on ESConv, the
frozen-embedding baseline, and stickiness (gold vs predicted).

    python bench/tactics.py [--data FILE ...] [--folds 5] [--classify-only]

Every FILE is ESConv's TSV as distributed (default: ../shared/data/esconv/devWithStrategy_short.tsv,
or $ESCONV_TSV), read by rubricrl itself.

1. classify: `rubricrl tactics classify --in FILE`'s path (dialogues rebuilt, every supporter turn
   labeled by the bundled classifier, output written) timed with the encoder loaded and nothing
   embedded yet: turns/s (wall) and turns per CPU-second (all threads; less sensitive to other
   jobs on the machine), with the load average; the encoder's load time apart. Stickiness of the
   rebuilt dialogues from the output's labels (as `rubricrl tactics stickiness` reads them) and
   from ESConv's own. Then the bundled classifier (fitted only on the esconv8 examples we wrote,
   never on ESConv) scored against the gold labels of the first file's lines: accuracy and
   macro-F1 (argmax).
2. fitted (first FILE, skipped by --classify-only): 5-fold stratified CV of TacticClassifier on the
   file's lines, exactly what `rubricrl tactics fit --data FILE` prints, against the baseline
   (multinomial logistic regression on the turn's embedding alone); per-class F1.
3. stickiness over consecutive supporter-turn pairs within a line, from the gold labels and from
   the classifier's out-of-fold labels.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import StratifiedKFold

sys.path.insert(0, str(Path(__file__).resolve().parent))
from esconv import DEFAULT_PATH  # noqa: E402

from rubricrl.core.jsonl import read_jsonl  # noqa: E402
from rubricrl.llm.encoder import embed, load_encoder  # noqa: E402
from rubricrl.tactics.classifier import TacticClassifier, cross_validate  # noqa: E402
from rubricrl.tactics.esconv import read_esconv  # noqa: E402
from rubricrl.tactics.labeling import fit_examples, label_conversations  # noqa: E402
from rubricrl.tactics.metrics import stickiness  # noqa: E402
from rubricrl.tactics.taxonomy import load_taxonomy  # noqa: E402


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def classify_run(path: Path, bundled: TacticClassifier) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start, cpu = time.perf_counter(), time.process_time()
        conversations, turns = label_conversations(path, Path(tmp) / "labeled.jsonl", bundled)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        rows = read_jsonl(Path(tmp) / "labeled.jsonl")
    print(f"classify {path.name}: {turns} supporter turns of {conversations} conversations in {seconds:.1f} s "
          f"= {turns / seconds:.0f} turns/s; {cpu:.1f} s CPU = {turns / cpu:.0f} turns per CPU-second "
          f"(bundled classifier, encoder loaded, nothing cached; {load()} on {os.cpu_count()} cores)")
    # what `rubricrl tactics stickiness` reports on classify's output, and the same from ESConv's labels
    assistant = [[m for m in row["messages"] if m["role"] == "assistant"] for row in rows]
    g = stickiness([[set(m["gold_tactics"]) for m in turns] for turns in assistant])
    p = stickiness([[set(m["tactics"]) for m in turns] for turns in assistant])
    print(f"stickiness over {g.pairs} consecutive supporter-turn pairs of the rebuilt dialogues: gold (human) "
          f"{g.overall:.3f}, bundled classifier's labels {p.overall:.3f}")


def scores(gold, predicted, tactics) -> str:
    return (f"{accuracy_score(gold, predicted):8.3f} "
            f"{f1_score(gold, predicted, labels=tactics, average='macro', zero_division=0):8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, nargs="+", default=[DEFAULT_PATH])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--classify-only", action="store_true", help="speed and the bundled classifier only")
    args = parser.parse_args()

    start = time.perf_counter()
    load_encoder()
    bundled = TacticClassifier.load()
    print(f"encoder and bundled classifier loaded in {time.perf_counter() - start:.1f} s ({load()})")
    for path in args.data:
        classify_run(path, bundled)

    path = args.data[0]
    examples, tactics, _ = fit_examples(path)
    gold = np.array([next(iter(e.tactics)) for e in examples])
    probs = bundled.probabilities(examples)
    from_bundled = np.array([bundled.tactics[int(j)] for j in probs.argmax(axis=1)])
    print(f"\n{path.name}: {len(examples)} supporter turns (one per line), {len(tactics)} tactics")
    print(f"{'':34s} {'accuracy':>8s} {'macro-F1':>8s}")
    print(f"{'bundled (never saw ESConv)':34s} {scores(gold, from_bundled, tactics)}")
    if args.classify_only:
        return

    vectors = embed([e.text for e in examples])
    baseline = np.empty(len(gold), dtype=object)
    for train, test in StratifiedKFold(args.folds, shuffle=True, random_state=0).split(vectors, gold):
        baseline[test] = LogisticRegression(max_iter=3000).fit(vectors[train], gold[train]).predict(vectors[test])
    start = time.perf_counter()
    ours = cross_validate(examples, tactics, folds=args.folds)
    fit_seconds = time.perf_counter() - start
    predicted = np.array(ours["predicted"])
    print(f"{'baseline (turn embedding), CV':34s} {scores(gold, baseline, tactics)}")
    print(f"{'fitted on this file, CV':34s} {scores(gold, predicted, tactics)}  ({args.folds}-fold stratified, "
          f"{fit_seconds:.0f} s)")
    base_f1 = f1_score(gold, baseline, labels=tactics, average=None, zero_division=0)
    bundled_f1 = f1_score(gold, from_bundled, labels=tactics, average=None, zero_division=0)
    print(f"\n{'per-class F1':28s} {'n':>5s} {'bundled':>8s} {'baseline':>8s} {'fitted':>8s}")
    for t, a, b in zip(tactics, bundled_f1, base_f1):
        print(f"{t:28s} {int((gold == t).sum()):5d} {a:8.3f} {b:8.3f} {ours['per_class_f1'][t]:8.3f}")

    # stickiness: the target and the supporter turn before it on the same line
    lines = read_esconv(path, load_taxonomy("esconv8"))
    by_text = {e.text: p for e, p in zip(examples, predicted)}
    gold_pairs, predicted_pairs = [], []
    for line, example, target_pred in zip(lines, examples, predicted):
        prev = next((s for s in reversed(line.segments[:-1]) if s.supporter), None)
        if prev is None or prev.tactic is None or prev.text not in by_text:
            continue
        gold_pairs.append([{prev.tactic}, set(example.tactics)])
        predicted_pairs.append([{by_text[prev.text]}, {target_pred}])
    g, p = stickiness(gold_pairs), stickiness(predicted_pairs)
    print(f"\nstickiness over {g.pairs} consecutive supporter-turn pairs: gold (human) {g.overall:.3f}, "
          f"classifier labels {p.overall:.3f}")
    print(f"{'per tactic':28s} {'gold':>6s} {'pred':>6s}")
    for t in tactics:
        print(f"{t:28s} {g.per_tactic.get(t, float('nan')):6.3f} {p.per_tactic.get(t, float('nan')):6.3f}")


if __name__ == "__main__":
    main()
