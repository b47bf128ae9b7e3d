"""The quality gate: a defence that stops incoherent and deflecting replies from earning positive
criteria (and spares the LLM judge the calls for them).

Why: a policy sampled at temperature 1.0 writes word salad full of empathy words ("Happy claymen think
mistakenly... I understand how you feel"), and embedding classifiers and small LLM judges call such
replies "validates the feeling". A policy also learns to hide behind "as an AI, I'm not equipped to
provide emotional support". Read strictly, neither reply does anything a supportive criterion asks for.

What: two small fitted models (`rubricrl judge fit-gate`, judge_tools/gate_fit.py), each a logistic
regression over standardised features of the (prompt, reply) pair:
- `coherence`: p(coherent) from sentence-embedding features (the reply's embedding, its cosine
  similarity to the prompt, the share of repeated word trigrams) and, when the gate was fitted with a
  reference language model, the reply's per-token log-probabilities under it (llm/likelihood.py);
- `deflection`: p(deflects) from the reply's embedding.

The router (judges/routing.py) asks the gate about every reply that has a positive-weight criterion
for an exemplar or model judge. When p(coherent) < its threshold the reply is `incoherent`; when
p(deflects) >= its threshold it `deflects`. Then the gate fires: each of those criteria is `unmet`,
with judge id `gate`, a reason such as `gate: incoherent (p_coherent=0.12 < 0.50)`, and p_met = the
judge's p_met x p_ok, where p_ok = p(coherent) x (1 - p(deflects)). The exemplar judge still scores a
gated reply (it is cheap, and its p_met keeps the ranking among gated replies); an LLM judge is not
called for it (p_met 0). A reply the gate lets through keeps its verdicts as they are. The coherence
threshold lets 97% of the coherent training replies through (out-of-fold): the gate fires on confident
incoherence only, because a gate that fires on good replies takes the reward's signal away.
Pitfalls (negative weight) are judged as usual, and rule checks always run. DefenceStats counts gated
replies by reason, per reward call, so the trainer logs them per step.

The bundled gate (`gate` in a judge spec) was fitted on the embedded policy's own replies, labelled by
reading (hand-written replies only teach the deflection model: with them, the coherence model learned
"hand-written vs. policy style"); docs/judges.md gives its AUC on gold items it never saw. A manifest
holds every number inline (no pickle): loading a gate never executes code.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rubricrl.core.jsonl import read_text
from rubricrl.core.resources import data_path
from rubricrl.judges.defences import GATE_JUDGE_ID
from rubricrl.llm.encoder import DEFAULT_ENCODER, embed

MANIFEST = "manifest.json"
BUNDLED_GATE = data_path("exemplars", "gate")
EMBEDDING = "embedding"  # feature name standing for all the encoder's dimensions
SCALAR_FEATURES = ("prompt_similarity", "repeated_trigrams", "lm_mean", "lm_p10", "lm_low_share")
LM_FEATURES = ("lm_mean", "lm_p10", "lm_low_share")


def repeated_trigrams(text: str) -> float:
    """Share of the reply's word trigrams that repeat an earlier one (repetition loops score high)."""
    words = text.lower().split()
    grams = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def feature_columns(prompts: Sequence[str], replies: Sequence[str], names: Sequence[str],
                    encoder: str = DEFAULT_ENCODER, lm: str | None = None) -> dict[str, np.ndarray]:
    """Each named feature as a 2-D block, one row per (prompt, reply): `embedding` is the encoder's
    dimensions, every other feature one column. LM features need `lm` (a causal LM spec, e.g.
    `smollm2-135m`)."""
    if len(prompts) != len(replies):
        raise ValueError(f"{len(prompts)} prompts but {len(replies)} replies")
    unknown = [n for n in names if n != EMBEDDING and n not in SCALAR_FEATURES]
    if unknown:
        raise ValueError(f"unknown gate feature(s) {unknown}; known: {EMBEDDING}, {', '.join(SCALAR_FEATURES)}")
    reply_vectors = embed(list(replies), encoder)
    columns: dict[str, np.ndarray] = {EMBEDDING: reply_vectors}
    if "prompt_similarity" in names:
        columns["prompt_similarity"] = (embed(list(prompts), encoder) * reply_vectors).sum(axis=1)[:, None]
    if "repeated_trigrams" in names:
        columns["repeated_trigrams"] = np.array([[repeated_trigrams(r)] for r in replies])
    if any(n in LM_FEATURES for n in names):
        if not lm:
            raise ValueError("log-probability features need a reference language model (`lm`)")
        from rubricrl.llm.likelihood import reply_likelihoods

        stats = reply_likelihoods(prompts, replies, model=lm)
        for k, name in enumerate(LM_FEATURES):
            columns[name] = np.array([[s.features()[k]] for s in stats])
    return columns


