"""Refit the exemplar models shipped with rubricrl (data/exemplars/fitted/) from the labeled
examples we wrote (data/exemplars/labels.jsonl) for the bundled rubrics.

    python scripts/fit_default_exemplars.py
"""

from pathlib import Path

from rubricrl.exemplar_fit import collect_examples, fit_exemplars
from rubricrl.loading import bundled_rubric_path, load_rubric
from rubricrl.rubric import Rubric

DATA = Path(__file__).resolve().parents[1] / "src" / "rubricrl" / "data" / "exemplars"


def main() -> None:
    criteria, examples = [], {}
    for name in ("empathy", "crisis_safety"):
        rubric = load_rubric(bundled_rubric_path(name))
        found, warnings = collect_examples(rubric, DATA / "labels.jsonl", rubric_name=name)
        for warning in warnings:
            print("warning:", warning)
        criteria += [c for c in rubric.criteria if c.id in found]
        examples.update(found)
    combined = Rubric(id="bundled", criteria=tuple(c.model_copy(update={"weight": abs(c.weight)}) for c in criteria))
    for r in fit_exemplars(combined, examples, DATA / "fitted"):
        print(f"{r.criterion_id:26s} met {r.n_met:3d} unmet {r.n_unmet:3d}  CV AUC {r.auc:.3f}  "
              f"balanced acc {r.balanced_accuracy:.3f}  threshold {r.threshold:.2f}")


if __name__ == "__main__":
    main()
