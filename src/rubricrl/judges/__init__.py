"""Judges: rules, a local transformers model, a cache, and the router that combines them.

`make_judge(spec)` builds the judge a CLI `--judge` names. Declarative checks always go to the
rule judge; the spec names what decides the other criteria, joined with `+`:
- `rules`: nothing else; model-judged criteria are `skipped`;
- `local` or `local:MODEL`: a local yes/no LLM judge (MODEL: hub id, directory or .gguf;
  default: the embedded SmolLM2-135M-Instruct), with the SQLite verdict cache;
- `exemplar` or `exemplar:DIR`: exemplar classifiers (default: the bundled ones) for the
  criteria they were fitted on; e.g. `exemplar+local` sends the rest to the local LLM judge.
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
    model_judge: Judge | None = None
    exemplar = None
    for part in spec.split("+"):
        kind, _, arg = part.strip().partition(":")
        if kind == "rules" and not arg:
            continue
        if kind == "local" and model_judge is None:
            from ..models import cache_dir
            from .local import LocalJudge

            model_judge = LocalJudge(arg or None, threshold=threshold)
            if cache:
                model_judge = CachedJudge(model_judge, VerdictCache(cache_path or cache_dir() / "verdicts.sqlite"))
        elif kind == "exemplar" and exemplar is None:
            from .exemplar import ExemplarJudge

            exemplar = ExemplarJudge(arg or None)
        else:
            raise JudgeSpecError(f"unknown judge spec {spec!r}; use `rules`, `local`, `local:MODEL`, `exemplar`, "
                                 "`exemplar:DIR` or a `+` combination such as `exemplar+local`")
    return RoutedJudge(model_judge, exemplar)
