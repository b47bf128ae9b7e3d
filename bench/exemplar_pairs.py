"""Do the exemplar models gain from seeing the conversation? Reply-only vs pair-aware models on the
bundled training halves.

    python -u bench/exemplar_pairs.py

For each half (`a`: the default reward judge's examples, `b`: the held-out judge's) and each model-judged
criterion of the bundled rubrics, fits the exemplar models twice with `rubricrl judge fit`'s code
(judge_tools/fit.py), once on the reply's embedding alone and once pair-aware (plus the reply's cosine
similarity to the person's message), and prints both cross-validated AUCs. The folds are grouped by the
person's message, so every figure is for conversations the model did not see. No gold item is used: the
choice between the two is made on training data only (the gold set measures the result, docs/judges.md).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "src" / "rubricrl" / "data" / "exemplars"
RUBRICS = ("empathy", "crisis_safety")


def main() -> None:
    from rubricrl.judge_tools.fit import collect_examples, fit_exemplars
    from rubricrl.judges.exemplar import PAIR_AWARE, REPLY_ONLY
    from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric

    rows = [json.loads(line) for line in (DATA / "criteria_examples.jsonl").read_text("utf-8").splitlines() if line]
    print("| half | criterion | met / all | CV AUC, reply alone | CV AUC, pair-aware | change |")
    print("|---|---|--:|--:|--:|--:|")
    means: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for half in "ab":
            labels = Path(tmp) / f"{half}.jsonl"
            labels.write_text("".join(json.dumps(r) + "\n" for r in rows if r["half"] == half), "utf-8")
            for name in RUBRICS:
                rubric = load_rubric(bundled_rubric_path(name))
                examples, _ = collect_examples(rubric, labels, rubric_name=name)
                runs = {features: {r.criterion_id: r for r in fit_exemplars(
                    rubric, examples, Path(tmp) / f"{half}-{name}-{len(features)}", features=features)}
                    for features in (REPLY_ONLY, PAIR_AWARE)}
                for cid, alone in runs[REPLY_ONLY].items():
                    pair = runs[PAIR_AWARE][cid]
                    if alone.auc is None or pair.auc is None:
                        print(f"| {half} | {cid} | {alone.n_met} / {alone.n_met + alone.n_unmet} | - | - | - |")
                        continue
                    means.setdefault(half, []).append((alone.auc, pair.auc))
                    print(f"| {half} | {cid} | {alone.n_met} / {alone.n_met + alone.n_unmet} | {alone.auc:.3f} | "
                          f"{pair.auc:.3f} | {pair.auc - alone.auc:+.3f} |")
    for half, pairs in means.items():
        alone, pair = (sum(x) / len(x) for x in zip(*pairs))
        better = sum(p > a for a, p in pairs)
        print(f"half {half}: mean CV AUC {alone:.3f} reply alone, {pair:.3f} pair-aware; pair-aware higher on "
              f"{better} of {len(pairs)} criteria")


if __name__ == "__main__":
    sys.exit(main())