def stack(columns: dict[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    return np.hstack([columns[n] for n in names]).astype(np.float64)


def gate_features(prompts: Sequence[str], replies: Sequence[str], names: Sequence[str],
                  encoder: str = DEFAULT_ENCODER, lm: str | None = None) -> np.ndarray:
    """The feature matrix, columns in the order of `names` (`embedding` expands to the encoder's
    dimensions)."""
    if not len(replies):
        return np.zeros((0, 0), dtype=np.float64)
    return stack(feature_columns(prompts, replies, names, encoder, lm), names)


@dataclass
class GateHead:
    """One logistic model: p = sigmoid(((x - mean) / scale) . coef + intercept), decided at `threshold`."""

    features: list[str]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    threshold: float
    metrics: dict = field(default_factory=dict)

    def p(self, X: np.ndarray) -> np.ndarray:
        z = ((X - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))

    def to_dict(self) -> dict:
        return {"features": self.features, "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "coef": self.coef.tolist(), "intercept": self.intercept, "threshold": self.threshold,
                "metrics": self.metrics}

    @classmethod
    def from_dict(cls, d: dict) -> GateHead:
        head = cls(list(d["features"]), np.asarray(d["mean"], dtype=np.float64),
                   np.asarray(d["scale"], dtype=np.float64), np.asarray(d["coef"], dtype=np.float64),
                   float(d["intercept"]), float(d["threshold"]), dict(d.get("metrics", {})))
        if not (len(head.mean) == len(head.scale) == len(head.coef)):
            raise ValueError("gate head: mean, scale and coef must have the same length")
        if not all(math.isfinite(x) for x in (head.intercept, head.threshold)) or not np.all(head.scale > 0):
            raise ValueError("gate head: non-finite intercept/threshold or a non-positive scale")
        return head


@dataclass(frozen=True)
class GateResult:
    """What the gate says of one reply. `fired` is `incoherent`, `deflects` or None."""

    p_coherent: float
    p_deflects: float
    fired: str | None
    reason: str = ""

    @property
    def p_ok(self) -> float:
        """The probability that the reply is coherent and does not deflect (the factor applied to p_met)."""
        return self.p_coherent * (1.0 - self.p_deflects)


def save_gate(gate_dir: Path, coherence: GateHead, deflection: GateHead, *, encoder: str = DEFAULT_ENCODER,
              lm: str | None = None, trained_on: dict | None = None) -> None:
    gate_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"format": 1, "encoder": encoder, "lm": lm, "coherence": coherence.to_dict(),
                "deflection": deflection.to_dict(), "trained_on": trained_on or {}}
    (gate_dir / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")


class QualityGate:
    """The fitted gate in `gate_dir` (default: the bundled one). `lm` overrides the reference language
    model a gate with log-probability features was fitted with (a hub id, directory or .gguf)."""

    def __init__(self, gate_dir: str | Path | None = None, lm: str | None = None):
        self.gate_dir = Path(gate_dir) if gate_dir else BUNDLED_GATE
        path = self.gate_dir / MANIFEST
        if not path.is_file():
            raise FileNotFoundError(f"{self.gate_dir}: no {MANIFEST}; fit a gate with `rubricrl judge fit-gate`")
        manifest = json.loads(read_text(path))
        try:
            self.coherence = GateHead.from_dict(manifest["coherence"])
            self.deflection = GateHead.from_dict(manifest["deflection"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: not a valid gate manifest ({exc}); refit it with `rubricrl judge fit-gate`") \
                from None
        self.encoder = manifest.get("encoder") or DEFAULT_ENCODER
        self.lm = lm or manifest.get("lm")
        self.trained_on = manifest.get("trained_on", {})
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        self.judge_id = f"{GATE_JUDGE_ID}:{self.gate_dir.name}@{digest}"

    def assess(self, prompts: Sequence[str], replies: Sequence[str]) -> list[GateResult]:
        if not len(replies):
            return []
        names = list(dict.fromkeys(self.coherence.features + self.deflection.features))
        columns = feature_columns(prompts, replies, names, self.encoder, self.lm)
        p_coh = self.coherence.p(stack(columns, self.coherence.features))
        p_def = self.deflection.p(stack(columns, self.deflection.features))
        out = []
        for pc, pd in zip(p_coh.tolist(), p_def.tolist()):
            if pc < self.coherence.threshold:
                out.append(GateResult(pc, pd, "incoherent",
                                      f"gate: incoherent (p_coherent={pc:.2f} < {self.coherence.threshold:.2f})"))
            elif pd >= self.deflection.threshold:
                out.append(GateResult(pc, pd, "deflects",
                                      f"gate: deflects (p_deflects={pd:.2f} >= {self.deflection.threshold:.2f})"))
            else:
                out.append(GateResult(pc, pd, None))
        return out
