"""The `rubricrl` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from rubricrl.core.jsonl import escape_line_separators, write_jsonl
from rubricrl.core.problems import RubricError
from rubricrl.rubrics.loading import criterion_summary, load_rubric
from rubricrl.scoring.summary import DEFAULT_MAX_ERROR_RATE, RunSummary

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Rubric rewards for RL of language models: lint rubrics, judge, score.")
rubrics_app = typer.Typer(no_args_is_help=True, help="Check rubric files.")
app.add_typer(rubrics_app, name="rubrics")
judge_app = typer.Typer(no_args_is_help=True, help="Fit and inspect judges.")
app.add_typer(judge_app, name="judge")
tactics_app = typer.Typer(no_args_is_help=True, help="Tactic labels, stickiness and classifiers.")
app.add_typer(tactics_app, name="tactics")
console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


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


def judge_or_fail(spec: str, **options):
    """`make_judge(spec, **options)`, or a clean exit naming the spec and what is wrong with it."""
    from rubricrl.judges import JudgeSpecError, make_judge
    from rubricrl.llm.models import ModelNotFoundError

    try:
        return make_judge(spec, **options)
    except (JudgeSpecError, ModelNotFoundError, OSError, RuntimeError) as exc:
        fail(f"--judge {spec}: {exc}")


@rubrics_app.command("lint")
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


@rubrics_app.command("generate")
def rubrics_generate(
    data: Annotated[Path, typer.Option(help="JSONL rows: `prompt` (or `messages`) with an optional `reference`, or a "
                                            "preference pair `prompt`, `chosen`, `rejected`.")],
    out: Annotated[Path, typer.Option(help="Output JSONL of rows with their generated `rubric`; rows already in it are "
                                           "skipped (resume). Rows without a rubric go to OUT.errors.jsonl.")],
    generator: Annotated[str, typer.Option(help="Chat model that writes rubrics: `llamacpp[:FILE.gguf]` (default: the "
                                                "embedded model, JSON-constrained; a rubric is a long answer, so give "
                                                "HTTP models a long `timeout`), `local[:MODEL]`, "
                                                "`openai:URL?model=NAME`.")] = "llamacpp?timeout=600",
    judge: Annotated[str | None, typer.Option(help="Judge of the consistency filter for pair rows (default: the "
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
    columns = (TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    try:
        with Progress(*columns, console=err, transient=False) as progress:
            task = progress.add_task("rows", total=count_lines(data))
            s = generate_file(data, out, model, lambda: make_judge(judge_spec), margin=margin, retries=retries,
                              max_tokens=max_tokens, concurrency=concurrency, on_row=lambda: progress.advance(task))
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


@rubrics_app.command("refine")
def rubrics_refine(
    rubric: Annotated[Path, typer.Argument(help="Rubric file (or bundled name) to refine.")],
    out: Annotated[Path, typer.Option(help="Where to write the refined rubric (YAML; JSON for a .json path).")],
    responses: Annotated[Path | None, typer.Option(help="JSONL of prompt/response rows whose verdicts show which "
                                                        "criteria are correlated (enables re-weighting).")] = None,
    judge: Annotated[str, typer.Option(help="Judge for --responses (as in `rubricrl score`).")] = "exemplar+local",
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


@app.command()
def score(
    data: Annotated[Path, typer.Option(help="JSONL rows: prompt (or messages), response, optional rubric.")],
    out: Annotated[Path, typer.Option(help="Output JSONL; rows already in it are skipped (resume). The settings "
                                           "its verdicts were judged with go to OUT_STEM.settings.json; a re-run "
                                           "with other settings is refused (see --rejudge).")],
    rubric: Annotated[Optional[Path], typer.Option(help="Rubric file or bundled name (empathy, crisis_safety) "
                                                        "for rows without their own rubric.")] = None,
    judge: Annotated[str, typer.Option(help="`rules`, `local[:MODEL]`, `exemplar[:DIR]`, `openai:URL?mode=...`, "
                                            "`llamacpp[:FILE.gguf]`, or a `+` mix (default: bundled exemplar "
                                            "models, then the embedded LLM).")] = "exemplar+local",
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Bypass the SQLite verdict cache.")] = False,
    cache_path: Annotated[Optional[Path], typer.Option(help="Verdict cache file (default: user cache dir).")] = None,
    threshold: Annotated[float, typer.Option(help="P(yes) at or above which a model verdict is `met`.")] = 0.5,
    calibration: Annotated[Path | None, typer.Option(help="Calibration file from `rubricrl judge calibrate`: "
                                                            "re-decides model verdicts from p_met.")] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Rows judged together (shared-prefix batching).")] = 16,
    summary_json: Annotated[Optional[Path], typer.Option(help="Where to write the summary (default: OUT with .summary.json).")] = None,
    rejudge: Annotated[bool, typer.Option("--rejudge", help="Re-judge every row (e.g. with another --judge or "
                                                            "--rubric than OUT was scored with); the old results are "
                                                            "kept as OUT_STEM.<UTC time>.jsonl.")] = False,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="Re-judge only the rows of OUT that have judge "
                                                                      "errors (same settings); each new result "
                                                                      "replaces the old one.")] = False,
    max_error_rate: Annotated[float, typer.Option(min=0.0, max=1.0, help="Exit with code 1 when more than this share "
                                                                        "of the model-judged verdicts are judge errors "
                                                                        "(errors / (decided + errors)); 1 never "
                                                                        "fails.")] = DEFAULT_MAX_ERROR_RATE,
):
    """Judge every row against its rubric and write verdicts, scores and a summary.

    Exit code 0: done; 1: done, but more than --max-error-rate of the model-judged verdicts are judge
    errors; 2: refused (bad input, or OUT scored with other settings), nothing written."""
    from rubricrl.scoring.batch import count_lines, read_results, score_rows
    from rubricrl.rubrics.rows import ScoringRow, read_rows
    from rubricrl.scoring.runs import (begin, default_summary_path, finish, has_errors, make_settings, plan_score, retry_path,
                             sidecar_paths)
    from rubricrl.scoring.summary import summarize

    if not data.is_file():
        fail(f"--data {data}: file not found")
    if out.is_dir():
        fail(f"--out {out} is a directory; give the path of a JSONL file")
    target = summary_json or default_summary_path(out)
    refuse_clash([("--out", out), ("--summary-json", target), *sidecar_paths(out), ("--cache-path", cache_path)],
                 [("--data", data), ("--rubric", rubric_path(rubric) if rubric is not None else None),
                  ("--calibration", calibration)])
    shared = load_rubric_option(rubric) if rubric is not None else None
    settings = make_settings(judge, shared, rubric_path(rubric) if rubric is not None else None, threshold,
                             calibration)
    try:
        plan = plan_score(data, out, settings, shared, rejudge=rejudge, retry_errors=retry_errors)
    except ValueError as exc:
        fail(str(exc))
    for note in plan.notes:
        err.print(f"[yellow]note[/] {note}", highlight=False)
    the_judge = judge_or_fail(judge, cache=not no_cache, cache_path=cache_path, threshold=threshold,
                              calibration=calibration)
    columns = (TextColumn("scoring"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    try:
        archived = begin(plan, out)
        if plan.mode == "retry_errors":  # new results go to the retry file, merged into OUT by finish()
            rows, sink = [r for r in read_rows(data) if isinstance(r, ScoringRow) and r.id in plan.retry_ids], \
                retry_path(out)
            total = len(rows)
        else:
            rows, sink, total = read_rows(data), out, count_lines(data)
        with Progress(*columns, console=err, transient=False) as progress:
            task = progress.add_task("rows", total=total)
            result = score_rows(rows, sink, the_judge, shared, batch_size=batch_size,
                                on_rows=lambda n: progress.advance(task, n))
        finish(plan, out)
    except ValueError as exc:
        fail(str(exc))
    records = read_results(out)
    summary = summarize(records)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(summary.to_dict(), indent=2), encoding="utf-8")
    print_summary(summary)
    exemplar = getattr(the_judge, "exemplar_judge", None)
    if exemplar is not None:
        console.print(f"judge {exemplar.judge_id}: {exemplar.stats.verdicts} verdicts", highlight=False)
    model = getattr(the_judge, "model_judge", None)
    if model is not None:
        hits = getattr(model, "hits", None)
        console.print(f"judge {model.judge_id}: {model.stats.model_calls} model calls, {model.stats.tokens} tokens"
                      + (f", cache hits {hits}, misses {model.misses}" if hits is not None else ""), highlight=False)
    endpoint, inner = None, model  # through wrappers (calibration, cache) to an HTTP judge's endpoint
    while inner is not None and endpoint is None:
        endpoint, inner = getattr(inner, "endpoint", None), getattr(inner, "inner", None)
    if endpoint is not None:
        e = endpoint.stats
        console.print(f"endpoint {endpoint.config.base_url}: {e.calls} calls, {e.retries} retries, "
                      f"{e.prompt_tokens}+{e.completion_tokens} tokens, cost {e.cost:.4f}"
                      + (f", failures {e.errors}" if e.errors else ""), highlight=False)
    guard = getattr(the_judge, "defence_stats", None)  # judges/defences.py
    if guard is not None:
        console.print(f"defences ({the_judge.defences.describe()}): {guard.prechecked} responses pre-checked, "
                      f"{guard.neutralised} neutralised, {guard.downgraded} verdicts downgraded", highlight=False)
    if archived:
        console.print(f"kept the previous results as {', '.join(archived)}", highlight=False)
    if plan.mode == "retry_errors":
        still = sum(1 for r in records if r["id"] in plan.retry_ids and has_errors(r))
        missing = len(plan.retry_ids) - total
        console.print(f"re-judged {result.written} row(s) with judge errors ({still} still have errors"
                      + (f"; {missing} are not in --data and were kept" if missing else "") + f") in {out}; "
                      f"summary in {target}", highlight=False)
    else:
        console.print(f"wrote {result.written} rows to {out} (skipped {result.skipped_existing} already there); "
                      f"summary in {target}", highlight=False)
    if plan.kept_errors:
        err.print(f"[yellow]note[/] {plan.kept_errors} row(s) already in {out} have judge errors from an earlier run "
                  "and were kept as they are; re-judge them with --retry-errors", highlight=False)
    check_judge_errors(summary.model_judged, summary.error_reasons, max_error_rate,
                       "fix the judge, then re-judge the rows with errors: the same command with --retry-errors")


@judge_app.command("fit")
def judge_fit(
    rubric: Annotated[Path, typer.Option(help="Rubric file (bundled name or path); criteria may carry `examples`.")],
    out: Annotated[Path, typer.Option(help="Directory for the fitted exemplar judge.")],
    labels: Annotated[Optional[Path], typer.Option(help="JSONL of {criterion_id, response, label, rubric?}.")] = None,
    min_examples: Annotated[int, typer.Option(min=2, help="Examples needed of each class to fit a criterion.")] = 8,
    folds: Annotated[int, typer.Option(min=2, help="Cross-validation folds.")] = 5,
):
    """Fit one calibrated classifier per model-judged criterion on sentence embeddings of examples."""
    from rubricrl.judge_tools.fit import collect_examples, fit_exemplars
    from rubricrl.judges.exemplar import MANIFEST

    path = rubric_path(rubric)
    refuse_clash([("--out", out), (f"--out (its {MANIFEST})", out / MANIFEST)],
                 [("--rubric", path), ("--labels", labels)])
    try:
        the_rubric = load_rubric(path)
        examples, warnings = collect_examples(the_rubric, labels, rubric_name=path.stem)
    except RubricError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot read: {exc}")
    reports = fit_exemplars(the_rubric, examples, out, min_per_class=min_examples, folds=folds)
    table = Table(title=f"exemplar judge fit ({folds}-fold cross-validation)")
    for col in ("criterion", "met", "unmet", "status", "CV AUC", "balanced acc", "threshold"):
        table.add_column(col)
    for r in reports:
        table.add_row(r.criterion_id, str(r.n_met), str(r.n_unmet), r.status,
                      f"{r.auc:.3f}" if r.auc is not None else "-",
                      f"{r.balanced_accuracy:.3f}" if r.balanced_accuracy is not None else "-",
                      f"{r.threshold:.2f}" if r.threshold is not None else "-")
    console.print(table)
    for note in warnings + [f"{r.criterion_id}: {w}" for r in reports for w in r.warnings]:
        err.print(f"[yellow]warning[/] {note}", highlight=False)
    fitted = sum(r.status == "fitted" for r in reports)
    console.print(f"fitted {fitted} of {len(reports)} model-judged criteria into {out}; use it with "
                  f"--judge exemplar:{out}+local", highlight=False)


def _judged_labels(labels: Path, judge: str, *, no_cache: bool, cache_path: Path | None, threshold: float,
                   batch_size: int, calibration: Path | None = None):
    """Read a label file (bad lines reported, not fatal), build the judge, judge every label with a progress bar."""
    from rubricrl.judge_tools.agreement import judge_labels, read_labels

    if not labels.is_file():
        fail(f"--labels {labels}: file not found")
    try:
        items, problems = read_labels(labels)
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"--labels {labels}: cannot read: {exc}")
    for problem in problems:
        err.print(f"[yellow]skipped line[/] {problem}", highlight=False)
    if not items:
        fail(f"--labels {labels}: no usable label ({len(problems)} bad lines); see docs/agreement.md for the format")
    the_judge = judge_or_fail(judge, cache=not no_cache, cache_path=cache_path, threshold=threshold,
                              calibration=calibration)
    columns = (TextColumn("judging labels"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=err, transient=False) as progress:
        task = progress.add_task("labels", total=len(items))
        verdicts = judge_labels(the_judge, items, batch_size=batch_size, on_labels=lambda n: progress.advance(task, n))
    return the_judge, items, problems, verdicts


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


@judge_app.command("agree")
def judge_agree(
    labels: Annotated[Path, typer.Option(help="JSONL of human labels: {id?, prompt, response, criterion, label, "
                                               "tags?} (docs/agreement.md).")],
    judge: Annotated[str, typer.Option(help="Judge spec, as for `rubricrl score` (also `vote:A|B`, `mean:A|B`).")]
    = "exemplar+local",
    out: Annotated[Path | None, typer.Option(help="Directory for agreement.json, agreement.html and "
                                                     "verdicts.jsonl (default: LABELS_agreement/ beside the labels).")] = None,
    calibration: Annotated[Path | None, typer.Option(help="Measure the judge with this calibration applied.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Bypass the SQLite verdict cache.")] = False,
    cache_path: Annotated[Path | None, typer.Option(help="Verdict cache file (default: user cache dir).")] = None,
    threshold: Annotated[float, typer.Option(help="P(yes) at or above which a model verdict is `met`.")] = 0.5,
    batch_size: Annotated[int, typer.Option(min=1, help="Requests judged together (shared-prefix batching).")] = 16,
):
    """Measure a judge against human labels, per criterion, per tag and overall.

    Precision, recall and F1 of both classes, balanced F1, Cohen's kappa, AUC of p_met, and a reliability diagram."""
    from rubricrl.judge_tools.agreement import agreement, verdict_records
    from rubricrl.reports.agreement import write_report

    out_dir = out or labels.with_name(labels.stem + "_agreement")
    refuse_clash([("--out", out_dir)] + [(f"--out (its {name})", out_dir / name)
                                         for name in ("agreement.json", "agreement.html", "verdicts.jsonl")],
                 [("--labels", labels), ("--calibration", calibration), ("--cache-path", cache_path)])
    the_judge, items, problems, verdicts = _judged_labels(labels, judge, no_cache=no_cache, cache_path=cache_path,
                                                          threshold=threshold, batch_size=batch_size,
                                                          calibration=calibration)
    result = agreement(items, verdicts, judge_id=the_judge.judge_id, labels_file=str(labels), problems=problems)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "agreement.json").write_text(json.dumps(result, indent=1, ensure_ascii=False), encoding="utf-8")
    write_jsonl(out_dir / "verdicts.jsonl", verdict_records(items, verdicts))
    write_report(result, out_dir / "agreement.html")
    table = Table(title=f"agreement of {the_judge.judge_id} with {labels}")
    columns = ("", "labels", "errors", "skipped", "P met", "R met", "F1 met", "F1 unmet", "balanced F1", "kappa", "AUC")
    keys = ("n_labels", "n_errors", "n_skipped", "precision_met", "recall_met", "f1_met", "f1_unmet", "balanced_f1",
            "kappa", "auc")
    for col in columns:
        table.add_column(col, justify="left" if not col else "right", overflow="fold")
    rows = [("overall", result["overall"])] + [(m["text"][:70], m) for m in result["by_criterion"].values()]
    rows += [(f"tag {tag}", m) for tag, m in result["by_tag"].items()]
    for i, (name, m) in enumerate(rows):
        table.add_row(name, *(_fmt(m[k]) for k in keys), end_section=i == 0)
    console.print(table)
    console.print("balanced F1 = mean of the met-class F1 and the unmet-class F1; judge errors and skipped verdicts "
                  "are excluded from the metrics", highlight=False)
    if problems:
        err.print(f"[yellow]warning[/] {len(problems)} label lines were not used (listed above and in agreement.json)",
                  highlight=False)
    console.print(f"wrote {out_dir / 'agreement.json'}, {out_dir / 'agreement.html'}, {out_dir / 'verdicts.jsonl'}",
                  highlight=False)


