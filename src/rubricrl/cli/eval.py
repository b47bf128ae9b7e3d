"""`rubricrl eval` (generate with a policy, judge, aggregate; resumable), `rubricrl compare` (paired
difference of two evals) and `rubricrl report` (rewrite a run's or an eval's report.html): progress
bars and rich tables around `evaluation.run_eval` and `evaluation.compare.compare_dirs`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.table import Table

from rubricrl.cli.common import check_judge_errors, console, err, fail, progress, refuse_clash, score_scope
from rubricrl.cli.options import MaxErrorRate, judge_option, rubric_option
from rubricrl.scoring.summary import DEFAULT_MAX_ERROR_RATE, ModelCoverage

if TYPE_CHECKING:
    from rubricrl.evaluation.compare import Comparison


def eval_(
    out: Annotated[Path, typer.Option(help="Eval directory: run.json, generations.jsonl, results.jsonl, summary.json, "
                                           "report.html. Re-running the same command resumes it.")],
    policy: Annotated[Optional[str], typer.Option(help="Policy to evaluate: local[:MODEL], llamacpp[:FILE.gguf] or "
                                                       "openai:URL?model=NAME (default: the run's).")] = None,
    data: Annotated[Optional[Path], typer.Option(help="JSONL prompts (HealthBench rows work as-is); a response "
                                                      "field is ignored (default: the run's).")] = None,
    judge: Annotated[Optional[str], judge_option("Judge spec as in `rubricrl score` (default: the run's, "
                                                 "else gate+exemplar+local).")] = None,
    rubric: Annotated[Optional[Path], rubric_option("Rubric file or bundled name for rows without their own.")] = None,
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
    max_error_rate: MaxErrorRate = DEFAULT_MAX_ERROR_RATE,
):
    """Generate with a policy, judge, and aggregate (HealthBench semantics); resumes after a kill.

    Exit code 0: done; 1: done, but more than --max-error-rate of the model-judged verdicts are judge
    errors; 2: refused (bad input or settings), see the message."""
    from rubricrl.evaluation.run import EvalError, EvalRequest, run_eval
    from rubricrl.judges import JudgeSpecError, make_judge
    from rubricrl.llm.chat import make_chat_model
    from rubricrl.llm.models import ModelNotFoundError
    from rubricrl.reports.eval import write_eval_report

    req = EvalRequest(out, policy, data, judge, rubric, samples, max_tokens, temperature, seed, concurrency, batch_size,
                      rejudge, retry_errors)

    def policy_model(spec: str):
        try:
            return make_chat_model(spec)
        except (ValueError, ModelNotFoundError, RuntimeError, OSError) as exc:
            raise EvalError(f"--policy {spec}: {exc}") from None

    def judge_of(spec: str):
        try:
            return make_judge(spec)
        except (JudgeSpecError, ModelNotFoundError, OSError) as exc:
            raise EvalError(f"--judge {spec}: {exc}") from None

    try:
        with progress("{task.description:<10}") as bar:
            def phase(name: str, total: int):
                task = bar.add_task(name, total=total)
                return lambda n: bar.advance(task, n)

            outcome = run_eval(req, make_policy=policy_model, make_judge=judge_of, phase=phase)
        report = write_eval_report(req.out)  # run_eval writes the data files; the HTML view is the command's
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
                  f"{report}", highlight=False)
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


def compare(
    dir_a: Annotated[Path, typer.Argument(help="Eval directory A (the baseline).")],
    dir_b: Annotated[Path, typer.Argument(help="Eval directory B; differences are B - A.")],
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the comparison as JSON.")] = None,
    html_out: Annotated[Optional[Path], typer.Option("--html", help="Write the comparison as HTML.")] = None,
    top: Annotated[int, typer.Option(min=1, help="Examples that changed most to list.")] = 10,
):
    """Paired difference of two evals (same row ids and samples) with a bootstrap CI, per criterion and tag."""
    from rubricrl.evaluation.compare import ComparisonError, compare_dirs
    from rubricrl.reports.compare import comparison_html
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


def report(run_dir: Annotated[Path, typer.Argument(help="A training run or `rubricrl eval` directory.")]):
    """(Re)write RUN_DIR/report.html from the run's files."""
    from rubricrl.reports.eval import is_eval_dir, write_eval_report
    from rubricrl.reports.training import write_report

    try:
        path = write_eval_report(run_dir) if is_eval_dir(run_dir) else write_report(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    console.print(f"wrote {path}", highlight=False)


def print_comparison(c: Comparison) -> None:
    from rubricrl.evaluation.compare import ci

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
