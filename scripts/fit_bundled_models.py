"""Refit the default tactic classifier (data/tactics/esconv8/) from the esconv8 taxonomy's examples.

    python scripts/fit_bundled_models.py

The bundled judges (exemplar models and quality gates, data/exemplars/) are refitted by
`python bench/gold/export_training.py && python bench/gold/fit_bundled.py`: they are fitted on the
policy's own replies as well as ours, cross-fitted by prompt (docs/judges.md).
"""

from rubricrl.tactics.classifier import BUNDLED_DIR, TacticClassifier, cross_validate
from rubricrl.tactics.labeling import fit_examples


def main() -> None:
    examples, names, taxonomy = fit_examples("esconv8")
    report = cross_validate(examples, names)
    print(f"tactic classifier ({taxonomy}, {len(examples)} examples): 5-fold accuracy {report['accuracy']:.3f}, "
          f"macro-F1 {report['macro_f1']:.3f}")
    TacticClassifier.fit(examples, names, taxonomy=taxonomy).save(BUNDLED_DIR)


if __name__ == "__main__":
    main()