@judge_app.command("calibrate")
def judge_calibrate(
    labels: Annotated[Path, typer.Option(help="JSONL of human labels (as for `judge agree`).")],
    out: Annotated[Path, typer.Option(help="Where to write calibration.json.")],
    judge: Annotated[str, typer.Option(help="Judge spec whose model judge (or ensemble) is calibrated.")]
    = "exemplar+local",
    by: Annotated[str, typer.Option(help="Thresholds per `criterion` (normalised text) or per `tag`.")] = "criterion",
    heldout: Annotated[float, typer.Option(min=0.0, max=0.9, help="Fraction of labels held out (stratified by "
                                                                  "criterion and label, seeded) to measure the gain.")] = 0.3,
    seed: Annotated[int, typer.Option(help="Seed of the held-out split.")] = 0,
    min_labels: Annotated[int, typer.Option(min=2, help="Fit labels a key needs (and 3 of each class) for its own "
                                                        "threshold; others use the global one.")] = 20,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Bypass the SQLite verdict cache.")] = False,
    cache_path: Annotated[Path | None, typer.Option(help="Verdict cache file (default: user cache dir).")] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Requests judged together (shared-prefix batching).")] = 16,
):
    """Fit per-criterion (or per-tag) thresholds on p_met that maximise balanced F1.

    Prints the held-out agreement before and after; use the file with `rubricrl score --calibration FILE`."""
    from rubricrl.judges.calibration import calibrate

    if by not in ("criterion", "tag"):
        fail(f"--by {by}: use `criterion` or `tag`")
    refuse_clash([("--out", out)], [("--labels", labels), ("--cache-path", cache_path)])
    the_judge, items, _, verdicts = _judged_labels(labels, judge, no_cache=no_cache, cache_path=cache_path,
                                                   threshold=0.5, batch_size=batch_size)
    model = the_judge.model_judge
    if model is None:
        fail(f"--judge {judge} has no model judge to calibrate (its verdicts come from rules or exemplar models, "
             "which have their own thresholds); use e.g. --judge local")
    outside = sum(v.decided and v.judge_id != model.judge_id for v in verdicts)
    if outside:
        err.print(f"note: {outside} labels were decided by rules or exemplar models, not by {model.judge_id}; they "
                  "are not used to fit", highlight=False)
    result = calibrate(items, verdicts, judge_id=model.judge_id, by=by, heldout=heldout, seed=seed,
                       min_labels=min_labels, calibratable=lambda v: v.judge_id == model.judge_id)
    result.save(out)
    table = Table(title=f"thresholds ({by}; fitted on {result.fitted_on} labels; global {result.default:.3f})")
    for col in (by, "fit n", "met", "threshold", "fit bal.F1", "held-out bal.F1 before -> after"):
        table.add_column(col, overflow="fold")
    held_keys = (result.heldout or {}).get("by_key", {})
    for key, info in result.keys.items():
        h = held_keys.get(key)
        table.add_row(info.name[:70], str(info.n), str(info.n_met),
                      f"{result.thresholds[key]:.3f}" if info.fitted else f"global ({result.default:.3f})",
                      _fmt(info.fit_balanced_f1),
                      f"{_fmt(h['balanced_f1_before'])} -> {_fmt(h['balanced_f1_after'])} (n={h['n']})" if h else "-")
    console.print(table)
    if result.heldout:
        before, after = result.heldout["before"], result.heldout["after"]
        held = Table(title=f"held-out agreement ({result.heldout['n']} labels, {before['n_errors']} judge errors)")
        for col in ("", "before", "after", "change"):
            held.add_column(col, justify="right")
        for key in ("balanced_f1", "f1_met", "f1_unmet", "precision_met", "recall_met", "kappa", "auc"):
            change = after[key] - before[key] if after[key] is not None and before[key] is not None else None
            held.add_row(key, _fmt(before[key]), _fmt(after[key]), "-" if change is None else f"{change:+.3f}")
        console.print(held)
    else:
        console.print("no held-out labels (--heldout 0): no before/after comparison", highlight=False)
    console.print(f"wrote {out}; use it with: rubricrl score ... --judge {judge} --calibration {out}", highlight=False)


