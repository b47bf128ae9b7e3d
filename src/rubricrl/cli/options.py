"""Options that several commands take, declared once as `Annotated` aliases; a command gives the
default on its own parameter (`no_cache: NoCache = False`), as typer wants with `Annotated`.

Where the meaning is the same but each command explains it in its own words (`--judge`, `--rubric`,
`--calibration`), the `*_option(help)` helpers fix the flag and leave the help to the command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

DEFAULT_JUDGE = "gate+exemplar+local"
JUDGE_SPECS = ("`rules`, `local[:MODEL]`, `exemplar[:DIR]`, `openai:URL?mode=...`, `llamacpp[:FILE.gguf]`, or a `+` "
               "mix (default: bundled exemplar models, then the embedded LLM).")

NoCache = Annotated[bool, typer.Option("--no-cache", help="Bypass the SQLite verdict cache.")]
CachePath = Annotated[Optional[Path], typer.Option("--cache-path", help="Verdict cache file (default: user cache dir).")]
Threshold = Annotated[float, typer.Option("--threshold", help="P(yes) at or above which a model verdict is `met`.")]
MaxErrorRate = Annotated[float, typer.Option(
    "--max-error-rate", min=0.0, max=1.0, help="Exit with code 1 when more than this share of the model-judged "
                                               "verdicts are judge errors (errors / (decided + errors)); 1 never fails.")]
LabelBatchSize = Annotated[int, typer.Option("--batch-size", min=1,
                                             help="Requests judged together (shared-prefix batching).")]
Port = Annotated[int, typer.Option("--port", help="Port to listen on.")]


def judge_option(help: str) -> Any:
    """`--judge SPEC`: a judge spec as `rubricrl.judges.make_judge` reads it (JUDGE_SPECS)."""
    return typer.Option("--judge", help=help)


def rubric_option(help: str) -> Any:
    """`--rubric`: a rubric file, or the name of a bundled rubric (`common.rubric_path`)."""
    return typer.Option("--rubric", help=help)


def calibration_option(help: str) -> Any:
    """`--calibration FILE`: thresholds written by `rubricrl judge calibrate`."""
    return typer.Option("--calibration", help=help)
