"""`rubricrl score`: judge a JSONL file of responses, write verdicts, scores and a summary, print them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.table import Table

from rubricrl.cli.common import (check_judge_errors, console, err, fail, judge_or_fail, load_rubric_option, progress,
                                 refuse_clash, rubric_path, score_scope)
from rubricrl.cli.options import (DEFAULT_JUDGE, JUDGE_SPECS, CachePath, MaxErrorRate, NoCache, Threshold,
                                  calibration_option, judge_option, rubric_option)
from rubricrl.scoring.summary import DEFAULT_MAX_ERROR_RATE, RunSummary

if TYPE_CHECKING:
    from rubricrl.judges.routing import RoutedJudge


def score(
    data: Annotated[Path, typer.Option(help="JSONL rows: prompt (or messages), response, optional rubric.")],
    out: Annotated[Path, typer.Option(help="Output JSONL; rows already in it are skipped (resume). The settings "
                                           "its verdicts were judged with go to OUT_STEM.settings.json; a re-run "
                                           "with other settings is refused (see --rejudge).")],
    rubric: Annotated[Optional[Path], rubric_option("Rubric file or bundled name (empathy, crisis_safety) for rows "
                                                    "without their own rubric.")] = None,
    judge: Annotated[str, judge_option(JUDGE_SPECS)] = DEFAULT_JUDGE,
    no_cache: NoCache = False,
    cache_path: CachePath = None,
    threshold: Threshold = 0.5,
    calibration: Annotated[Path | None, calibration_option("Calibration file from `rubricrl judge calibrate`: "
                                                           "re-decides model verdicts from p_met.")] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Rows judged together (shared-prefix batching).")] = 16,
    summary_json: Annotated[Optional[Path], typer.Option(help="Where to write the summary (default: OUT with .summary.json).")] = None,
    rejudge: Annotated[bool, typer.Option("--rejudge", help="Re-judge every row (e.g. with another --judge or "
                                                            "--rubric than OUT was scored with); the old results are "
                                                            "kept as OUT_STEM.<UTC time>.jsonl.")] = False,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="Re-judge only the rows of OUT that have judge "
                                                                      "errors (same settings); each new result "
                                                                      "replaces the old one.")] = False,
    max_error_rate: MaxErrorRate = DEFAULT_MAX_ERROR_RATE,
):
    """Judge every row against its rubric and write verdicts, scores and a summary.

    Exit code 0: done; 1: done, but more than --max-error-rate of the model-judged verdicts are judge
    errors; 2: refused (bad input, or OUT scored with other settings), nothing written."""
    from rubricrl.scoring.batch import count_lines, score_rows
    from rubricrl.scoring.records import read_records
    from rubricrl.rubrics.rows import ScoringRow, read_rows
    from rubricrl.scoring.runs import (begin, default_summary_path, finish, make_settings, plan_score,
                                       retry_path, sidecar_paths)
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
    try:
        archived = begin(plan, out)
        if plan.mode == "retry_errors":  # new results go to the retry file, merged into OUT by finish()
            rows, sink = [r for r in read_rows(data) if isinstance(r, ScoringRow) and r.id in plan.retry_ids], \
                retry_path(out)
            total = len(rows)
        else:
            rows, sink, total = read_rows(data), out, count_lines(data)
        with progress("scoring") as bar:
            task = bar.add_task("rows", total=total)
            result = score_rows(rows, sink, the_judge, shared, batch_size=batch_size,
                                on_rows=lambda n: bar.advance(task, n))
        finish(plan, out)
    except ValueError as exc:
        fail(str(exc))
    records = read_records(out)
    summary = summarize(records)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(summary.to_dict(), indent=2), encoding="utf-8")
    print_summary(summary)
    print_judge_usage(the_judge)
    if archived:
        console.print(f"kept the previous results as {', '.join(archived)}", highlight=False)
    if plan.mode == "retry_errors":
        still = sum(1 for r in records if r.id in plan.retry_ids and r.has_errors)
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


def print_judge_usage(the_judge: RoutedJudge) -> None:
    """What the judge used (`judge.report()`): exemplar verdicts, model calls and cache hits, endpoint calls
    and cost, defences."""
    report = the_judge.report()
    exemplar, model = report.parts.get("exemplar"), report.parts.get("model")
    if exemplar is not None:
        console.print(f"judge {exemplar.judge_id}: {exemplar.stats.verdicts} verdicts", highlight=False)
    if model is not None:
        console.print(f"judge {model.judge_id}: {model.stats.model_calls} model calls, {model.stats.tokens} tokens"
                      + (f", cache hits {model.cache.hits}, misses {model.cache.misses}" if model.cache else ""),
                      highlight=False)
    for e in report.endpoints:
        console.print(f"endpoint {e.url}: {e.calls} calls, {e.retries} retries, "
                      f"{e.prompt_tokens}+{e.completion_tokens} tokens, cost {e.cost:.4f}"
                      + (f", failures {e.errors}" if e.errors else ""), highlight=False)
    guard = report.defences  # judges/defences.py
    if guard is not None:
        console.print(f"defences ({the_judge.defences.describe()}): {guard.prechecked} responses pre-checked, "
                      f"{guard.neutralised} neutralised, {guard.downgraded} verdicts downgraded", highlight=False)


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