@judge_app.command("audit")
def judge_audit(
    judge: Annotated[str, typer.Option(help="Judge spec to audit (as in `rubricrl score`).")],
    rubric: Annotated[Path | None, typer.Option(help="Rubric file or bundled name for every row (default: the "
                                                        "bundled prompts' own rubrics; a --data row's own wins).")] = None,
    data: Annotated[Path | None, typer.Option(help="JSONL rows: prompt (or messages), optional rubric, reference, "
                                                      "response (a good reply, for the first_sentence probe).")] = None,
    limit: Annotated[int, typer.Option(min=0, help="Rows to audit: a spread of N bundled prompts, or the first N "
                                                   "--data rows (0: all).")] = 8,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the full audit as JSON here.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Bypass the SQLite verdict cache.")] = False,
    cache_path: Annotated[Path | None, typer.Option(help="Verdict cache file (default: user cache dir).")] = None,
):
    """Probe a judge with responses that should meet no criterion (master keys, empty, fake verdicts,
    injections...) and print its false-positive rate without and with the defences (docs/judges.md)."""
    from rubricrl.judge_tools import probes
    from rubricrl.judges.defences import Defences

    refuse_clash([("--json", json_out)], [("--data", data), ("--rubric", rubric_path(rubric) if rubric else None),
                                          ("--cache-path", cache_path)])
    shared = load_rubric_option(rubric) if rubric is not None else None
    if data is not None:
        if not data.is_file():
            fail(f"--data {data}: file not found")
        items, problems = probes.file_items(data, limit, shared)
        for problem in problems:
            err.print(f"[yellow]skipped row[/] {problem}", highlight=False)
        if not items:
            fail(f"--data {data}: no usable row")
    else:
        items = probes.bundled_items(limit, shared)
    # one judge (one model load, one server) behind two sets of defences
    without = judge_or_fail(judge, cache=not no_cache, cache_path=cache_path, defences=Defences.off())
    with_ = without.with_defences(Defences())
    columns = (TextColumn("auditing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=False) as progress:
        task = progress.add_task("judge calls", total=2 * len(items))
        result = probes.run_audit(without, with_, items, on_step=lambda: progress.advance(task))

    def pct(tally) -> str:
        return "-" if tally.fpr is None else f"{tally.fpr:.1%}"

    lines = list(result.probes.values())
    skips = any(line.without.skipped or line.with_.skipped for line in lines)

    def mean_p(line) -> str:
        return "/".join("-" if t.mean_p is None else f"{t.mean_p:.2f}" for t in (line.without, line.with_))

    def row(line, *names) -> list[str]:
        return [*names, str(line.without.pairs), pct(line.without), pct(line.with_), mean_p(line),
                f"{line.without.errors}/{line.with_.errors}"] + (
                    [f"{line.without.skipped}/{line.with_.skipped}"] if skips else [])

    numbers = ("pairs", "FPR off", "FPR on", "p_met off/on", "errors") + (("skipped",) if skips else ())
    table = Table(title=f"judge audit: {result.judge_id}, {result.rows} prompts, {result.criteria} positive "
                        "model-judged criteria (off / on: without / with defences)")
    for col in ("probe", "family", *numbers):
        table.add_column(col, justify="left" if col in ("probe", "family") else "right",
                         overflow="fold" if col in ("probe", "family") else "ellipsis",
                         no_wrap=col not in ("probe", "family"))
    for line in lines:
        table.add_row(*row(line, line.name, line.family))
    console.print(table)
    table = Table(title="per family")
    for col in ("family", *numbers):
        table.add_column(col, justify="left" if col == "family" else "right", no_wrap=col != "family")
    for line in result.family_lines().values():
        table.add_row(*row(line, line.family))
    table.add_row(*row(result.aggregate(), f"overall (all but {', '.join(probes.EXCLUDED_FROM_OVERALL)})"),
                  style="bold")
    table.add_row(*row(result.aggregate(["master_key"], "master_key"), "master keys"), style="bold")
    console.print(table)
    keys = result.aggregate(["master_key"], "master_key")
    target = "" if keys.with_.fpr is None else (" (target <= 5%: " + ("met" if keys.with_.fpr <= 0.05 else "NOT met")
                                                 + ")")
    console.print(f"master-key FPR: {pct(keys.without)} without, {pct(keys.with_)} with defences{target}",
                  highlight=False)
    s = result.defence_stats
    console.print(f"defences ({result.defences}): {s.get('prechecked', 0)} responses pre-checked "
                  f"{s.get('precheck_reasons', {})}, {s.get('neutralised', 0)} neutralised "
                  f"{s.get('neutralised_kinds', {})}, {s.get('downgraded', 0)} verdicts downgraded", highlight=False)
    console.print("FPR = met / (met + unmet) over (probe, positive-weight model-judged criterion) pairs; errors and "
                  "skipped verdicts are excluded and counted; criteria with a declarative check are excluded (no "
                  "model decides them). p_met: the mean over the same pairs (what a soft reward pays).",
                  highlight=False)
    if result.criteria == 0:
        err.print(f"[yellow]note[/] --judge {judge} sends no positive criterion of these rubrics to a model judge, so "
                  "there is nothing to audit (FPR '-'); use e.g. --judge local or exemplar+local", highlight=False)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"spec": judge, **result.to_dict()}, indent=2, ensure_ascii=False),
                            encoding="utf-8")
        console.print(f"wrote {json_out}", highlight=False)


