"""Self-contained HTML report of an eval directory (`rubricrl report DIR`): headline score with CI,
tag and criterion tables, the score distribution (inline PNG), the worst examples with their
verdicts and evidence, judge and policy errors. No external assets: it can be mailed or archived."""

from __future__ import annotations

import html
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from rubricrl.scoring.batch import read_results  # noqa: E402
from rubricrl.evaluation.summary import EstimateOut, EvalSummary, summarize_eval  # noqa: E402
from rubricrl.evaluation.run import RESULTS, RUN_FILE, EvalError, is_eval_dir, load_run  # noqa: E402
from rubricrl.reports.training import CSS, _png  # noqa: E402

__all__ = ["is_eval_dir", "write_eval_report", "render_eval_report"]
WORST = 10
MAX_CRITERIA = 200


def esc(value: object) -> str:
    return html.escape(str(value))


def estimate_text(e: EstimateOut | None) -> str:
    if e is None:
        return "-"
    return f"{e.mean:.3f} (95% CI [{e.ci_low:.3f}, {e.ci_high:.3f}], bootstrap std {e.std:.3f}, n={e.n})"


def table(headers: list[str], rows: list[list[object]], raw: bool = False) -> str:
    """An HTML table; cells are escaped unless `raw` (cells built by this module)."""
    head = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>" if headers else ""
    body = "".join("<tr>" + "".join(f"<td>{c if raw else esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def distribution_plot(records: list[dict], summary: EvalSummary) -> str:
    scores = [r["score"] for r in records if r["status"] == "scored"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
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
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return _png(fig)


def tag_table(tags: dict[str, EstimateOut]) -> str:
    if not tags:
        return "<p class=note>none</p>"
    return table(["tag", "score", "95% CI", "bootstrap std", "rows", "units"],
                 [[t, f"{e.mean:.3f}", f"[{e.ci_low:.3f}, {e.ci_high:.3f}]", f"{e.std:.3f}", e.n, e.units]
                  for t, e in tags.items()])


def criteria_table(summary: EvalSummary) -> str:
    items = list(summary.criteria.values())
    if summary.criteria_key == "text":  # per-row rubrics: the most frequent criteria first
        items.sort(key=lambda c: -(c.met + c.unmet + c.error + c.skipped))
    by_text = summary.criteria_key == "text"  # then ids (c1, c2, ... per row) say nothing
    rows = [([] if by_text else [c.id]) + [c.text[:300], f"{c.weight:+g}", " ".join(c.tags),
             f"{c.pass_rate:.1%}" if c.pass_rate is not None else "-", c.met, c.unmet, c.error, c.skipped]
            for c in items[:MAX_CRITERIA]]
    note = (f"<p class=note>Showing {MAX_CRITERIA} of {len(items)} criteria (most frequent first); all are in "
            "summary.json.</p>" if len(items) > MAX_CRITERIA else "")
    keyed = ("<p class=note>Rows carry their own rubrics, so criteria are merged by their text.</p>"
             if summary.criteria_key == "text" else "")
    headers = ["criterion", "points", "tags", "pass rate", "met", "unmet", "error", "skipped"]
    return keyed + table(headers if by_text else ["id", *headers], rows) + note


def verdict_rows(record: dict) -> str:
    rows = []
    for v in record.get("verdicts") or []:
        detail = v.get("evidence") or v.get("reason") or ""
        p = f" p={v['p_met']:.2f}" if v.get("p_met") is not None else ""
        rows.append([esc(v.get("text") or v["criterion_id"]), f"{v.get('weight', 0):+g}",
                     f"<span class={esc(v['status'])}>{esc(v['status'])}{p}</span>", esc(detail[:300]),
                     esc(v.get("judge_id", ""))])
    return table(["criterion", "points", "verdict", "evidence / reason", "judge"], rows, raw=True)


def worst_examples(records: list[dict]) -> str:
    scored = sorted((r for r in records if r["status"] == "scored"), key=lambda r: (r["score"], r["key"]))[:WORST]
    if not scored:
        return "<p class=note>no scored units</p>"
    parts = []
    for r in scored:
        gate = f", hard rules failed: {', '.join(r['failed_hard_rules'])}" if r.get("gated") else ""
        parts.append(f"<h3>{esc(r['id'])} sample {r['sample']}: score {r['score']:.3f}{esc(gate)}</h3>"
                     f"<p class=note>example tags: {esc(' '.join(r.get('example_tags') or []) or '-')}</p>"
                     f"<table><tr><th>prompt (last user message)</th><th>response</th></tr><tr>"
                     f"<td><pre>{esc(r.get('prompt', '')[:1500])}</pre></td>"
                     f"<td><pre>{esc(r.get('response', '')[:3000])}</pre></td></tr></table>" + verdict_rows(r))
    return "".join(parts)


def render_eval_report(out: Path) -> str:
    run = load_run(out)
    records = read_results(out / RESULTS)
    summary = summarize_eval(records, samples=run.generation.samples)
    gen, judging = run.generation, run.judging
    settings = [["policy", gen.policy], ["data", f"{run.data_path} (sha256 {gen.data_sha256[:16]})"],
                ["judge", judging.judge], ["judge ids", ", ".join(summary.judge_ids) or "-"],
                ["rubric", f"{judging.rubric_path} (hash {judging.rubric_hash[:12]})" if judging.rubric_path
                 else "per-row rubrics"],
                ["samples per row", gen.samples], ["max tokens", gen.max_tokens], ["temperature", gen.temperature],
                ["seed", gen.seed], ["judging complete", run.judging_complete]]
    settings += [["archived results", f"{a['file']} (judge {a['judge']})"] for a in run.archived]
    status = ", ".join(f"{k} {v}" for k, v in summary.status.items())
    judge_reasons = ", ".join(f"{k} x{v}" for k, v in summary.judge_error_reasons.items()) or "-"
    policy_reasons = ", ".join(f"{k} x{v}" for k, v in summary.policy_error_reasons.items()) or "-"
    headline = [["score (mean, clipped to [0, 1])", estimate_text(summary.score)],
                ["units", f"{summary.units} ({status}) over {summary.rows} rows"],
                ["policy errors", f"{summary.policy_errors} ({policy_reasons}); not scored"],
                ["judge errors", f"{summary.judge_errors} of {summary.judge_verdicts} verdicts ({judge_reasons}); "
                                 "left out of the scores"],
                ["mean coverage", f"{summary.mean_coverage:.1%}" if summary.mean_coverage is not None else "-"],
                ["hard-rule gated units", summary.gated]]
    if summary.score_errors_as_zero is not None:
        headline.insert(1, ["score if policy errors scored 0", estimate_text(summary.score_errors_as_zero)])
    errors = [r for r in records if r["status"] in ("policy_error", "invalid", "unscored")][:20]
    parts = [f"<!doctype html><html><head><meta charset=utf-8><title>rubricrl eval {esc(out.name)}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>rubricrl eval: {esc(out)}</h1>",
             f"<p class=headline><b>Score {summary.score.mean:.3f}</b> (95% CI [{summary.score.ci_low:.3f}, "
             f"{summary.score.ci_high:.3f}], n={summary.score.n} rows)</p>" if summary.score else
             "<p class=headline><b>No unit could be scored.</b></p>",
             "<h2>Headline</h2>", table([], headline),
             "<p class=note>HealthBench semantics: per unit, points of met criteria (negative points included) over "
             "positive points; the run score is the mean clipped to [0, 1]; the bootstrap (1000 resamples, seed 0) "
             "resamples rows, averaging a row's samples first.</p>",
             "<h2>Settings</h2>", table([], settings),
             "<h2>Score distribution</h2>", distribution_plot(records, summary),
             "<h2>Per criterion tag (e.g. HealthBench axes)</h2>", tag_table(summary.criterion_tags),
             "<h2>Per example tag (e.g. HealthBench themes)</h2>", tag_table(summary.example_tags),
             "<h2>Per criterion</h2>", criteria_table(summary),
             f"<h2>Worst {WORST} examples</h2>", worst_examples(records),
             "<h2>Judge errors</h2>",
             table(["reason", "verdicts"], list(summary.judge_error_reasons.items()) or [["none", 0]]),
             "<h2>Policy errors, invalid and unscored units</h2>",
             table(["id", "sample", "status", "problem"],
                   [[r["id"], r.get("sample", ""), r["status"], r.get("problem", "no criterion could be decided")]
                    for r in errors]) if errors else "<p class=note>none</p>",
             "</body></html>"]
    return "\n".join(parts)


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
    except (KeyError, json.JSONDecodeError) as exc:
        raise EvalError(f"{out / RESULTS}: not an eval results file ({type(exc).__name__}: {exc})") from None
    target = out / "report.html"
    target.write_text(text, encoding="utf-8")
    return target
