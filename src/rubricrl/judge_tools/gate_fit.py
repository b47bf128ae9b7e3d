"""Fit the quality gate (judges/gate.py) from labelled (prompt, reply) examples.

Example rows (JSONL): `{prompt, reply, coherent?: true|false|null, deflects?: true|false|null, source?}`.
A row without `coherent` trains only the deflection model, one without `deflects` only the coherence
model. The bundled examples (`data/exemplars/gate_examples.jsonl`) are the embedded policy's own replies,
labelled by reading (docs/judges.md), and hand-written deflections (`deflects: true` only).

Each model is a logistic regression on standardised features; its regularisation is picked from a
small grid by cross-validated AUC. The deflection threshold is the one with the best balanced accuracy
on the out-of-fold probabilities; the coherence threshold lets 97% of the coherent examples through
(out-of-fold), so the gate fires on confident incoherence only. Bad rows are reported with file, line and field, never skipped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rubricrl.core.extras import require
from rubricrl.core.jsonl import iter_objects
from rubricrl.core.problems import Problem, RubricError
from rubricrl.core.resources import data_path
from rubricrl.judge_tools.fit import best_threshold
from rubricrl.judges.gate import EMBEDDING, GateHead, gate_features, save_gate
from rubricrl.llm.encoder import DEFAULT_ENCODER

BUNDLED_EXAMPLES = data_path("exemplars", "gate_examples.jsonl")
COHERENCE_FEATURES = (EMBEDDING, "prompt_similarity", "repeated_trigrams")
LM_COHERENCE_FEATURES = COHERENCE_FEATURES + ("lm_mean", "lm_p10", "lm_low_share")
DEFLECTION_FEATURES = (EMBEDDING,)
C_GRID = (0.01, 0.03, 0.1, 0.3, 1.0)
MIN_PER_CLASS = 8
KEEP_COHERENT = 0.97  # share of coherent examples the coherence threshold lets through (out-of-fold)


@dataclass(frozen=True)
class GateExample:
    prompt: str
    reply: str
    coherent: bool | None
    deflects: bool | None = None
    source: str = ""


@dataclass
class GateFitReport:
    head: str
    n: int
    positives: int
    cv_auc: float
    balanced_accuracy: float
    threshold: float
    C: float
    features: list[str] = field(default_factory=list)


def read_gate_examples(path: Path) -> list[GateExample]:
    examples, problems = [], []
    for line, row in iter_objects(path, problems, "{prompt, reply, coherent?, deflects?}"):
        bad = [(name, "must be a string") for name in ("prompt", "reply") if not isinstance(row.get(name), str)]
        bad += [("coherent", "must be true, false or absent")] if row.get("coherent") not in (None, True, False) else []
        bad += [("coherent", "a row needs `coherent` or `deflects`")] if row.get("coherent") is None and \
            row.get("deflects") is None else []
        bad += [("deflects", "must be true, false or absent")] if row.get("deflects") not in (None, True, False) else []
        if bad:
            problems += [Problem(str(path), line, name, message) for name, message in bad]
            continue
        examples.append(GateExample(row["prompt"], row["reply"], row.get("coherent"), row.get("deflects"),
                                    str(row.get("source", ""))))
    if problems:
        raise RubricError(problems[:20])
    return examples


def fit_head(name: str, X: np.ndarray, y: np.ndarray, features: list[str], *, folds: int = 5,
             seed: int = 0) -> tuple[GateHead, GateFitReport]:
    require("sklearn", extra="local", feature="quality gate fitting")
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    positives, negatives = int(y.sum()), int((~y).sum())
    if min(positives, negatives) < MIN_PER_CLASS:
        raise ValueError(f"the {name} model needs >= {MIN_PER_CLASS} examples of each class "
                         f"(has {positives} true, {negatives} false)")
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    scale[scale < 1e-8] = 1.0
    Z = (X - mean) / scale
    k = max(2, min(folds, positives, negatives))
    cv = StratifiedKFold(k, shuffle=True, random_state=seed)
    best = None
    for C in C_GRID:
        model = LogisticRegression(C=C, max_iter=5000, class_weight="balanced")
        p = cross_val_predict(model, Z, y, cv=cv, method="predict_proba")[:, 1]
        score = float(roc_auc_score(y, p))
        if best is None or score > best[0] + 1e-9:
            best = (score, C, p)
    cv_auc, C, p = best
    if name == "coherence":
        # fire only on confident incoherence: the threshold lets KEEP_COHERENT of the coherent examples
        # through (out-of-fold), since a gate firing on good replies takes away the reward's signal
        threshold = float(np.quantile(p[y], 1.0 - KEEP_COHERENT))
        predicted = p >= threshold
        balanced = float((predicted[y].mean() + (~predicted[~y]).mean()) / 2)
    else:
        threshold, balanced = best_threshold(p, y)
    final = LogisticRegression(C=C, max_iter=5000, class_weight="balanced").fit(Z, y)
    report = GateFitReport(name, len(y), positives, cv_auc, balanced, threshold, C, list(features))
    head = GateHead(list(features), mean, scale, final.coef_[0].astype(np.float64), float(final.intercept_[0]),
                    threshold, {"cv_auc": cv_auc, "cv_balanced_accuracy": balanced, "folds": k, "C": C,
                                "n": len(y), "positives": positives})
    return head, report


def fit_gate(examples: list[GateExample], out_dir: Path, *, lm: str | None = None,
             encoder: str = DEFAULT_ENCODER, folds: int = 5, seed: int = 0) -> list[GateFitReport]:
    """Fit and save the coherence and deflection models; `lm` adds log-probability features under that
    reference model to the coherence model."""
    coherence_features = list(LM_COHERENCE_FEATURES if lm else COHERENCE_FEATURES)
    prompts, replies = [e.prompt for e in examples], [e.reply for e in examples]
    rows = [i for i, e in enumerate(examples) if e.coherent is not None]
    X = gate_features([prompts[i] for i in rows], [replies[i] for i in rows], coherence_features, encoder, lm)
    coherence, r1 = fit_head("coherence", X, np.array([examples[i].coherent for i in rows]), coherence_features,
                             folds=folds, seed=seed)
    rows = [i for i, e in enumerate(examples) if e.deflects is not None]
    Xd = gate_features([prompts[i] for i in rows], [replies[i] for i in rows], list(DEFLECTION_FEATURES), encoder)
    deflection, r2 = fit_head("deflection", Xd, np.array([examples[i].deflects for i in rows]),
                              list(DEFLECTION_FEATURES), folds=folds, seed=seed)
    sources: dict[str, int] = {}
    for e in examples:
        sources[e.source or "unnamed"] = sources.get(e.source or "unnamed", 0) + 1
    prompts = sorted({hashlib.sha256(" ".join(e.prompt.split()).encode("utf-8")).hexdigest()[:12] for e in examples})
    save_gate(out_dir, coherence, deflection, encoder=encoder, lm=lm,
              trained_on={"examples": len(examples), "by_source": sources, "prompts": prompts})
    return [r1, r2]
