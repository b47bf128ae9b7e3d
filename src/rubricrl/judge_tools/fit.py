"""Fit exemplar-judge models: labeled examples per criterion -> logistic regression on sentence
embeddings of the response (and, when every example carries its conversation, the reply's similarity to
it: pair-aware models, judges/exemplar.py), cross-validated (AUC, balanced accuracy; folds grouped by
conversation when there is one, so the figures are for conversations the model has not seen),
Platt-calibrated, and decided at a threshold (THRESHOLD_RULES): by default p_met >= 0.5 on the calibrated
probability, the decision that is right most often at the training examples' class balance; `balanced`
picks the threshold with the highest balanced accuracy on out-of-fold predictions instead, which calls a
rare class far more often. Too few examples, contradictory labels or text the encoder does not cover are
reported, never turned into a silently useless model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rubricrl.core.extras import require
from rubricrl.llm.encoder import DEFAULT_ENCODER, latin_share
from rubricrl.judges.exemplar import PAIR_AWARE, REPLY_ONLY, CriterionModel, criterion_key, model_inputs, save_models
from rubricrl.core.jsonl import iter_objects
from rubricrl.core.problems import Problem, RubricError
from rubricrl.rubrics.model import Rubric

MIN_PER_CLASS = 8
# How a fitted model turns p_met into met/unmet. `calibrated` (default): p_met >= 0.5. `balanced`: the
# threshold with the highest out-of-fold balanced accuracy. On the on-policy gold set the balanced rule put
# thresholds between 0.04 and 0.41 (the met class is rare) and called positive criteria met on 11% of
# incoherent or deflecting replies, against 5.7% at 0.5 (docs/benchmarks.md, issue 15).
THRESHOLD_RULES = ("calibrated", "balanced")


@dataclass(frozen=True)
class LabeledExample:
    """One training example: a reply, whether it meets the criterion, and what the person said (the last
    user message; None when the example has no conversation)."""

    response: str
    label: bool
    context: str | None = None


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
                     ) -> tuple[dict[str, list[LabeledExample]], list[str]]:
    """Examples per criterion id, from the rubric's `examples` (no conversation) and labeled JSONL files.
    Label rows: {criterion_id, response, label: true|false, rubric?, context?}, `context` being what the
    person said; rows naming another rubric are ignored. Returns the examples and warnings (duplicates of
    the same context and response dropped)."""
    paths = [] if labels is None else [labels] if isinstance(labels, (str, Path)) else list(labels)
    examples: dict[str, list[LabeledExample]] = {c.id: [] for c in rubric.criteria if c.check is None}
    for c in rubric.criteria:
        if c.examples is not None and c.id in examples:
            examples[c.id] += ([LabeledExample(t, True) for t in c.examples.met]
                               + [LabeledExample(t, False) for t in c.examples.unmet])
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
                examples[cid].append(LabeledExample(response, label, row.get("context")))
    if problems:
        raise RubricError(problems[:20])
    warnings = []
    for cid, items in examples.items():
        seen: dict[tuple[str | None, str], bool] = {}
        for item in items:
            key = (item.context, " ".join(item.response.split()))
            if key in seen and seen[key] != item.label:
                raise RubricError([Problem(", ".join(map(str, paths)) or "rubric", None, cid,
                                           f"example labelled both met and unmet: {item.response[:60]!r}"
                                           + (f" (context {item.context[:40]!r})" if item.context else ""))])
            seen[key] = item.label
        if len(seen) < len(items):
            warnings.append(f"{cid}: dropped {len(items) - len(seen)} duplicate example(s)")
        examples[cid] = [LabeledExample(text, label, context) for (context, text), label in seen.items()]
    return examples, warnings


def choose_features(examples: dict[str, list[LabeledExample]]) -> tuple[tuple[str, ...], str | None]:
    """PAIR_AWARE when every example has a context, else REPLY_ONLY and a warning saying why (one feature
    set per judge directory, so that the judge embeds each request once)."""
    items = [e for rows in examples.values() for e in rows]
    missing = sum(e.context is None for e in items)
    if items and not missing:
        return PAIR_AWARE, None
    if not items or missing == len(items):
        return REPLY_ONLY, None
    return REPLY_ONLY, (f"{missing} of {len(items)} examples have no context, so every model sees the reply "
                        "alone; give every label row a `context` (what the person said) for pair-aware models")


def fit_exemplars(rubric: Rubric, examples: dict[str, list[LabeledExample]], out_dir: Path, *,
                  min_per_class: int = MIN_PER_CLASS, folds: int = 5, seed: int = 0,
                  encoder: str = DEFAULT_ENCODER, threshold_rule: str = "calibrated",
                  features: Sequence[str] | None = None) -> list[FitReport]:
    """Fit and save one model per criterion with enough examples; report every criterion. `threshold_rule`
    is one of THRESHOLD_RULES; `features` REPLY_ONLY or PAIR_AWARE (default: `choose_features`)."""
    if threshold_rule not in THRESHOLD_RULES:
        raise ValueError(f"threshold rule {threshold_rule!r}: use one of {', '.join(THRESHOLD_RULES)}")
    ids = {c.id for c in rubric.criteria}
    chosen, why = choose_features({cid: rows for cid, rows in examples.items() if cid in ids})
    features = tuple(features) if features is not None else chosen
    if features == PAIR_AWARE and chosen != PAIR_AWARE:
        raise ValueError("pair-aware models need a context on every example; " + (why or "none has one"))
    reports, models = [], {}
    for c in rubric.criteria:
        if c.id not in examples:
            continue
        items = examples[c.id]
        n_met = sum(e.label for e in items)
        report = FitReport(c.id, n_met, len(items) - n_met, "too_few")
        reports.append(report)
        if min(report.n_met, report.n_unmet) < min_per_class:
            report.warnings.append(f"needs >= {min_per_class} examples of each class (has {report.n_met} met, "
                                   f"{report.n_unmet} unmet); the configured LLM judge decides it instead")
            continue
        texts = [e.response for e in items]
        if np.mean([latin_share(t) for t in texts]) < 0.7:
            report.warnings.append(f"most examples are not in Latin script; {encoder} covers English only, so "
                                   "this model may be useless")
        contexts = [e.context or "" for e in items]
        vectors = model_inputs(contexts, texts, features, encoder)
        labels = np.array([e.label for e in items], dtype=bool)
        groups = contexts if all(e.context is not None for e in items) else None
        models[criterion_key(c.text)] = _fit_one(c.id, c.text, texts, vectors, labels, folds, seed, report,
                                                 threshold_rule, groups)
        report.status = "fitted"
    save_models(out_dir, models, encoder, features)
    return reports


def _fit_one(cid: str, text: str, texts: list[str], X: np.ndarray, y: np.ndarray, folds: int, seed: int,
             report: FitReport, threshold_rule: str = "calibrated",
             groups: Sequence[str] | None = None) -> CriterionModel:
    """`groups` (the examples' conversations) keeps each conversation's examples in one fold."""
    require("sklearn", extra="local", feature="exemplar fitting")
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import balanced_accuracy_score, roc_auc_score
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold, cross_val_predict

    def classifier():
        return LogisticRegression(max_iter=2000, C=1.0, class_weight="balanced")

    k = max(2, min(folds, int(y.sum()), int((~y).sum())))
    if groups is not None and len(set(groups)) >= k:
        cv = StratifiedGroupKFold(k, shuffle=True, random_state=seed)
    else:
        cv, groups = StratifiedKFold(k, shuffle=True, random_state=seed), None
    scores = cross_val_predict(classifier(), X, y, cv=cv, groups=groups, method="decision_function")
    platt = LogisticRegression(C=1e6, max_iter=1000).fit(scores[:, None], y)
    a, b = float(platt.coef_[0, 0]), float(platt.intercept_[0])
    calibrated = 1.0 / (1.0 + np.exp(-np.clip(a * scores + b, -50.0, 50.0)))
    threshold, balanced = best_threshold(calibrated, y)
    if threshold_rule == "calibrated":
        threshold = 0.5
        balanced = float(balanced_accuracy_score(y, calibrated >= threshold))
    report.auc = float(roc_auc_score(y, scores))
    report.balanced_accuracy, report.threshold = balanced, threshold
    final = classifier().fit(X, y)
    return CriterionModel(cid, text, final.coef_[0].astype(np.float32), float(final.intercept_[0]), a, b,
                          threshold, {"cv_auc": report.auc, "cv_balanced_accuracy": balanced, "folds": k,
                                      "threshold_rule": threshold_rule, "cv_grouped": groups is not None,
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