@tactics_app.command("classify")
def tactics_classify(
    in_: Annotated[Path, typer.Option("--in", help="Conversations JSONL: {id, messages: [{role, content}]}.")],
    out: Annotated[Path, typer.Option(help="Labeled conversations JSONL.")],
    classifier: Annotated[Optional[Path], typer.Option(help="Fitted classifier dir (default: bundled esconv8).")] = None,
    threshold: Annotated[float, typer.Option(help="Probability for a tactic to be assigned.")] = 0.5,
    judge: Annotated[Optional[str], typer.Option(help="Use a judge instead of the classifier, e.g. local:MODEL.")] = None,
    taxonomy: Annotated[str, typer.Option(help="Taxonomy for --judge (bundled name or YAML).")] = "esconv8",
):
    """Label every supporter (assistant) turn with its tactics and their probabilities."""
    from rubricrl.judges import make_judge
    from rubricrl.tactics.classifier import TacticClassifier
    from rubricrl.tactics.judge_classifier import JudgeTacticClassifier
    from rubricrl.tactics.labeling import label_conversations
    from rubricrl.tactics.taxonomy import load_taxonomy

    refuse_clash([("--out", out)], [("--in", in_), ("--taxonomy", Path(taxonomy) if judge is not None else None)])
    try:
        if judge is not None:
            model = JudgeTacticClassifier(load_taxonomy(taxonomy), make_judge(judge))
        else:
            model = TacticClassifier.load(classifier)
        n = label_conversations(in_, out, model, threshold)
    except (RubricError, FileNotFoundError, ValueError) as exc:  # JudgeSpecError is a ValueError
        fail(str(exc))
    console.print(f"labeled {n} conversations into {out} ({model.taxonomy or 'custom'} tactics)", highlight=False)


