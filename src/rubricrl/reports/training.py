"""Self-contained HTML report of a training run (no network: plots are inline PNGs).

Reads the run directory's metrics.jsonl, samples.jsonl, eval_before/after.jsonl and summary.json.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from rubricrl.core import jsonl  # noqa: E402

CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;
vertical-align:top}th{background:#f3f3f3}.met{color:#0a6b2d}.unmet{color:#a33}.error{color:#b36b00;font-weight:bold}
.skipped{color:#777}img{max-width:100%}.note{color:#555;font-size:.9em}pre{white-space:pre-wrap;margin:0}"""


def read_jsonl(path: Path) -> list[dict]:
    return jsonl.read_jsonl(path) if path.is_file() else []


def last_per_step(rows: list[dict]) -> list[dict]:
    """One log line per step (a resumed run re-logs steps after its last checkpoint: keep the newest)."""
    by_step: dict[int, dict] = {}
    for row in rows:
        if "loss" in row or "reward" in row:
            by_step[row["step"]] = row
    return [by_step[s] for s in sorted(by_step)]


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return f'<img alt="plot" src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'


def _line_plot(steps_rows: list[dict], keys: list[str], title: str, ylabel: str) -> str:
    fig, ax = plt.subplots(figsize=(7, 3.2))
    plotted = False
    for key in keys:
        points = [(r["step"], r[key]) for r in steps_rows if r.get(key) is not None]
        if points:
            ax.plot(*zip(*points), marker="o", markersize=3, label=key.split("/")[-1])
            plotted = True
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    if len(keys) > 1 and plotted:
        ax.legend(fontsize=7, loc="best")
    if not plotted:
        ax.text(0.5, 0.5, "no data logged", ha="center", va="center", transform=ax.transAxes)
    return _png(fig)


def _estimate_cell(part: dict | None) -> str:
    if not part or not part.get("estimate"):
        return "<td>no scored rows</td>"
    e = part["estimate"]
    return (f"<td>{e['mean']:.3f} <span class=note>95% CI [{e['ci_low']:.3f}, {e['ci_high']:.3f}], "
            f"n={e['n']}, judge errors {part['errors']}</span></td>")


def _verdict_list(verdicts: list[dict]) -> str:
    items = []
    for v in verdicts:
        detail = v.get("evidence") or v.get("reason") or ""
        p = f" p={v['p_met']:.2f}" if v.get("p_met") is not None else ""
        items.append(f"<li class={v['status']}>{html.escape(v['criterion_id'])}: {v['status']}{p} "
                     f"<span class=note>{html.escape(detail[:160])}</span></li>")
    return "<ul>" + "".join(items) + "</ul>"


def _tactic_section(before: list[dict], after: list[dict]) -> str:
    """Share of held-out completions using each tactic (bundled classifier), before vs after."""
    try:
        from rubricrl.tactics.classifier import TacticClassifier, TurnExample

        model = TacticClassifier.load()
        shares = []
        for records in (before, after):
            labels = model.predict([TurnExample(r["completion"], frozenset(), r["prompt"]) for r in records])
            shares.append({t: sum(t in set_ for set_ in labels) / max(len(labels), 1) for t in model.tactics})
    except Exception as exc:  # noqa: BLE001 - the report must still be written; say what failed
        return f"<h2>Tactics</h2><p class=note>tactic classification failed: {html.escape(str(exc))}</p>"
    rows = "".join(f"<tr><td>{html.escape(t)}</td><td>{shares[0][t]:.0%}</td><td>{shares[1][t]:.0%}</td></tr>"
                   for t in model.tactics)
    return ("<h2>Tactics in held-out completions</h2><p class=note>Share of completions using each tactic "
            f"(bundled {html.escape(model.taxonomy)} classifier; single-turn prompts, so no stickiness)</p>"
            f"<table><tr><th>tactic</th><th>before</th><th>after</th></tr>{rows}</table>")


