"""Judges: rules, a local transformers model, a cache, and the router that combines them.

`make_judge(spec)` builds the judge a CLI `--judge` names; each kind below is a factory registered
under its name (judges/registry.py, `registered_kinds()`). Declarative checks always go to the
rule judge; the spec names what decides the other criteria, joined with `+`:
- `rules`: nothing else; model-judged criteria are `skipped`;
- `local` or `local:MODEL`: a local yes/no LLM judge (MODEL: hub id, directory or .gguf;
  default: the embedded SmolLM2-135M-Instruct), with the SQLite verdict cache;
- `exemplar` or `exemplar:DIR`: exemplar classifiers (default: the bundled ones) for the
  criteria they were fitted on; e.g. `exemplar+local` sends the rest to the local LLM judge;
- `openai:URL[?key=value&...]`: an OpenAI-compatible endpoint (vLLM, llama.cpp, Ollama, a hosted
  API); keys: `mode` (per_criterion | batched | logprob | implicit), `order` (auto | chain | spread,
  judges/http.py) and any EndpointConfig field,
  e.g. `openai:http://127.0.0.1:8000/v1?model=Qwen/Qwen2.5-7B-Instruct&mode=batched&concurrency=32`;
- `llamacpp[:FILE.gguf][?key=value&...]`: starts a llama.cpp server on loopback in this process
  (default: the embedded model) and judges through it; default mode `logprob`.
- `critic:SETTINGS:CRITIC>VERIFIER`: a cheap critic (e.g. `exemplar`) ranks the criteria by how likely
  each is failed and an expensive verifier judge (e.g. `local`, `openai:URL`) checks only the top `k=N`
  (or those with p_fail >= `p=X`, or min(p_fail, 1 - p_fail) >= `u=X`); the rest keep the critic's
  estimate, marked unverified (`unverified=hard`: its likelier outcome); `budget=group` pools k per reply
  over the replies to one prompt; `online=N` refits the critic from the verifier's outcomes
  (judges/critic.py), e.g. `critic:k=2:exemplar>local`;
- `gate` or `gate:DIR` (optional part, e.g. `gate+exemplar+local`, the default reward judge): the
  quality gate (judges/gate.py): replies it finds incoherent or deflecting get their positive-weight
  model-judged criteria `unmet` before any exemplar or model judge sees them;
- `defences:SETTINGS` (optional part, e.g. `exemplar+local+defences:off`): the defences against
  trivial and verdict-like responses (judges/defences.py; on by default).

Ensembles come first and split on `|`: `vote:SPEC1|SPEC2|...` (majority of met; a tie is unmet)
and `mean:SPEC1|SPEC2|...` (mean p_met, met at >= 0.5); each member is `make_judge(SPEC)`, and a
criterion is decided only when more than half of the members decided it (judges/ensemble.py).
`calibration=FILE` (from `rubricrl judge calibrate`) wraps the model judge (or the ensemble) in a
`CalibratedJudge` that re-decides met/unmet from p_met at the fitted thresholds.
"""

from __future__ import annotations

from pathlib import Path

from rubricrl.judges.base import Judge, JudgeReport, JudgeRequest, JudgeStats
from rubricrl.judges.cache import CachedJudge, VerdictCache
from rubricrl.judges.defences import Defences, DefenceStats
from rubricrl.judges.registry import (BuildOptions, JudgeSpecError, http_judge, lookup, register, registered_kinds,
                                      split_part, unknown_spec)
from rubricrl.judges.routing import RoutedJudge
from rubricrl.judges.rules import RuleJudge

__all__ = ["Judge", "JudgeReport", "JudgeRequest", "JudgeStats", "CachedJudge", "VerdictCache", "RoutedJudge",
           "RuleJudge", "make_judge", "JudgeSpecError", "Defences", "DefenceStats", "register", "registered_kinds",
           "http_judge"]


def make_judge(spec: str = "local", *, cache: bool = True, cache_path: str | Path | None = None,
               threshold: float = 0.5, calibration: str | Path | None = None,
               defences: Defences | None = None) -> RoutedJudge:
    """The judge a spec names, behind `defences` (default: `Defences()`, pre-checks and neutralisation
    on; `Defences.off()` or a `+defences:off` / `+defences:precheck=off,evidence=on` spec part changes them).
    Each kind is built by its factory in the registry (judges/registry.py)."""
    options = BuildOptions(cache=cache, cache_path=cache_path, threshold=threshold)
    kind, sep, rest = spec.strip().partition(":")
    entry = lookup(kind)
    if sep and entry is not None and entry.role == "ensemble":  # first: the members may hold `+` and `:`
        members = [m.strip() for m in rest.split("|")]
        if len(members) < 2 or not all(members):
            raise JudgeSpecError(f"judge spec {spec!r}: an ensemble needs two or more member specs separated by "
                                 f"`|`, e.g. `{kind}:local|exemplar+local`")
        ensemble = entry.build(kind, [make_judge(m, cache=cache, cache_path=cache_path, threshold=threshold,
                                                 defences=defences) for m in members])
        return RoutedJudge(_calibrated(ensemble, calibration) if calibration is not None else ensemble,
                           defences=defences)
    model_judge: Judge | None = None
    exemplar = gate = None
    for part in spec.split("+"):
        kind, arg = split_part(part)  # `llamacpp?mode=...`: options without a model
        entry = lookup(kind)
        role = entry.role if entry is not None else None
        if role == "defences":  # `+defences:off`, `+defences:precheck=off,evidence=on` (judges/defences.py)
            try:
                defences = entry.build(arg, defences)
            except JudgeSpecError:
                raise
            except ValueError as exc:
                raise JudgeSpecError(f"judge spec {spec!r}: {exc}") from None
        elif role == "rules" and not arg:
            continue
        elif role == "model" and model_judge is None:
            model_judge = entry.build(arg, options)
        elif role == "exemplar" and exemplar is None:
            exemplar = entry.build(arg, options)
        elif role == "gate" and gate is None:
            gate = entry.build(arg, options)
        else:  # an unknown kind, a second model or exemplar judge, `rules:ARG`, or an ensemble without members
            raise unknown_spec(spec)
    if calibration is not None:
        if model_judge is None:
            raise JudgeSpecError(f"a calibration re-decides a model judge's p_met, but judge spec {spec!r} has no "
                                 "model judge; add one (e.g. `+local`) or drop the calibration")
        model_judge = _calibrated(model_judge, calibration)
    return RoutedJudge(model_judge, exemplar, defences, gate)


def _calibrated(judge: Judge, path: str | Path) -> Judge:
    """`judge` wrapped in a CalibratedJudge loaded from `path` (warns when fitted for another judge)."""
    import warnings

    from rubricrl.judges.calibration import CalibratedJudge, Calibration, CalibrationError

    try:
        calibration = Calibration.load(path)
    except CalibrationError as exc:
        raise JudgeSpecError(f"calibration {exc}") from None
    if calibration.judge_id != judge.judge_id:
        warnings.warn(f"calibration {path} was fitted for judge {calibration.judge_id!r} and is applied to "
                      f"{judge.judge_id!r}; its thresholds may not fit", stacklevel=3)
    return CalibratedJudge(judge, calibration)
