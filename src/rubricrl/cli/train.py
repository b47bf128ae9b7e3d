"""`rubricrl train`: GRPO training against rubric rewards (torch, transformers and trl load only here,
inside the command)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from rubricrl.cli.common import console, fail


def train(
    config: Annotated[Optional[Path], typer.Argument(help="YAML config; without one, the embedded CPU demo runs.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a config key: --set grpo.beta=0.04")] = None,
    resume: Annotated[Optional[Path], typer.Option(help="Continue the run in this directory from its last checkpoint.")] = None,
):
    """Train a policy with GRPO (TRL) against rubric rewards, evaluate before/after, write a report."""
    from rubricrl.core.extras import MissingExtraError
    from rubricrl.core.problems import RubricError
    from rubricrl.train.config import ConfigError, load_config, require_training
    from rubricrl.train.run import RunDirError, resume_config, run_training

    try:
        require_training()
    except MissingExtraError as exc:
        fail(str(exc))

    try:
        if resume is not None:
            if config is not None or set_:
                fail("--resume continues a run with its saved config.yaml; do not pass a config or --set")
            cfg = resume_config(resume)
        else:
            cfg = load_config(config, set_ or [])
    except (ConfigError, RunDirError) as exc:
        fail(str(exc))
    try:
        summary = run_training(cfg, resume=resume is not None, log=lambda m: console.print(m, highlight=False))
    except (RunDirError, RubricError, FileNotFoundError) as exc:
        fail(str(exc))
    from rubricrl.reports.training import write_report

    summary["report"] = str(write_report(Path(summary["run_dir"])))
    table = Table(title="held-out score (evaluation judge)")
    for col in ("", "mean", "95% CI", "n", "judge errors"):
        table.add_column(col)
    for label in ("before", "after"):
        part = summary.get(label) or {}
        e = part.get("estimate")
        if e:
            table.add_row(label, f"{e['mean']:.3f}", f"[{e['ci_low']:.3f}, {e['ci_high']:.3f}]", str(e["n"]),
                          str(part["errors"]))
    console.print(table)
    change = summary.get("change")
    if change:
        d = change["difference"]
        verdict = "the 95% CI excludes 0" if change["excludes_zero"] else "the 95% CI includes 0: no measurable change"
        console.print(f"after - before (paired over {change['n']} held-out prompts): {d['mean']:+.3f} "
                      f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]; {verdict}", highlight=False)
        b, a = change["before"], change["after"]
        if b["hard_rule_pass_rate"] is not None:
            console.print(f"hard rules passed: {b['hard_rule_pass_rate']:.0%} -> {a['hard_rule_pass_rate']:.0%}; "
                          f"replies stopped by the quality gate: {b['gated_share']:.0%} -> {a['gated_share']:.0%}",
                          highlight=False)
    console.print(f"{summary['steps']} steps in {summary['seconds']} s; report: {summary['report']}", highlight=False)
