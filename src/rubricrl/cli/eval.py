"""Bodies of the `rubricrl eval` and `rubricrl compare` commands: progress bars and rich tables
around `evaluation.run_eval` and `comparison.compare_dirs` (cli.py only declares the options)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from rubricrl.cli.main import check_judge_errors, console, err, fail, refuse_clash, score_scope
from rubricrl.evaluation.compare import Comparison, ComparisonError, ci, compare_dirs, comparison_html
from rubricrl.evaluation.run import EvalError, EvalRequest, run_eval
from rubricrl.scoring.summary import DEFAULT_MAX_ERROR_RATE, ModelCoverage

COLUMNS = (TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
           TimeRemainingColumn())


def eval_command(req: EvalRequest, *, max_error_rate: float = DEFAULT_MAX_ERROR_RATE) -> None:
    """Run (or resume, or re-judge) an eval and print its summary; exit with code 1 when more than
    `max_error_rate` of the model-judged verdicts are judge errors."""
    from rubricrl.llm.chat import make_chat_model
    from rubricrl.judges import JudgeSpecError, make_judge
    from rubricrl.llm.models import ModelNotFoundError

    def policy(spec: str):
        try:
            return make_chat_model(spec)
        except (ValueError, ModelNotFoundError, RuntimeError, OSError) as exc:
            raise EvalError(f"--policy {spec}: {exc}") from None

    def judge(spec: str):
        try:
            return make_judge(spec)
        except (JudgeSpecError, ModelNotFoundError, OSError) as exc:
            raise EvalError(f"--judge {spec}: {exc}") from None

    try:
        with Progress(*COLUMNS, console=err, transient=False) as progress:
            def phase(name: str, total: int):
                task = progress.add_task(name, total=total)
                return lambda n: progress.advance(task, n)

            outcome = run_eval(req, make_policy=policy, make_judge=judge, phase=phase)
    except EvalError as exc:
        fail(str(exc))
    for problem in outcome.invalid_rows[:10]:
        err.print(f"[yellow]invalid row[/] {problem}", highlight=False, soft_wrap=True)
    if len(outcome.invalid_rows) > 10:
        err.print(f"[yellow]... and {len(outcome.invalid_rows) - 10} more invalid rows[/]", highlight=False)
    print_eval_summary(outcome.summary, title=f"rubricrl eval {req.out}")
    gen = outcome.run.generation
    if gen.samples > 1 and gen.temperature == 0:
        err.print(f"[yellow]note[/] {gen.samples} samples at temperature 0: a deterministic policy gives the same answer "
                  "to every sample of a row (use --temperature > 0)", highlight=False)
    st = outcome.judge_stats
    if st is not None and st.model_calls:
        console.print(f"judge {outcome.judge_id}: {st.model_calls} model calls, {st.tokens} tokens, {st.retries} "
                      f"retries, cost {st.cost:.4f}", highlight=False)
    if outcome.retried:
        console.print(f"retried {outcome.retried} policy error(s)", highlight=False)
    if outcome.archived:
        console.print(f"kept the previous results as {', '.join(outcome.archived)}", highlight=False)
    console.print(f"generated {outcome.generated_now} now ({outcome.generated_before} saved before), judged "
                  f"{outcome.judged_now} now ({outcome.judged_before} saved before); wrote {req.out}/summary.json and "
                  f"{outcome.report}", highlight=False)
    check_judge_errors(model_judged(outcome.summary), outcome.summary["judge_error_reasons"], max_error_rate,
                       f"fix the judge, then re-judge the saved generations: `rubricrl eval --out {req.out} "
                       "--rejudge` (the current results are kept; cached verdicts cost no model call)")


def model_judged(s: dict) -> ModelCoverage:
    """The summary's model-judged verdict counts (an older summary has none: zeros)."""
    m = s.get("model_judged") or {}
    return ModelCoverage(**{k: m.get(k, 0) for k in ("verdicts", "decided", "errors", "skipped")})


def _estimate(e: dict | None) -> str:
    if not e:
        return "-"
    return f"{e['mean']:.3f}  95% CI [{e['ci_low']:.3f}, {e['ci_high']:.3f}]  bootstrap std {e['std']:.3f}  n={e['n']}"


