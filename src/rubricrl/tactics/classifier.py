"""Embedding-based tactic classifier for supporter turns, multi-label capable.

Features: sentence embedding of the turn, half-weighted embeddings of the person's last message
and of the supporter's previous turn, TF-IDF word 1-2-grams of the turn, a question-mark flag and
the length. One logistic regression per tactic (one-vs-rest), so a turn can carry several tactics;
the predicted set is every tactic with p >= 0.5, and always the most likely one. Saved as JSON +
npz (no pickle).

A classifier fitted without contexts (no example had a person's message or a previous turn, as
for the bundled one, fitted on a taxonomy's example turns) records that in `inputs` and is given
the empty text there when it predicts, as in training: those columns carried no information, and
the person's messages are then never embedded (over 40% of the encoder's work on ESConv's dialogues).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rubricrl.core.extras import require
from rubricrl.llm.encoder import DEFAULT_ENCODER, embed
from rubricrl.core.jsonl import read_text
from rubricrl.core.resources import data_path

BUNDLED_DIR = data_path("tactics", "esconv8")
CONTEXT_INPUTS = ("context", "previous")
PROGRESS_CHUNK = 1024  # texts per encoder call when progress is reported (else one call for all)
Progress = Callable[[int, int], None]  # (texts embedded, texts to embed)


@dataclass(frozen=True)
class TurnExample:
    text: str
    tactics: frozenset[str]
    context: str = ""  # the person's last message
    previous: str = ""  # the supporter's previous turn


class TacticClassifier:
    def __init__(self, tactics: list[str], vocabulary: dict[str, int], idf: np.ndarray, coef: np.ndarray,
                 intercept: np.ndarray, encoder: str = DEFAULT_ENCODER, taxonomy: str = "",
                 inputs: tuple[str, ...] = CONTEXT_INPUTS):
        self.tactics, self.vocabulary, self.idf = tactics, vocabulary, idf
        self.coef, self.intercept, self.encoder, self.taxonomy = coef, intercept, encoder, taxonomy
        self.inputs = tuple(inputs)  # the context inputs it was fitted with (non-empty in some example)

    # -- features ------------------------------------------------------------------------------

    @staticmethod
    def _tfidf_fit(texts: Sequence[str]):
        from sklearn.feature_extraction.text import TfidfVectorizer

        return TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True).fit(texts)

    def _tfidf(self, texts: Sequence[str]):
        from sklearn.feature_extraction.text import TfidfVectorizer

        vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, vocabulary=self.vocabulary)
        vec.idf_ = self.idf  # restores the fitted weights without pickle
        return vec.transform(texts)

    def embeddings(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        """Embeddings of `texts` from the shared encoder, each distinct text once, in one call that
        the encoder batches; with `progress`, in chunks of PROGRESS_CHUNK, calling `progress(done, total)`."""
        if progress is not None:
            distinct = list(dict.fromkeys(texts))
            for start in range(0, len(distinct), PROGRESS_CHUNK):
                embed(distinct[start:start + PROGRESS_CHUNK], self.encoder)  # fills the encoder's cache
                progress(min(start + PROGRESS_CHUNK, len(distinct)), len(distinct))
        return embed(texts, self.encoder)  # encodes what is not cached yet, in batches

    def features(self, turns: Sequence[TurnExample], tfidf=None, progress: Progress | None = None):
        require("sklearn", extra="local", feature="tactic classifier")
        from scipy.sparse import csr_matrix, hstack

        texts, n = [t.text for t in turns], len(turns)
        context = [t.context if "context" in self.inputs else "" for t in turns]
        previous = [t.previous if "previous" in self.inputs else "" for t in turns]
        vectors = self.embeddings(texts + context + previous, progress)
        dense = np.hstack([vectors[:n], 0.5 * vectors[n:2 * n], 0.5 * vectors[2 * n:],
                           np.array([[("?" in t) * 1.0, len(t.split()) / 30] for t in texts])])
        sparse = tfidf.transform(texts) if tfidf is not None else self._tfidf(texts)
        return hstack([csr_matrix(dense), sparse]).tocsr()

    # -- fit / predict -------------------------------------------------------------------------

    @classmethod
    def fit(cls, examples: Sequence[TurnExample], tactics: list[str], *, taxonomy: str = "", c: float = 4.0,
            encoder: str = DEFAULT_ENCODER) -> TacticClassifier:
        require("sklearn", extra="local", feature="tactic classifier")
        from sklearn.linear_model import LogisticRegression

        tfidf = cls._tfidf_fit([e.text for e in examples])
        inputs = tuple(k for k in CONTEXT_INPUTS if any(getattr(e, k) for e in examples))
        model = cls(tactics, {k: int(v) for k, v in tfidf.vocabulary_.items()}, tfidf.idf_, np.zeros(0),
                    np.zeros(0), encoder, taxonomy, inputs)
        X = model.features(examples, tfidf)
        coefs, intercepts = [], []
        for tactic in tactics:
            y = np.array([tactic in e.tactics for e in examples])
            if y.all() or not y.any():
                raise ValueError(f"tactic {tactic!r} has {'no' if not y.any() else 'only'} positive examples; "
                                 "every tactic needs examples with and without it")
            lr = LogisticRegression(max_iter=5000, C=c, class_weight="balanced").fit(X, y)
            coefs.append(lr.coef_[0])
            intercepts.append(lr.intercept_[0])
        model.coef, model.intercept = np.array(coefs, dtype=np.float32), np.array(intercepts, dtype=np.float32)
        return model

    def probabilities(self, turns: Sequence[TurnExample], progress: Progress | None = None) -> np.ndarray:
        """(turns, tactics) matrix of independent per-tactic probabilities. Give all turns at once:
        their embeddings are then computed in batches (see `embeddings`)."""
        if not turns:
            return np.zeros((0, len(self.tactics)))
        scores = self.features(turns, progress=progress) @ self.coef.T + self.intercept
        return 1.0 / (1.0 + np.exp(-np.asarray(scores)))

    def predict(self, turns: Sequence[TurnExample], threshold: float = 0.5) -> list[set[str]]:
        return [self.labels(row, threshold) for row in self.probabilities(turns)]

    def labels(self, row: np.ndarray, threshold: float = 0.5) -> set[str]:
        """Every tactic with p >= threshold, and always the most likely one."""
        return {self.tactics[j] for j in np.where(row >= threshold)[0]} | {self.tactics[int(row.argmax())]}

    # -- persistence ---------------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(directory / "weights.npz", coef=self.coef, intercept=self.intercept, idf=self.idf)
        (directory / "classifier.json").write_text(json.dumps(
            {"format": 1, "encoder": self.encoder, "taxonomy": self.taxonomy, "tactics": self.tactics,
             "inputs": list(self.inputs), "vocabulary": self.vocabulary}, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path | None = None) -> TacticClassifier:
        directory = Path(directory) if directory else BUNDLED_DIR
        meta_path = directory / "classifier.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"{directory}: no classifier.json; fit one with `rubricrl tactics fit`")
        meta = json.loads(read_text(meta_path))
        arrays = np.load(directory / "weights.npz", allow_pickle=False)
        return cls(meta["tactics"], meta["vocabulary"], arrays["idf"], arrays["coef"], arrays["intercept"],
                   meta["encoder"], meta.get("taxonomy", ""), tuple(meta.get("inputs", CONTEXT_INPUTS)))


def cross_validate(examples: Sequence[TurnExample], tactics: list[str], folds: int = 5, seed: int = 0,
                   **fit_kwargs) -> dict:
    """Single-label view (argmax): accuracy, macro-F1, per-class F1 and the confusion matrix, from
    out-of-fold predictions; also returns those predictions."""
    require("sklearn", extra="local", feature="tactic classifier")
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score
    from sklearn.model_selection import StratifiedKFold

    gold = np.array([sorted(e.tactics)[0] for e in examples])
    predicted = np.empty(len(examples), dtype=object)
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(np.zeros(len(gold)), gold):
        model = TacticClassifier.fit([examples[i] for i in train], tactics, **fit_kwargs)
        probs = model.probabilities([examples[i] for i in test])
        predicted[test] = [tactics[int(j)] for j in probs.argmax(axis=1)]
    return {
        "accuracy": float(accuracy_score(gold, predicted)),
        "macro_f1": float(f1_score(gold, predicted, labels=tactics, average="macro", zero_division=0)),
        "per_class_f1": dict(zip(tactics, f1_score(gold, predicted, labels=tactics, average=None,
                                                    zero_division=0).tolist())),
        "confusion": confusion_matrix(gold, predicted, labels=tactics).tolist(),
        "predicted": predicted.tolist(),
    }
