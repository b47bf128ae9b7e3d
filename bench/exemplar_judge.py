"""Exemplar judge vs the embedded LLM judge (zero-shot) vs a rule, on ESConv strategies as criteria.

    python bench/exemplar_judge.py [--llm-rows 210] [--folds 5]

(a) exemplar judge: 5-fold cross-validated AUC and balanced accuracy on all 2,985 ESConv dev
    supporter turns (the same fitting code as `rubricrl judge fit`);
(b) the embedded SmolLM2-135M yes/no judge, zero-shot, on a seeded random subsample;
(c) a rule where one exists (a question mark for "asks a question").
Then verdicts/s of the exemplar and LLM judges on the same subsample (all criteria per reply).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parent))
from esconv import STRATEGY_CRITERIA, load_esconv  # noqa: E402

from rubricrl.core.messages import as_conversation  # noqa: E402
from rubricrl.judge_tools.fit import LabeledExample, best_threshold, fit_exemplars  # noqa: E402
from rubricrl.judges.base import JudgeRequest  # noqa: E402
from rubricrl.judges.exemplar import ExemplarJudge  # noqa: E402
from rubricrl.judges.local import LocalJudge  # noqa: E402
from rubricrl.rubrics.model import Criterion, Rubric  # noqa: E402


def balanced_accuracy(predicted: np.ndarray, y: np.ndarray) -> float:
    return float(((predicted & y).sum() / y.sum() + (~predicted & ~y).sum() / (~y).sum()) / 2)


def transfer(data) -> None:
    """The bundled exemplar models (fitted only on our own written examples) scored on ESConv
    turns whose human strategy label corresponds to the criterion: an independent check."""
    from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric

    judge = ExemplarJudge()
    empathy = {c.id: c for c in load_rubric(bundled_rubric_path("empathy")).criteria}
    pairs = [("validates-feeling", "Reflection of feelings", True), ("invites-more", "Questions", True),
             ("no-rushed-advice", "Providing Suggestions", False)]
    requests = [JudgeRequest(as_conversation(ex.last_seeker or "(no message)"), ex.target.text,
                             tuple(empathy[c] for c, _, _ in pairs)) for ex in data]
    verdicts = judge.judge_sync(requests)
    print("bundled exemplar models on ESConv (human strategy labels as an independent proxy):")
    for j, (cid, strategy, positive) in enumerate(pairs):
        y = np.array([(ex.target.strategy == strategy) == positive for ex in data])
        p = np.array([row[j].p_met for row in verdicts])
        sign = "" if positive else "not "
        print(f"  {cid:20s} vs {sign}{strategy:24s} AUC {roc_auc_score(y, p):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm-rows", type=int, default=210)
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    data = load_esconv()
    ids = {s: f"s{i}" for i, s in enumerate(STRATEGY_CRITERIA)}
    rubric = Rubric(criteria=tuple(Criterion(id=ids[s], text=t) for s, t in STRATEGY_CRITERIA.items()))
    # the reply alone (no context): the figures in docs/judges.md are for reply-only models
    examples = {ids[s]: [LabeledExample(ex.target.text, ex.target.strategy == s) for ex in data]
                for s in STRATEGY_CRITERIA}
    judge_dir = Path(tempfile.mkdtemp(prefix="esconv-exemplar-"))
    reports = {r.criterion_id: r for r in fit_exemplars(rubric, examples, judge_dir, folds=args.folds)}

    sample = random.Random(0).sample(data, args.llm_rows)
    requests = [JudgeRequest(as_conversation(ex.last_seeker or "(no message)"), ex.target.text, rubric.criteria)
                for ex in sample]
    llm = LocalJudge()
    start = time.perf_counter()
    llm_verdicts = llm.judge_sync(requests)
    llm_seconds = time.perf_counter() - start
    exemplar = ExemplarJudge(judge_dir)  # note: fitted on all rows, so only its speed is read here
    exemplar.judge_sync(requests[:2])  # warm-up: load the encoder
    start = time.perf_counter()
    exemplar.judge_sync(requests)
    exemplar_seconds = time.perf_counter() - start

    print(f"ESConv dev: {len(data)} supporter turns; LLM subsample {len(sample)} (seed 0)")
    print(f"{'criterion (strategy)':32s} {'pos':>4s} | {'exemplar AUC':>12s} {'bal.acc':>7s} | "
          f"{'LLM AUC':>7s} {'bal@0.5':>7s} {'bal@best':>8s} | rule")
    aucs, llm_aucs = [], []
    for j, (strategy, text) in enumerate(STRATEGY_CRITERIA.items()):
        r = reports[ids[strategy]]
        y = np.array([ex.target.strategy == strategy for ex in sample])
        p = np.array([row[j].p_met for row in llm_verdicts])
        llm_auc = roc_auc_score(y, p) if 0 < y.sum() < len(y) else float("nan")
        rule = ""
        if strategy == "Questions":
            full_y = np.array([ex.target.strategy == strategy for ex in data])
            has_q = np.array(["?" in ex.target.text for ex in data])
            rule = f"'?' bal.acc {balanced_accuracy(has_q, full_y):.3f}"
        aucs.append(r.auc)
        llm_aucs.append(llm_auc)
        print(f"{strategy:32s} {r.n_met:4d} | {r.auc:12.3f} {r.balanced_accuracy:7.3f} | {llm_auc:7.3f} "
              f"{balanced_accuracy(p >= 0.5, y):7.3f} {best_threshold(p, y)[1]:8.3f} | {rule}")
    print(f"{'mean':32s}      | {np.mean(aucs):12.3f}         | {np.nanmean(llm_aucs):7.3f}")
    transfer(data)
    n = len(requests) * len(rubric.criteria)
    print(f"verdicts/s: exemplar {n / exemplar_seconds:.0f}, LLM {n / llm_seconds:.1f}, "
          f"ratio {llm_seconds / exemplar_seconds:.0f}x  ({n} verdicts each)")


if __name__ == "__main__":
    main()