def print_eval_summary(s: dict, title: str) -> None:
    head = Table(title=title, show_header=False)
    coverage = model_judged(s)
    head.add_row("score (mean, clipped)" + score_scope(coverage),
                 _estimate(s["score"]) if s["score"] else "no unit could be scored")
    if coverage.verdicts:
        head.add_row("model-judged verdicts", coverage.describe())
    if s.get("score_errors_as_zero"):
        head.add_row("score if policy errors scored 0", _estimate(s["score_errors_as_zero"]))
    head.add_row("units", f"{s['units']} over {s['rows']} rows x {s['samples']} samples: "
                 + ", ".join(f"{k} {v}" for k, v in s["status"].items()))
    reasons = ", ".join(f"{k} x{v}" for k, v in s["policy_error_reasons"].items())
    head.add_row("policy errors", f"{s['policy_errors']}" + (f" ({reasons})" if reasons else ""))
    reasons = ", ".join(f"{k} x{v}" for k, v in s["judge_error_reasons"].items())
    head.add_row("judge errors", f"{s['judge_errors']} of {s['judge_verdicts']} verdicts"
                 + (f" ({reasons})" if reasons else ""))
    console.print(head)
    for name, label in (("criterion_tags", "per criterion tag"), ("example_tags", "per example tag")):
        if s[name]:
            table = Table(title=label)
            for col in ("tag", "score", "95% CI", "rows"):
                table.add_column(col, justify="left" if col == "tag" else "right")
            for tag, e in list(s[name].items())[:30]:
                table.add_row(tag, f"{e['mean']:.3f}", f"[{e['ci_low']:.3f}, {e['ci_high']:.3f}]", str(e["n"]))
            console.print(table)
    if s["criteria"] and s["criteria_key"] == "id":
        table = Table(title="per criterion")
        for col in ("criterion", "pass rate", "met", "unmet", "error", "skipped"):
            table.add_column(col, justify="left" if col == "criterion" else "right")
        for cid, c in list(s["criteria"].items())[:40]:
            rate = f"{c['pass_rate']:.1%}" if c["pass_rate"] is not None else "-"
            table.add_row(cid, rate, str(c["met"]), str(c["unmet"]), str(c["error"]), str(c["skipped"]))
        console.print(table)


def compare_command(dir_a: Path, dir_b: Path, json_out: Path | None, html_out: Path | None, top: int) -> None:
    from rubricrl.evaluation.run import GENERATIONS, RESULTS, RUN_FILE, SUMMARY

    names = (RUN_FILE, GENERATIONS, RESULTS, SUMMARY, "report.html")
    refuse_clash([("--json", json_out), ("--html", html_out)],
                 [(label, d) for label, d in (("DIR_A", dir_a), ("DIR_B", dir_b))]
                 + [(f"{label} (its {name})", d / name) for label, d in (("DIR_A", dir_a), ("DIR_B", dir_b))
                    for name in names])
    try:
        c = compare_dirs(dir_a, dir_b, top=top)
    except ComparisonError as exc:
        fail(str(exc))
    print_comparison(c)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(c.model_dump(mode="json"), indent=2, ensure_ascii=False), encoding="utf-8")
        console.print(f"wrote {json_out}", highlight=False)
    if html_out is not None:
        html_out.parent.mkdir(parents=True, exist_ok=True)
        html_out.write_text(comparison_html(c), encoding="utf-8")
        console.print(f"wrote {html_out}", highlight=False)


def print_comparison(c: Comparison) -> None:
    head = Table(title="rubricrl compare (B - A)", show_header=False)
    head.add_row("A", c.a)
    head.add_row("B", c.b)
    head.add_row("B - A (95% CI)", f"{ci(c.diff)}  (paired: {c.paired_units} units, {c.paired_rows} rows)")
    head.add_row("A / B (paired units)", f"{c.score_a.mean:.3f} / {c.score_b.mean:.3f}")
    head.add_row("unpaired units", ", ".join(f"{k} {v}" for k, v in c.unpaired.items()))
    console.print(head)
    for note in c.notes:
        err.print(f"[yellow]note[/] {note}", highlight=False)
    if c.tags:
        table = Table(title="per tag")
        for col in ("tag", "kind", "A", "B", "B - A (95% CI)", "rows"):
            table.add_column(col)
        for t in c.tags[:30]:
            table.add_row(t.tag, t.kind, f"{t.mean_a:.3f}", f"{t.mean_b:.3f}", ci(t.diff), str(t.diff.n))
        console.print(table)
    table = Table(title="per criterion, largest change first")
    for col in ("criterion", "pass A", "pass B", "B - A", "units"):
        table.add_column(col, justify="left" if col == "criterion" else "right")
    for cr in c.criteria[:20]:
        table.add_row((cr.text or cr.id)[:70], f"{cr.pass_a:.1%}", f"{cr.pass_b:.1%}", f"{cr.diff:+.1%}", str(cr.n))
    console.print(table)
    table = Table(title="examples that changed most")
    for col in ("id", "sample", "A", "B", "B - A", "flipped verdicts"):
        table.add_column(col)
    for e in c.changed:
        table.add_row(e.id, str(e.sample), f"{e.score_a:.3f}", f"{e.score_b:.3f}", f"{e.diff:+.3f}",
                      "; ".join(f"{f['criterion'][:40]}: {f['a']}->{f['b']}" for f in e.flipped[:4]))
    console.print(table)
