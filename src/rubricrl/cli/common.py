"""What every command shares: the consoles, error exits, progress bars, the `--rubric` loader, the
`--judge` builder, refusing outputs that clash with inputs, and the judge-error check."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from rubricrl.core.problems import RubricError
from rubricrl.rubrics.loading import load_rubric

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `message` (plain text: brackets such as `rubricrl[local]` are shown as they are) and exit."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def progress(label: str) -> Progress:
    """A progress bar on stderr: LABEL, bar, done/total, elapsed, remaining (`label` may be a rich
    format string such as "{task.description}")."""
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=err, transient=False)


def rubric_path(rubric: Path) -> Path:
    """The rubric file given, or the bundled rubric of that name (empathy, crisis_safety) if no such file exists."""
    from rubricrl.rubrics.loading import bundled_rubric_path

    bundled = bundled_rubric_path(str(rubric))
    return bundled if not rubric.exists() and bundled.is_file() else rubric


def load_rubric_option(rubric: Path):
    """The `--rubric` option loaded (file or bundled name), or a clean exit listing every problem."""
    try:
        return load_rubric(rubric_path(rubric))
    except RubricError as exc:
        fail(f"--rubric is not valid:\n{exc}")


def refuse_clash(outputs, inputs) -> None:
    """Exit (code 2, nothing written) when an output path is one of the inputs or another output, however
    spelt (relative, symlink, hard link): `outputs`/`inputs` are (option name, path or None) pairs."""
    from rubricrl.core.paths import clash

    problem = clash(outputs, inputs)
    if problem:
        fail(problem)


def judge_or_fail(spec: str, **options):
    """`make_judge(spec, **options)`, or a clean exit naming the spec and what is wrong with it."""
    from rubricrl.core.extras import MissingExtraError
    from rubricrl.judges import JudgeSpecError, make_judge  # looked up per call: tests replace make_judge
    from rubricrl.llm.models import ModelNotFoundError

    try:
        return make_judge(spec, **options)
    except (JudgeSpecError, ModelNotFoundError, MissingExtraError, OSError, RuntimeError) as exc:
        fail(f"--judge {spec}: {exc}")


def check_judge_errors(coverage, reasons: dict[str, int], max_error_rate: float, remedy: str) -> None:
    """Warn when the score rests on part of the model-judged verdicts; exit with code 1 when their
    error rate is above `max_error_rate` (the results are written by then)."""
    if coverage.verdicts and coverage.partial:
        why = ", ".join(f"{k} x{v}" for k, v in reasons.items())
        parts = ([f"{coverage.errors} judge errors" + (f" ({why})" if why else "")] if coverage.errors else []) + (
            [f"{coverage.skipped} skipped"] if coverage.skipped else [])
        err.print(f"[yellow]warning[/] the score rests on only {coverage.decided} of {coverage.verdicts} "
                  f"model-judged verdicts ({', '.join(parts)}); the criteria without a verdict are left out of each "
                  "row's score" + (", so it is the score of the rule criteria alone" if not coverage.decided else ""),
                  highlight=False)
    if coverage.exceeds(max_error_rate):
        fail(f"{coverage.errors} of {coverage.decided + coverage.errors} model-judged verdicts "
             f"({coverage.error_rate:.0%}) are judge errors, more than --max-error-rate {max_error_rate:g}, so the "
             f"score does not measure the rubric. The results are written; {remedy} (--max-error-rate 1 accepts any "
             "error rate)", code=1)


def score_scope(coverage) -> str:
    """What a headline score rests on, for its label: nothing when every model-judged verdict was decided."""
    if coverage.verdicts and not coverage.decided:
        return ": RULE CRITERIA ONLY"
    return ": PARTIAL" if coverage.partial else ""
