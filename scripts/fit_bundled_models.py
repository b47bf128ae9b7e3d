"""Refit the models shipped with rubricrl from the examples we wrote:
- exemplar-judge models (data/exemplars/fitted/) from data/exemplars/labels.jsonl;
- the default tactic classifier (data/tactics/esconv8/) from the esconv8 taxonomy's examples.

    python scripts/fit_bundled_models.py
"""

from pathlib import Path

from rubricrl.judge_tools.fit import collect_examples, fit_exemplars
from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric
from rubricrl.rubrics.model import Rubric
from rubricrl.tactics.classifier import BUNDLED_DIR, TacticClassifier, cross_validate
from rubricrl.tactics.labeling import fit_examples

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


    examples, names, taxonomy = fit_examples("esconv8")
    report = cross_validate(examples, names)
    print(f"tactic classifier ({taxonomy}, {len(examples)} examples): 5-fold accuracy {report['accuracy']:.3f}, "
          f"macro-F1 {report['macro_f1']:.3f}")
    TacticClassifier.fit(examples, names, taxonomy=taxonomy).save(BUNDLED_DIR)


if __name__ == "__main__":
    main()
