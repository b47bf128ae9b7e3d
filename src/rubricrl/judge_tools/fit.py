"""Fit exemplar-judge models: labeled examples per criterion -> logistic regression on sentence
embeddings of the response, cross-validated (AUC, balanced accuracy), Platt-calibrated, and decided at a
threshold (THRESHOLD_RULES): by default p_met >= 0.5 on the calibrated probability, the decision that is
right most often at the training examples' class balance; `balanced` picks the threshold with the highest
balanced accuracy on out-of-fold predictions instead, which calls a rare class far more often. Too few
examples, contradictory labels or text the encoder does not cover are reported, never turned into a
silently useless model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rubricrl.core.extras import require
from rubricrl.llm.encoder import DEFAULT_ENCODER, embed, latin_share
from rubricrl.judges.exemplar import CriterionModel, criterion_key, save_models
from rubricrl.core.jsonl import iter_objects
from rubricrl.core.problems import Problem, RubricError
from rubricrl.rubrics.model import Rubric

MIN_PER_CLASS = 8
# How a fitted model turns p_met into met/unmet. `calibrated` (default): p_met >= 0.5. `balanced`: the
# threshold with the highest out-of-fold balanced accuracy. On the on-policy gold set the balanced rule put
# thresholds between 0.04 and 0.41 (the met class is rare) and called positive criteria met on 11% of
# incoherent or deflecting replies, against 5.7% at 0.5 (docs/benchmarks.md, issue 15).
THRESHOLD_RULES = ("calibrated", "balanced")


@dataclass
class FitReport:
    criterion_id: str
    n_met: int
    n_unmet: int
    status: str  # fitted | too_few
    auc: float | None = None
    balanced_accuracy: float | None = None
    threshold: float | None = None
    warnings: list[str] = field(default_factory=list)


def collect_examples(rubric: Rubric, labels: Path | Sequence[Path] | None = None, rubric_name: str | None = None
                     ) -> tuple[dict[str, list[tuple[str, bool]]], list[str]]:
    """Examples per criterion id, from the rubric's `examples` and labeled JSONL files.
    Label rows: {criterion_id, response, label: true|false, rubric?, context?}; rows naming another
    rubric are ignored. Returns the examples and warnings (duplicates dropped)."""
    paths = [] if labels is None else [labels] if isinstance(labels, (str, Path)) else list(labels)
    examples: dict[str, list[tuple[str, bool]]] = {c.id: [] for c in rubric.criteria if c.check is None}
    for c in rubric.criteria:
        if c.examples is not None and c.id in examples:
            examples[c.id] += [(t, True) for t in c.examples.met] + [(t, False) for t in c.examples.unmet]
    problems: list[Problem] = []
    for labels in paths:
        for line, row in iter_objects(labels, problems, "{criterion_id, response, label}"):
            if rubric_name and row.get("rubric") not in (None, rubric_name, rubric.id):
                continue
            cid, response, label = row.get("criterion_id"), row.get("response"), row.get("label")
            if not isinstance(label, bool):
                problems.append(Problem(str(labels), line, "label", f"must be true or false, got {label!r}",
                                        "label every example"))
            elif not isinstance(response, str) or not response.strip():
                problems.append(Problem(str(labels), line, "response", "must be a non-empty string"))
            elif cid not in examples:
                problems.append(Problem(str(labels), line, "criterion_id", f"{cid!r} is not a model-judged "
                                        "criterion of this rubric", f"use one of {sorted(examples)}"))
            elif row.get("context") is not None and not isinstance(row.get("context"), str):
                problems.append(Problem(str(labels), line, "context", "must be a string (what the person said)"))
            else:
                examples[cid].append((response, label))
    if problems:
        raise RubricError(problems[:20])
    warnings = []
    for cid, items in examples.items():
        seen: dict[str, bool] = {}
        for text, label in items:
            key = " ".join(text.split())
            if key in seen and seen[key] != label:
                raise RubricError([Problem(", ".join(map(str, paths)) or "rubric", None, cid,
                                           f"example labelled both met and unmet: {text[:60]!r}")])
            seen[key] = label
        if len(seen) < len(items):
            warnings.append(f"{cid}: dropped {len(items) - len(seen)} duplicate example(s)")
        examples[cid] = list(seen.items())
    return examples, warnings


def fit_exemplars(rubric: Rubric, examples: dict[str, list[tuple[str, bool]]], out_dir: Path, *,
                  min_per_class: int = MIN_PER_CLASS, folds: int = 5, seed: int = 0,
                  encoder: str = DEFAULT_ENCODER, threshold_rule: str = "calibrated") -> list[FitReport]:
    """Fit and save one model per criterion with enough examples; report every criterion. `threshold_rule`
    is one of THRESHOLD_RULES."""
    if threshold_rule not in THRESHOLD_RULES:
        raise ValueError(f"threshold rule {threshold_rule!r}: use one of {', '.join(THRESHOLD_RULES)}")
    reports, models = [], {}
    for c in rubric.criteria:
        if c.id not in examples:
            continue
        items = examples[c.id]
        n_met = sum(label for _, label in items)
        report = FitReport(c.id, n_met, len(items) - n_met, "too_few")
        reports.append(report)
        if min(report.n_met, report.n_unmet) < min_per_class:
            report.warnings.append(f"needs >= {min_per_class} examples of each class (has {report.n_met} met, "
                                   f"{report.n_unmet} unmet); the configured LLM judge decides it instead")
            continue
        texts = [t for t, _ in items]
        if np.mean([latin_share(t) for t in texts]) < 0.7:
            report.warnings.append(f"most examples are not in Latin script; {encoder} covers English only, so "
                                   "this model may be useless")
        vectors = embed(texts, encoder)
        labels = np.array([label for _, label in items], dtype=bool)
        models[criterion_key(c.text)] = _fit_one(c.id, c.text, texts, vectors, labels, folds, seed, report,
                                                 threshold_rule)
        report.status = "fitted"
    save_models(out_dir, models, encoder)
    return reports


def _fit_one(cid: str, text: str, texts: list[str], X: np.ndarray, y: np.ndarray, folds: int, seed: int,
             report: FitReport, threshold_rule: str = "calibrated") -> CriterionModel:
    require("sklearn", extra="local", feature="exemplar fitting")
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import balanced_accuracy_score, roc_auc_score
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    def classifier():
        return LogisticRegression(max_iter=2000, C=1.0, class_weight="balanced")

    k = max(2, min(folds, int(y.sum()), int((~y).sum())))
    scores = cross_val_predict(classifier(), X, y, cv=StratifiedKFold(k, shuffle=True, random_state=seed),
                               method="decision_function")
    platt = LogisticRegression(C=1e6, max_iter=1000).fit(scores[:, None], y)
    a, b = float(platt.coef_[0, 0]), float(platt.intercept_[0])
    calibrated = 1.0 / (1.0 + np.exp(-(a * scores + b)))
    threshold, balanced = best_threshold(calibrated, y)
    if threshold_rule == "calibrated":
        threshold = 0.5
        balanced = float(balanced_accuracy_score(y, calibrated >= threshold))
    report.auc = float(roc_auc_score(y, scores))
    report.balanced_accuracy, report.threshold = balanced, threshold
    final = classifier().fit(X, y)
    return CriterionModel(cid, text, final.coef_[0].astype(np.float32), float(final.intercept_[0]), a, b,
                          threshold, {"cv_auc": report.auc, "cv_balanced_accuracy": balanced, "folds": k,
                                      "threshold_rule": threshold_rule,
                                      "n_met": int(y.sum()), "n_unmet": int((~y).sum())},
                          texts, y, X)


def best_threshold(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The threshold on `p` with the highest balanced accuracy (ties: closest to 0.5)."""
    best = (-1.0, 0.0, 0.5)
    for t in np.unique(np.concatenate([p, [0.5]])):
        predicted = p >= t
        tpr = (predicted & y).sum() / max(y.sum(), 1)
        tnr = (~predicted & ~y).sum() / max((~y).sum(), 1)
        score = (tpr + tnr) / 2
        if (score, -abs(t - 0.5)) > (best[0], -abs(best[2] - 0.5)):
            best = (score, 0.0, float(t))
    return best[2], float(best[0])
