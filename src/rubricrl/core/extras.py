"""Optional dependencies: which extra of `pip install rubricrl[...]` brings a heavy library, and the
error that says so.

`pip install rubricrl` is the light core (rubrics, rule and HTTP judges, scoring, `rubricrl score`,
`serve` and `compare`, the verl and OpenRLHF integrations), so it goes into a trainer's environment without touching
its torch, transformers or vLLM. Everything that needs a heavy library calls `require(...)` before
importing it; a missing library is a `MissingExtraError` naming the feature and the command to run:

    rubricrl's exemplar judge needs the 'local' extra: pip install 'rubricrl[local]' (missing: sentence_transformers)

The check looks modules up without importing them (`importlib.util.find_spec`), so it costs nothing
when the library is there. pyproject.toml's `[project.optional-dependencies]` is the source of truth
for what each extra installs; `EXTRAS` says what each one is for.
"""

from __future__ import annotations

import importlib.util

EXTRAS = {
    "local": "models in this process: the local transformers judge, the exemplar judge and quality gate "
             "(sentence-transformers + MiniLM), fitting judges and tactic classifiers (scikit-learn)",
    "llamacpp": "the in-process llama.cpp server (`llamacpp` judge specs, `rubricrl llama-server`)",
    "reports": "the figures of the HTML reports (matplotlib): `rubricrl eval`, `report`, `simulate`, `judge agree`",
    "train": "`rubricrl train` (TRL GRPO, peft, datasets, accelerate; includes 'local' and 'reports')",
    "all": "every extra above",
}


class MissingExtraError(ImportError):
    """A feature was asked for whose libraries are not installed; the message names the extra and the
    `pip install` that brings them. `extra` and `missing` (module names) are kept for callers."""

    def __init__(self, feature: str, extra: str, missing: list[str]):
        self.feature, self.extra, self.missing = feature, extra, list(missing)
        super().__init__(f"rubricrl's {feature} needs the '{extra}' extra: {install_command(extra)} "
                         f"(missing: {', '.join(self.missing)})", name=self.missing[0] if self.missing else None)


def install_command(extra: str) -> str:
    """The command that installs `extra`, quoted for a POSIX shell (brackets are glob characters)."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    return f"pip install 'rubricrl[{extra}]'"


def available(module: str) -> bool:
    """Whether top-level `module` can be imported, without importing it (a module set to None in
    `sys.modules`, as Python's import system reads it, is not available)."""
    try:
        return importlib.util.find_spec(module.partition(".")[0]) is not None
    except (ImportError, ValueError):  # a broken parent, or a module with no __spec__
        return False


def require(*modules: str, extra: str, feature: str) -> None:
    """Raise `MissingExtraError` unless every one of `modules` (top-level names, as imported:
    `sentence_transformers`, not `sentence-transformers`) is importable. `feature` completes
    "rubricrl's ... needs", e.g. "exemplar judge"."""
    install_command(extra)  # an unknown extra is a bug in the caller, refused even when nothing is missing
    missing = [m for m in modules if not available(m)]
    if missing:
        raise MissingExtraError(feature, extra, missing)
