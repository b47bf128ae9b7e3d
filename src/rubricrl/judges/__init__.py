"""Judges: rules, a local transformers model, a cache, and the router that combines them.

`make_judge(spec)` builds the judge a CLI `--judge` names. Declarative checks always go to the
rule judge; the spec names what decides the other criteria, joined with `+`:
- `rules`: nothing else; model-judged criteria are `skipped`;
- `local` or `local:MODEL`: a local yes/no LLM judge (MODEL: hub id, directory or .gguf;
  default: the embedded SmolLM2-135M-Instruct), with the SQLite verdict cache;
- `exemplar` or `exemplar:DIR`: exemplar classifiers (default: the bundled ones) for the
  criteria they were fitted on; e.g. `exemplar+local` sends the rest to the local LLM judge;
- `openai:URL[?key=value&...]`: an OpenAI-compatible endpoint (vLLM, llama.cpp, Ollama, a hosted
  API); keys: `mode` (per_criterion | batched | logprob | implicit) and any EndpointConfig field,
  e.g. `openai:http://127.0.0.1:8000/v1?model=Qwen/Qwen2.5-7B-Instruct&mode=batched&concurrency=32`;
- `llamacpp[:FILE.gguf][?key=value&...]`: starts a llama.cpp server on loopback in this process
  (default: the embedded model) and judges through it; default mode `logprob`.
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
        if "?" in kind:  # `llamacpp?mode=...`: options without a model
            kind, query = kind.split("?", 1)
            arg = "?" + query + (":" + arg if arg else "")
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
        elif kind in ("openai", "llamacpp") and model_judge is None:
            model_judge = http_judge(kind, arg, threshold=threshold)
            if cache:
                from ..models import cache_dir

                model_judge = CachedJudge(model_judge, VerdictCache(cache_path or cache_dir() / "verdicts.sqlite"))
        else:
            raise JudgeSpecError(f"unknown judge spec {spec!r}; use `rules`, `local`, `local:MODEL`, `exemplar`, "
                                 "`exemplar:DIR`, `openai:URL`, `llamacpp[:FILE.gguf]` or a `+` combination such "
                                 "as `exemplar+local`")
    return RoutedJudge(model_judge, exemplar)


def http_judge(kind: str, arg: str, *, threshold: float = 0.5):
    """An HTTPJudge for `openai:URL?...` or `llamacpp[:FILE.gguf][?...]` (see the module docstring)."""
    from ..endpoint import ChatEndpoint, parse_endpoint_spec
    from .http import MODES, HTTPJudge

    label, server = None, None
    if kind == "llamacpp":
        from pathlib import Path

        from ..llama_server import LlamaServer

        model, _, query = arg.partition("?")
        server = LlamaServer(model or None).start()
        label = f"llamacpp:{Path(server.model_path).name}"
        arg = server.url + (f"?{query}" if query else "")
    try:
        config, extra = parse_endpoint_spec(arg)
    except ValueError as exc:
        raise JudgeSpecError(str(exc)) from None
    mode = extra.pop("mode", "logprob" if kind == "llamacpp" else "per_criterion")
    if extra:
        raise JudgeSpecError(f"unknown key(s) {sorted(extra)} in judge spec {kind}:{arg}; known: mode, "
                             f"{', '.join(k for k in type(config).model_fields if k != 'base_url')}")
    if mode not in MODES:
        raise JudgeSpecError(f"unknown mode {mode!r} in judge spec; use one of {', '.join(MODES)}")
    judge = HTTPJudge(ChatEndpoint(config), mode, label=label, threshold=threshold)
    judge.server = server  # keeps an in-process llama.cpp server alive as long as the judge
    return judge
