"""`rubricrl rubrics`: lint rubric files, generate rubrics with a chat model, refine a rubric."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rubricrl.cli.common import console, err, fail, progress, refuse_clash, rubric_path
from rubricrl.cli.options import DEFAULT_JUDGE, judge_option
from rubricrl.core.problems import RubricError
from rubricrl.rubrics.loading import criterion_summary, load_rubric


def lint(files: Annotated[list[Path], typer.Argument(help="Rubric YAML/JSON files, or JSONL datasets with per-row rubrics.")]):
    """Validate rubrics; every problem is printed with file, line, field and the fix."""
    from rubricrl.rubrics.rows import InvalidRow, read_rows

    problems = 0
    for path in files:
        if not path.exists():
            err.print(f"{path}: file not found", highlight=False)
            problems += 1
            continue
        if path.suffix == ".jsonl":
            rows = bad = with_rubric = 0
            for row in read_rows(path):
                rows += 1
                if isinstance(row, InvalidRow):
                    bad += 1
                    err.print(str(row.problem), highlight=False, soft_wrap=True)
                elif row.rubric is not None:
                    with_rubric += 1
            problems += bad
            if not bad:
                console.print(f"[green]ok[/] {path}: {rows} rows, {with_rubric} with their own rubric")
            continue
        try:
            rubric = load_rubric(path)
        except RubricError as exc:
            problems += len(exc.problems)
            for problem in exc.problems:
                err.print(str(problem), highlight=False, soft_wrap=True)
            continue
        console.print(f"[green]ok[/] {path}: {len(rubric.criteria)} criteria, positive weight "
                      f"{rubric.positive_weight:g}, hash {rubric.content_hash()[:12]}", highlight=False)
        for c in rubric.criteria:
            console.print(f"  - {criterion_summary(c)}", highlight=False)
    if problems:
        fail(f"{problems} problem(s) found", code=1)


def rubrics_generate(
    data: Annotated[Path, typer.Option(help="JSONL rows: `prompt` (or `messages`) with an optional `reference`, or a "
                                            "preference pair `prompt`, `chosen`, `rejected`.")],
    out: Annotated[Path, typer.Option(help="Output JSONL of rows with their generated `rubric`; rows already in it are "
                                           "skipped (resume). Rows without a rubric go to OUT.errors.jsonl.")],
    generator: Annotated[str, typer.Option(help="Chat model that writes rubrics: `llamacpp[:FILE.gguf]` (default: the "
                                                "embedded model, JSON-constrained; a rubric is a long answer, so give "
                                                "HTTP models a long `timeout`), `local[:MODEL]`, "
                                                "`openai:URL?model=NAME`.")] = "llamacpp?timeout=600",
    judge: Annotated[str | None, judge_option("Judge of the consistency filter for pair rows (default: the "
                                              "generator's own model).")] = None,
    margin: Annotated[float, typer.Option(help="Keep a pair rubric only if score(chosen) - score(rejected) > MARGIN.")] = 0.0,
    retries: Annotated[int, typer.Option(min=0, help="Extra attempts, with the problems fed back, before a row is "
                                                     "reported as an error.")] = 2,
    max_tokens: Annotated[int, typer.Option(min=16, help="Tokens per generator answer.")] = 1024,
    concurrency: Annotated[int, typer.Option(min=1, help="Rows generated at once.")] = 4,
):
    """Generate a rubric per prompt (Rubrics-as-Rewards style) or per preference pair (contrastive, kept
    only if it prefers the chosen answer); every rubric is validated like a hand-written one."""
    from rubricrl.scoring.batch import count_lines
    from rubricrl.llm.chat import make_chat_model
    from rubricrl.judges import JudgeSpecError, make_judge
    from rubricrl.llm.models import ModelNotFoundError
    from rubricrl.authoring.generate import CATEGORY_WEIGHTS, default_judge_spec, errors_path_for, generate_file

    if not data.is_file():
        fail(f"--data {data}: file not found")
    refuse_clash([("--out", out), ("--out (its errors file)", errors_path_for(out))], [("--data", data)])
    try:
        model = make_chat_model(generator)
    except (ValueError, ModelNotFoundError, RuntimeError, OSError) as exc:
        fail(f"--generator {generator}: {exc}")
    judge_spec = judge or default_judge_spec(generator, model)
    try:
        with progress("generating") as bar:
            task = bar.add_task("rows", total=count_lines(data))
            s = generate_file(data, out, model, lambda: make_judge(judge_spec), margin=margin, retries=retries,
                              max_tokens=max_tokens, concurrency=concurrency, on_row=lambda: bar.advance(task))
    except (JudgeSpecError, ModelNotFoundError) as exc:
        fail(f"--judge {judge_spec}: {exc}")
    except ValueError as exc:
        fail(str(exc))
    table = Table(title=f"rubricrl rubrics generate ({model.name})", show_header=False)
    table.add_row("rows", f"{s.rows} ({s.skipped_existing} already in {out})")
    table.add_row("rubrics written", f"{s.written} (attempts used: "
                  + (", ".join(f"{k}: {v}" for k, v in sorted(s.attempts.items())) or "-") + ")")
    table.add_row("pair rubrics (consistency filter)", f"{s.kept} kept, {s.dropped} dropped "
                  f"(judge {judge_spec}, margin {margin:g})")
    table.add_row("generation errors", f"{s.errors} (after {retries + 1} attempt(s) each)")
    table.add_row("invalid input rows", str(s.invalid))
    table.add_row("weights", ", ".join(f"{k} {v:+g}" for k, v in CATEGORY_WEIGHTS.items()))
    console.print(table)
    if s.reasons:
        err.print("[yellow]rows without a rubric[/]: " + ", ".join(f"{k} x{v}" for k, v in s.reasons.most_common())
                  + f"; reasons per row in {s.errors_path}", highlight=False)
    console.print(f"wrote {s.written} rubric rows to {out}", highlight=False)


def rubrics_refine(
    rubric: Annotated[Path, typer.Argument(help="Rubric file (or bundled name) to refine.")],
    out: Annotated[Path, typer.Option(help="Where to write the refined rubric (YAML; JSON for a .json path).")],
    responses: Annotated[Path | None, typer.Option(help="JSONL of prompt/response rows whose verdicts show which "
                                                        "criteria are correlated (enables re-weighting).")] = None,
    judge: Annotated[str, judge_option("Judge for --responses (as in `rubricrl score`).")] = DEFAULT_JUDGE,
    dup_threshold: Annotated[float, typer.Option(min=0.0, max=1.0, help="Cosine similarity (MiniLM) at or above "
                                                                        "which two criteria may be duplicates.")] = 0.9,
    corr_threshold: Annotated[float, typer.Option(min=0.0, max=1.0, help="Verdict correlation at or above which "
                                                                         "criteria are re-weighted as one.")] = 0.8,
    splitter: Annotated[str | None, typer.Option(help="Chat model that also splits compound criteria the rule "
                                                      "leaves alone (local[:MODEL], llamacpp, openai:URL).")] = None,
    confirm: Annotated[str | None, typer.Option(help="Chat model that confirms near-duplicates (default: the "
                                                     "--splitter model; none: embeddings alone).")] = None,
):
    """Split compound criteria, drop near-duplicates, re-weight correlated criteria; print the diff."""
    import asyncio

    from rubricrl.llm.chat import make_chat_model
    from rubricrl.judges import JudgeSpecError, make_judge
    from rubricrl.llm.models import ModelNotFoundError
    from rubricrl.rubrics.rows import InvalidRow, read_rows
    from rubricrl.authoring.refine import refine_rubric, write_rubric

    path = rubric_path(rubric)
    refuse_clash([("--out", out)], [("RUBRIC", path), ("--responses", responses)])
    try:
        original = load_rubric(path)
    except RubricError as exc:
        fail(f"{rubric} is not a valid rubric:\n{exc}")
    rows = []
    if responses is not None:
        if not responses.is_file():
            fail(f"--responses {responses}: file not found")
        for row in read_rows(responses):
            if isinstance(row, InvalidRow):
                err.print(f"[yellow]skipped row[/] {row.problem}", highlight=False)
            else:
                rows.append(row)
    try:
        split_model = make_chat_model(splitter) if splitter else None
        confirm_model = make_chat_model(confirm) if confirm else split_model
        the_judge = make_judge(judge) if rows else None
    except (JudgeSpecError, ModelNotFoundError, ValueError, RuntimeError, OSError) as exc:
        fail(str(exc))
    result = asyncio.run(refine_rubric(original, splitter=split_model, confirm=confirm_model, judge=the_judge,
                                       responses=rows, dup_threshold=dup_threshold, corr_threshold=corr_threshold))
    write_rubric(result.rubric, out)
    try:
        load_rubric(out)
    except RubricError as exc:  # pragma: no cover - refine_rubric validates before returning
        fail(f"the refined rubric in {out} does not load:\n{exc}")
    table = Table(title=f"rubricrl rubrics refine: {path}")
    for col in ("criterion", "weight before -> after", "action"):
        table.add_column(col)
    for c in result.changes:
        weights = f"{'-' if c.before is None else f'{c.before:g}'} -> {'-' if c.after is None else f'{c.after:g}'}"
        table.add_row(c.id, weights, c.action)
    console.print(table)
    for note in result.notes:
        err.print(f"[yellow]note[/] {note}", highlight=False)
    console.print(f"wrote {out}: {len(result.rubric.criteria)} criteria (was {len(original.criteria)}), positive "
                  f"weight {result.rubric.positive_weight:g} (was {original.positive_weight:g})", highlight=False)