@tactics_app.command("stickiness")
def tactics_stickiness(in_: Annotated[Path, typer.Option("--in", help="Labeled conversations JSONL.")]):
    """P(a tactic recurs at the next supporter turn), per tactic and overall, and Jaccard overlap."""
    from rubricrl.tactics.labeling import file_stickiness

    try:
        s = file_stickiness(in_)
    except (RubricError, FileNotFoundError) as exc:
        fail(str(exc))
    if s.overall is None:
        fail("no pair of consecutive supporter turns in the file")
    console.print(f"stickiness {s.overall:.3f} over {s.pairs} consecutive supporter-turn pairs; "
                  f"mean Jaccard {s.jaccard:.3f}", highlight=False)
    table = Table(title="per tactic")
    for col in ("tactic", "stickiness", "share of turns"):
        table.add_column(col)
    for tactic, share in s.distribution.items():
        sticky = s.per_tactic.get(tactic)
        table.add_row(tactic, f"{sticky:.3f}" if sticky is not None else "-", f"{share:.1%}")
    console.print(table)
    console.print(json.dumps({"overall": s.overall, "jaccard": s.jaccard, "pairs": s.pairs,
                              "per_tactic": s.per_tactic, "distribution": s.distribution}), highlight=False)


@tactics_app.command("fit")
def tactics_fit(
    data: Annotated[str, typer.Option(help="Labeled JSONL {text, tactics|tactic, context?} or a taxonomy name/YAML.")],
    out: Annotated[Path, typer.Option(help="Directory for the fitted classifier.")],
    folds: Annotated[int, typer.Option(min=2)] = 5,
):
    """Fit the tactic classifier; report cross-validated accuracy, macro-F1 and the confusion matrix."""
    from rubricrl.tactics.classifier import TacticClassifier, cross_validate
    from rubricrl.tactics.labeling import fit_examples

    refuse_clash([("--out", out)] + [(f"--out (its {name})", out / name)
                                     for name in ("weights.npz", "classifier.json")], [("--data", Path(data))])
    try:
        examples, names, taxonomy = fit_examples(data)
        report = cross_validate(examples, names, folds=folds)
        TacticClassifier.fit(examples, names, taxonomy=taxonomy).save(out)
    except (RubricError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    console.print(f"{len(examples)} examples, {len(names)} tactics: {folds}-fold accuracy {report['accuracy']:.3f}, "
                  f"macro-F1 {report['macro_f1']:.3f}", highlight=False)
    table = Table(title="confusion matrix (rows: gold, columns: predicted)")
    table.add_column("gold")
    for j, _ in enumerate(names):
        table.add_column(str(j), justify="right")
    table.add_column("F1", justify="right")
    for i, name in enumerate(names):
        table.add_row(f"{i} {name}", *[str(v) for v in report["confusion"][i]], f"{report['per_class_f1'][name]:.2f}")
    console.print(table)
    console.print(f"saved to {out}", highlight=False)


@app.command()
def train(
    config: Annotated[Optional[Path], typer.Argument(help="YAML config; without one, the embedded CPU demo runs.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a config key: --set grpo.beta=0.04")] = None,
    resume: Annotated[Optional[Path], typer.Option(help="Continue the run in this directory from its last checkpoint.")] = None,
):
    """Train a policy with GRPO (TRL) against rubric rewards, evaluate before/after, write a report."""
    from rubricrl.core.problems import RubricError
    from rubricrl.train.config import ConfigError, load_config
    from rubricrl.train.run import RunDirError, resume_config, run_training

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
    console.print(f"{summary['steps']} steps in {summary['seconds']} s; report: {summary['report']}", highlight=False)


@app.command()
def simulate(
    out: Annotated[Path, typer.Option(help="Directory for transcripts.jsonl, summary.json and report.html.")],
    policy: Annotated[str, typer.Option(help="Supporter: local[:MODEL] (e.g. a training run's final/), "
                                             "llamacpp[:FILE.gguf] or openai:URL?model=NAME.")] = "local",
    personas: Annotated[Optional[Path], typer.Option(help="Persona YAML/JSONL (rubricrl or SAGE format) or a "
                                                          "bundled name (default: support_seekers).")] = None,
    user_model: Annotated[str, typer.Option(help="Chat model playing the users (same specs as --policy).")] = "llamacpp",
    repeats: Annotated[int, typer.Option(min=1, help="Conversations per persona.")] = 1,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Use only the first N personas.")] = None,
    max_turns: Annotated[int, typer.Option(min=1, help="Supporter turns before a conversation is cut.")] = 8,
    start_emotion: Annotated[float, typer.Option(min=0, max=100, help="Users' starting emotion.")] = 40,
    max_change: Annotated[int, typer.Option(min=1, help="Bound on the emotion change per turn.")] = 10,
    concurrency: Annotated[int, typer.Option(min=1, help="Conversations in flight at once.")] = 4,
    seed: Annotated[int, typer.Option(help="Seed for the users (same seed, same users).")] = 0,
):
    """Talk to simulated users with hidden emotions and report the Sentient-style score."""
    import asyncio

    from rubricrl.llm.chat import make_chat_model
    from rubricrl.dialogue.persona import load_personas
    from rubricrl.dialogue.rollout import chat_policy, plan, run_conversations
    from rubricrl.dialogue.summary import summarize_simulation, write_simulation_report
    from rubricrl.dialogue.user import SimulatedUser, UserSettings
    from rubricrl.llm.models import ModelNotFoundError

    refuse_clash([("--out", out)] + [(f"--out (its {name})", out / name)
                                     for name in ("transcripts.jsonl", "summary.json", "report.html")],
                 [("--personas", personas)])
    try:
        loaded = load_personas(personas)
    except (FileNotFoundError, ValueError) as exc:
        fail(f"--personas: {exc}")
    for problem in loaded.problems:
        err.print(f"[yellow]skipped persona[/] {problem}", highlight=False, soft_wrap=True)
    chosen = loaded.personas[:limit] if limit else loaded.personas
    if not chosen:
        fail("no usable persona; fix the problems above")
    try:
        policy_model = make_chat_model(policy)
        user_chat = policy_model if user_model == policy else make_chat_model(user_model)
    except (ValueError, ModelNotFoundError, RuntimeError, OSError) as exc:
        fail(f"cannot load a chat model: {exc}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "transcripts.jsonl"
    if path.exists() and path.stat().st_size:
        fail(f"{path} already has transcripts; choose a new --out directory")
    settings = UserSettings(max_turns=max_turns, start_emotion=start_emotion, max_change=max_change)
    slots = plan(chosen, repeats=repeats, seed=seed)
    columns = (TextColumn("conversations"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err) as progress, path.open("w", encoding="utf-8") as handle:
        task = progress.add_task("simulate", total=len(slots))

        def done(transcript) -> None:
            handle.write(escape_line_separators(transcript.model_dump_json()) + "\n")
            handle.flush()
            progress.advance(task)

        transcripts = asyncio.run(run_conversations(slots, chat_policy(policy_model), SimulatedUser(user_chat, settings),
                                                    concurrency=concurrency, on_done=done))
    ordered = [transcripts[s.trajectory_id] for s in slots]
    summary = summarize_simulation(ordered, success_at=settings.success_at, failure_below=settings.failure_below)
    (out / "summary.json").write_text(json.dumps({**summary.to_dict(), "personas_skipped": len(loaded.problems)}, indent=2))
    report = write_simulation_report(out, ordered, summary)
    table = Table(title="rubricrl simulate", show_header=False)
    score = summary.score
    table.add_row("mean final emotion", f"{score.mean:.1f}  95% CI [{score.ci_low:.1f}, {score.ci_high:.1f}]  n={score.n}"
                  if score else "no conversation completed")
    table.add_row("successes (reached 100)", str(summary.successes))
    table.add_row("failures (below 10)", str(summary.failures))
    table.add_row("mean supporter turns", f"{summary.mean_turns:.2f}" if summary.mean_turns is not None else "-")
    table.add_row("conversations", f"{summary.conversations} ({summary.errors} ended in an error"
                  + (f": {summary.error_reasons}" if summary.errors else "") + ")")
    table.add_row("end reasons", ", ".join(f"{k} x{v}" for k, v in summary.end_reasons.items()))
    table.add_row("empty supporter replies", str(summary.empty_supporter_replies))
    table.add_row("personas skipped", str(len(loaded.problems)))
    console.print(table)
    console.print(f"wrote {path}, {out / 'summary.json'} and {report}", highlight=False)


@app.command("llama-server")
def llama_server(
    model: Annotated[Optional[str], typer.Option(help="A .gguf file (default: the embedded SmolLM2-135M).")] = None,
    host: Annotated[str, typer.Option(help="Interface to bind; keep loopback unless you secure it.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    parallel: Annotated[int, typer.Option(min=1, help="Concurrent sequences (llama.cpp slots).")] = 4,
    context: Annotated[int, typer.Option(min=256, help="Context tokens per slot.")] = 4096,
    threads: Annotated[int, typer.Option(min=1, help="CPU threads.")] = 2,
):
    """Serve a GGUF model with llama.cpp's OpenAI-compatible API until interrupted (judge it with
    `--judge openai:http://HOST:PORT/v1`)."""
    import time

    from rubricrl.llm.llama_server import LlamaServer
    from rubricrl.llm.models import ModelNotFoundError

    try:
        server = LlamaServer(model, host=host, port=port, parallel=parallel, context=context, threads=threads).start()
    except (ModelNotFoundError, RuntimeError) as exc:
        fail(str(exc))
    console.print(f"serving {server.model_path.name} at {server.url} (Ctrl-C to stop)", highlight=False)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


@app.command("eval")
def eval_(
    out: Annotated[Path, typer.Option(help="Eval directory: run.json, generations.jsonl, results.jsonl, summary.json, "
                                           "report.html. Re-running the same command resumes it.")],
    policy: Annotated[Optional[str], typer.Option(help="Policy to evaluate: local[:MODEL], llamacpp[:FILE.gguf] or "
                                                       "openai:URL?model=NAME (default: the run's).")] = None,
    data: Annotated[Optional[Path], typer.Option(help="JSONL prompts (HealthBench rows work as-is); a response "
                                                      "field is ignored (default: the run's).")] = None,
    judge: Annotated[Optional[str], typer.Option(help="Judge spec as in `rubricrl score` (default: the run's, "
                                                      "else exemplar+local).")] = None,
    rubric: Annotated[Optional[Path], typer.Option(help="Rubric file or bundled name for rows without their own.")] = None,
    samples: Annotated[Optional[int], typer.Option(min=1, help="Generations per row (default 1).")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(min=1, help="Tokens per generation (default 512).")] = None,
    temperature: Annotated[Optional[float], typer.Option(min=0.0, help="Sampling temperature (default 0).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed; sample k uses SEED+k (default 0).")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Generations in flight at once.")] = 4,
    batch_size: Annotated[int, typer.Option(min=1, help="Units judged together.")] = 16,
    rejudge: Annotated[bool, typer.Option("--rejudge", help="Re-score the saved generations (e.g. with another "
                                                            "--judge); the old results are kept.")] = False,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="Generate the saved policy errors again "
                                                                      "(they are final otherwise).")] = False,
    max_error_rate: Annotated[float, typer.Option(min=0.0, max=1.0, help="Exit with code 1 when more than this share "
                                                                        "of the model-judged verdicts are judge errors "
                                                                        "(errors / (decided + errors)); 1 never "
                                                                        "fails.")] = DEFAULT_MAX_ERROR_RATE,
):
    """Generate with a policy, judge, and aggregate (HealthBench semantics); resumes after a kill.

    Exit code 0: done; 1: done, but more than --max-error-rate of the model-judged verdicts are judge
    errors; 2: refused (bad input or settings), see the message."""
    from rubricrl.cli.eval import eval_command
    from rubricrl.evaluation.run import EvalRequest

    eval_command(EvalRequest(out, policy, data, judge, rubric, samples, max_tokens, temperature, seed, concurrency,
                             batch_size, rejudge, retry_errors), max_error_rate=max_error_rate)


@app.command()
def compare(
    dir_a: Annotated[Path, typer.Argument(help="Eval directory A (the baseline).")],
    dir_b: Annotated[Path, typer.Argument(help="Eval directory B; differences are B - A.")],
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the comparison as JSON.")] = None,
    html_out: Annotated[Optional[Path], typer.Option("--html", help="Write the comparison as HTML.")] = None,
    top: Annotated[int, typer.Option(min=1, help="Examples that changed most to list.")] = 10,
):
    """Paired difference of two evals (same row ids and samples) with a bootstrap CI, per criterion and tag."""
    from rubricrl.cli.eval import compare_command

    compare_command(dir_a, dir_b, json_out, html_out, top)


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A training run or `rubricrl eval` directory.")]):
    """(Re)write RUN_DIR/report.html from the run's files."""
    from rubricrl.reports.eval import is_eval_dir, write_eval_report
    from rubricrl.reports.training import write_report

    try:
        path = write_eval_report(run_dir) if is_eval_dir(run_dir) else write_report(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    console.print(f"wrote {path}", highlight=False)


@app.command()
def serve(
    rubric: Annotated[Optional[str], typer.Option(help="Rubric file or bundled name for rows whose label carries "
                                                       "none (empathy, crisis_safety).")] = None,
    judge: Annotated[str, typer.Option(help="Judge spec, as for `score` (e.g. `rules`, `exemplar+local`, "
                                            "`openai:URL?model=...`).")] = "exemplar+local",
    host: Annotated[str, typer.Option(help="Interface to bind; any non-loopback address needs --token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    token: Annotated[Optional[str], typer.Option(envvar="RUBRICRL_SERVE_TOKEN", show_default=False,
                                                 help="Bearer token clients must send (env RUBRICRL_SERVE_TOKEN).")] = None,
    max_body: Annotated[int, typer.Option(min=1024, help="Largest request body in bytes (413).")] = 32 * 1024 * 1024,
    concurrency: Annotated[int, typer.Option(min=1, help="Requests judged at once.")] = 8,
    queue: Annotated[int, typer.Option(min=0, help="Requests waiting for a slot; beyond, 503 + Retry-After.")] = 1024,
    timeout: Annotated[float, typer.Option(min=0.001, help="Seconds per request, queueing included (504).")] = 120.0,
    read_timeout: Annotated[Optional[float], typer.Option(
        min=0.001, help="Seconds a client may take to send a request's headers and body (408); default "
                        "min(--timeout, 30).")] = None,
    error_policy: Annotated[str, typer.Option(help="A row with judge errors gets reward 0.0 (`zero`, flagged in "
                                                   "the logs) or fails the request with 502 (`raise`).")] = "zero",
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Bypass the SQLite verdict cache.")] = False,
    cache_path: Annotated[Optional[Path], typer.Option(help="Verdict cache file (default: user cache dir).")] = None,
):
    """Serve rubric rewards over HTTP: OpenRLHF's remote reward API (POST / and /get_reward), /v1/score,
    /health and /metrics (docs/scaling.md)."""
    from rubricrl.serve.app import serve as run
    from rubricrl.serve.settings import settings_from_options

    try:
        settings = settings_from_options(rubric=rubric, judge=judge, host=host, port=port, token=token,
                                         max_body=max_body, concurrency=concurrency, queue=queue, timeout=timeout,
                                         read_timeout=read_timeout,
                                         error_policy=error_policy, cache=not no_cache,
                                         cache_path=str(cache_path) if cache_path else None)
        run(settings)
    except ValueError as exc:
        fail(str(exc))


def score_scope(coverage) -> str:
    """What a headline score rests on, for its label: nothing when every model-judged verdict was decided."""
    if coverage.verdicts and not coverage.decided:
        return ": RULE CRITERIA ONLY"
    return ": PARTIAL" if coverage.partial else ""


def print_summary(s: RunSummary) -> None:
    head = Table(title="rubricrl score", show_header=False)
    head.add_row("rows", f"{s.rows} ({s.scored} scored, {s.unscored} unscored, {s.invalid} invalid)")
    if s.score:
        head.add_row("score (mean, clipped)" + score_scope(s.model_judged),
                     f"{s.score.mean:.3f}  95% CI [{s.score.ci_low:.3f}, "
                     f"{s.score.ci_high:.3f}]  bootstrap std {s.score.std:.3f}  n={s.score.n}")
    else:
        head.add_row("score", "no row could be scored")
    if s.model_judged.verdicts:
        head.add_row("model-judged verdicts", s.model_judged.describe())
    if s.mean_coverage is not None:
        head.add_row("coverage", f"{s.mean_coverage:.1%} of criteria decided (met/unmet)")
    head.add_row("hard-rule gated rows", str(s.gated_rows))
    reasons = ", ".join(f"{k} x{v}" for k, v in s.error_reasons.items())
    head.add_row("judge errors", f"{s.errors} of {s.verdicts} verdicts" + (f" ({reasons})" if reasons else ""))
    console.print(head)
    if s.criteria:
        table = Table(title="per criterion")
        for col in ("criterion", "pass rate", "met", "unmet", "error", "skipped"):
            table.add_column(col, justify="left" if col == "criterion" else "right")
        for cid, c in list(s.criteria.items())[:40]:
            rate = f"{c.pass_rate:.1%}" if c.pass_rate is not None else "-"
            table.add_row(cid, rate, str(c.met), str(c.unmet), str(c.error), str(c.skipped))
        console.print(table)
    if s.tags:
        console.print("per tag: " + ", ".join(f"{t} {v:.3f}" for t, v in s.tags.items()), highlight=False)
    for problem in s.invalid_examples:
        err.print(f"[yellow]invalid row[/] {problem}", highlight=False, soft_wrap=True)


if __name__ == "__main__":
    app()
