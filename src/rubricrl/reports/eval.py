"""Self-contained HTML report of an eval directory (`rubricrl report DIR`): headline score with CI
and the coverage of the model-judged criteria, tag and criterion tables, the score distribution
(inline PNG), the worst examples with their verdicts and evidence, judge and policy errors. No
external assets: it can be mailed or archived. The page is `templates/eval.html.j2`."""

from __future__ import annotations

from pathlib import Path

from rubricrl.evaluation.run import RESULTS, RUN_FILE, EvalError, is_eval_dir, load_run
from rubricrl.evaluation.summary import EvalSummary, summarize_eval
from rubricrl.reports import figures
from rubricrl.reports.render import render, write
from rubricrl.scoring.records import EvalRecord, RecordError, read_records

__all__ = ["is_eval_dir", "write_eval_report", "render_eval_report"]
WORST = 10
MAX_CRITERIA = 200
MAX_ERRORS = 20


def distribution_plot(records: list[EvalRecord], summary: EvalSummary) -> str:
    scores = [r.score for r in records if r.status == "scored"]
    fig, ax = figures.subplots(figsize=(7, 3.2))
    if scores:
        ax.hist(scores, bins=min(20, max(5, len(scores) // 2)), color="#4a7bb7", edgecolor="white")
        if summary.score is not None:
            ax.axvline(summary.score.mean, color="#a33", linestyle="--", label=f"mean (clipped) {summary.score.mean:.3f}")
            ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no scored units", ha="center", va="center", transform=ax.transAxes)
    ax.set_title("score per (row, sample), unclipped")
    ax.set_xlabel("score")
    ax.set_ylabel("units")
    figures.integer_ticks(ax.yaxis)
    return figures.data_uri(fig)


def criteria_rows(summary: EvalSummary) -> list:
    """The criteria to list (per-row rubrics: the most frequent first), at most MAX_CRITERIA of them."""
    items = list(summary.criteria.values())
    if summary.criteria_key == "text":
        items.sort(key=lambda c: -(c.met + c.unmet + c.error + c.skipped))
    return items


def settings_rows(out: Path, summary: EvalSummary) -> list[list[object]]:
    run = load_run(out)
    gen, judging = run.generation, run.judging
    rows = [["policy", gen.policy], ["data", f"{run.data_path} (sha256 {gen.data_sha256[:16]})"],
            ["judge", judging.judge], ["judge ids", ", ".join(summary.judge_ids) or "-"],
            ["rubric", f"{judging.rubric_path} (hash {(judging.rubric_hash or '')[:12]})" if judging.rubric_path
             else "per-row rubrics"],
            ["samples per row", gen.samples], ["max tokens", gen.max_tokens], ["temperature", gen.temperature],
            ["seed", gen.seed], ["judging complete", run.judging_complete]]
    return rows + [["archived results", f"{a['file']} (judge {a['judge']})"] for a in run.archived]


def _reasons(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in counts.items()) or "-"


def render_eval_report(out: Path) -> str:
    out = Path(out)
    run = load_run(out)
    records = read_records(out / RESULTS, EvalRecord)
    summary = summarize_eval(records, samples=run.generation.samples)
    scored = sorted((r for r in records if r.status == "scored"), key=lambda r: (r.score, r.key))
    criteria = criteria_rows(summary)
    return render(
        "eval.html.j2", out=str(out), name=out.name, summary=summary, model_judged=summary.model_judged,
        status=", ".join(f"{k} {v}" for k, v in summary.status.items()),
        judge_reasons=_reasons(summary.judge_error_reasons), policy_reasons=_reasons(summary.policy_error_reasons),
        settings=settings_rows(out, summary), distribution=distribution_plot(records, summary),
        criteria=criteria[:MAX_CRITERIA], criteria_total=len(criteria), max_criteria=MAX_CRITERIA,
        worst=scored[:WORST], worst_n=WORST,
        errors=[r for r in records if r.status in ("policy_error", "invalid", "unscored")][:MAX_ERRORS])


def write_eval_report(out: str | Path) -> Path:
    """Write DIR/report.html for an eval directory."""
    out = Path(out)
    if not (out / RUN_FILE).is_file():
        raise FileNotFoundError(f"{out}: no {RUN_FILE}; is this a `rubricrl eval` directory?")
    if not (out / RESULTS).is_file():
        raise FileNotFoundError(f"{out}: no {RESULTS} yet (the run stopped before judging); finish it with "
                                f"`rubricrl eval --out {out}`")
    try:
        text = render_eval_report(out)
    except RecordError as exc:
        raise EvalError(f"{exc}; not an eval results file") from None
    return write(out / "report.html", text)
