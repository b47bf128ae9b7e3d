"""Refit the bundled judges from the bundled training data (after bench/gold/export_training.py).

    python bench/gold/fit_bundled.py

Writes, under src/rubricrl/data/exemplars/:
- `gate/` and `fitted/`: the default reward judge's quality gate and exemplar models (`gate+exemplar+local`),
  fitted on half `a` of the examples;
- `gate-eval/` and `fitted-eval/`: the independent evaluation judge of `rubricrl train`
  (`gate:...gate-eval+exemplar:...fitted-eval`), fitted on half `b`, which shares no prompt with half `a`.

Prints each model's cross-validated AUC (the figures docs/judges.md cites next to the gold-set ones).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "src" / "rubricrl" / "data" / "exemplars"
RUBRICS = ("empathy", "crisis_safety")
TARGETS = {"a": ("gate", "fitted"), "b": ("gate-eval", "fitted-eval")}


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text("utf-8").split("\n") if line.strip()]


def main() -> None:
    from rubricrl.judge_tools.fit import collect_examples, fit_exemplars
    from rubricrl.judge_tools.gate_fit import GateExample, fit_gate
    from rubricrl.judges.exemplar import load_features, load_models, save_models
    from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric

    gate_rows, criteria_rows = rows("gate_examples.jsonl"), rows("criteria_examples.jsonl")
    for half, (gate_dir, exemplar_dir) in TARGETS.items():
        examples = [GateExample(r["prompt"], r["reply"], r["coherent"], r.get("deflects"), r["source"])
                    for r in gate_rows if half in r["half"]]
        for report in fit_gate(examples, DATA / gate_dir):
            print(f"[{half}] gate {report.head}: {report.n} examples ({report.positives} true), CV AUC "
                  f"{report.cv_auc:.3f}, balanced accuracy {report.balanced_accuracy:.3f}, threshold "
                  f"{report.threshold:.2f}, C {report.C:g}")
        merged, encoder, features = {}, None, set()
        with tempfile.TemporaryDirectory() as tmp:
            labels = Path(tmp) / "labels.jsonl"
            labels.write_text("".join(json.dumps(r) + "\n" for r in criteria_rows if r["half"] == half), "utf-8")
            for name in RUBRICS:
                rubric = load_rubric(bundled_rubric_path(name))
                examples, warnings = collect_examples(rubric, labels, rubric_name=name)
                out = Path(tmp) / name
                for r in fit_exemplars(rubric, examples, out):
                    auc = f"{r.auc:.3f}" if r.auc is not None else "-"
                    print(f"[{half}] {name}/{r.criterion_id}: {r.n_met} met, {r.n_unmet} unmet, {r.status}, CV AUC {auc}"
                          + "".join(f"; {w}" for w in r.warnings))
                encoder, models = load_models(out)
                features.add(load_features(out))
                merged.update(models)
        target = DATA / exemplar_dir
        for old in target.glob("*.npz"):
            old.unlink()
        [one] = features  # every example has its prompt, so both rubrics' models are pair-aware
        save_models(target, merged, encoder, one)
        print(f"[{half}] {len(merged)} exemplar models ({', '.join(one)}) -> {target}")


if __name__ == "__main__":
    sys.exit(main())
