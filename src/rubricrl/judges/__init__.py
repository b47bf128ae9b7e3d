"""Judges: rules, a local transformers model, a cache, and the router that combines them.

`make_judge(spec)` builds the judge a CLI `--judge` names:
- `rules`: declarative checks only; model-judged criteria are `skipped`;
- `local` or `local:MODEL`: checks + a local yes/no judge (MODEL: hub id, directory or .gguf;
  default: the embedded SmolLM2-135M-Instruct), with the SQLite verdict cache.
"""

from __future__ import annotations

from pathlib import Path

from .base import Judge, JudgeRequest, JudgeStats
from .cache import CachedJudge, VerdictCache
from .routing import RoutedJudge
from .rules import RuleJudge

__all__ = ["Judge", "JudgeRequest", "JudgeStats", "CachedJudge", "VerdictCache", "RoutedJudge", "RuleJudge",
           "make_judge", "JudgeSpecError"]


class JudgeSpecError(ValueError):
    pass


def make_judge(spec: str = "local", *, cache: bool = True, cache_path: str | Path | None = None,
               threshold: float = 0.5) -> RoutedJudge:
    kind, _, arg = spec.partition(":")
    if kind == "rules" and not arg:
        return RoutedJudge(None)
    if kind == "local":
        from ..models import cache_dir
        from .local import LocalJudge

        model_judge: Judge = LocalJudge(arg or None, threshold=threshold)
        if cache:
            model_judge = CachedJudge(model_judge, VerdictCache(cache_path or cache_dir() / "verdicts.sqlite"))
        return RoutedJudge(model_judge)
    raise JudgeSpecError(f"unknown judge spec {spec!r}; use `rules`, `local` or `local:MODEL` "
                         "(MODEL: hub id, local directory or .gguf file)")