def render_report(run_dir: Path) -> str:
    metrics = last_per_step(read_jsonl(run_dir / "metrics.jsonl"))
    samples = read_jsonl(run_dir / "samples.jsonl")
    summary = json.loads(jsonl.read_text(run_dir / "summary.json")) if (run_dir / "summary.json").is_file() else {}
    before = read_jsonl(run_dir / "eval_before.jsonl")
    after = read_jsonl(run_dir / "eval_after.jsonl")
    keys = sorted({k for r in metrics for k in r})
    pass_keys = [k for k in keys if "/pass_rate/" in k]
    error_keys = [k for k in keys if k.endswith("/judge_errors") or k.endswith("/masked")]
    parts = [f"<!doctype html><html><head><meta charset=utf-8><title>rubricrl run {html.escape(run_dir.name)}"
             f"</title><style>{CSS}</style></head><body>",
             f"<h1>rubricrl training run: {html.escape(str(run_dir))}</h1>",
             f"<p class=note>policy {html.escape(str(summary.get('model', '?')))}, {summary.get('steps', '?')} "
             f"steps, {summary.get('seconds', '?')} s</p>",
             "<h2>Held-out score, before and after</h2>",
             "<table><tr><th>before</th><th>after</th></tr><tr>"
             f"{_estimate_cell(summary.get('before'))}{_estimate_cell(summary.get('after'))}</tr></table>",
             "<p class=note>Held-out prompts are judged by the evaluation judge (default: rule checks only), "
             "which can differ from the reward judge, so a gain is not just the reward judge agreeing with "
             "itself. Overlapping intervals mean the change is not distinguishable from noise.</p>",
             "<h2>Reward</h2>", _line_plot(metrics, ["reward"], "mean reward per step", "reward"),
             *([_line_plot(metrics, [k for k in keys if k.endswith("/final_emotion")],
                           "simulated users' mean final emotion per step", "emotion (0-100)")]
               if any(k.endswith("/final_emotion") for k in keys) else []),
             "<h2>Per-criterion pass rates</h2>",
             _line_plot(metrics, pass_keys, "pass rate per criterion (reward judge)", "pass rate"),
             "<h2>Groups with zero reward spread</h2>",
             _line_plot(metrics, ["frac_reward_zero_std"], "share of GRPO groups with identical rewards", "share"),
             "<h2>Judge errors</h2>",
             _line_plot(metrics, error_keys, "judge error verdicts and masked completions per step", "count"),
             f"<p>Reward totals: {html.escape(json.dumps(summary.get('reward_totals', {})))}</p>"]
    if samples:
        last_step = max(s["step"] for s in samples)
        shown = sorted((s for s in samples if s["step"] == last_step),
                       key=lambda s: -(s["reward"] if s["reward"] is not None else -1e9))[:6]
        parts.append(f"<h2>Example completions at step {last_step} (reward judge)</h2><table>"
                     "<tr><th>prompt</th><th>completion</th><th>reward</th><th>verdicts</th></tr>")
        for s in shown:
            reward = "masked" if s["reward"] is None else f"{s['reward']:.3f}"
            parts.append(f"<tr><td><pre>{html.escape(s['prompt'][:400])}</pre></td><td><pre>"
                         f"{html.escape(s['completion'][:800])}</pre></td><td>{reward}<br><span class=note>"
                         f"{html.escape(s.get('note', ''))}</span></td><td>{_verdict_list(s['verdicts'])}</td></tr>")
        parts.append("</table>")
    if before and after:
        parts.append(_tactic_section(before, after))
        after_by_id = {r["id"]: r for r in after}
        parts.append("<h2>Held-out completions, before and after</h2><table><tr><th>prompt</th><th>before</th>"
                     "<th>after</th></tr>")
        for b in before[:8]:
            a = after_by_id.get(b["id"], {})
            parts.append(f"<tr><td><pre>{html.escape(b['prompt'][:300])}</pre></td>"
                         f"<td><pre>{html.escape(b['completion'][:500])}</pre>score {b['score']}"
                         f"{_verdict_list(b['verdicts'])}</td><td><pre>{html.escape(a.get('completion', '')[:500])}"
                         f"</pre>score {a.get('score')}{_verdict_list(a.get('verdicts', []))}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").is_file() and not (run_dir / "summary.json").is_file():
        raise FileNotFoundError(f"{run_dir}: no metrics.jsonl or summary.json; is this a rubricrl run directory?")
    target = run_dir / "report.html"
    target.write_text(render_report(run_dir), encoding="utf-8")
    return target
