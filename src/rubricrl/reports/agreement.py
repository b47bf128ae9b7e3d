"""Self-contained HTML page of a judge-agreement result (`rubricrl judge agree`): the tables and a
reliability diagram as an inline PNG (no network, no external files)."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

CSS = """body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0;font-size:.92em}td,th{border:1px solid #ccc;padding:.25em .5em;
text-align:right;vertical-align:top}th{background:#f3f3f3}td.name{text-align:left;max-width:28em}
img{max-width:100%}.note{color:#555;font-size:.9em}.bad{color:#a33}"""

COLUMNS = [("labels", "n_labels"), ("met", "n_met_labels"), ("unmet", "n_unmet_labels"), ("errors", "n_errors"),
           ("skipped", "n_skipped"), ("P met", "precision_met"), ("R met", "recall_met"), ("F1 met", "f1_met"),
           ("P unmet", "precision_unmet"), ("R unmet", "recall_unmet"), ("F1 unmet", "f1_unmet"),
           ("balanced F1", "balanced_f1"), ("kappa", "kappa"), ("AUC", "auc")]


def fmt(value) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def reliability_png(bins: list[dict]) -> str:
    """Mean predicted p_met vs observed met rate per bin, with the count of each bin, as a data URI."""
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    ax.plot([0, 1], [0, 1], linestyle="--", color="#999", linewidth=1, label="perfect calibration")
    full = [b for b in bins if b["n"]]
    if full:
        xs, ys = [b["mean_p"] for b in full], [b["met_rate"] for b in full]
        ax.plot(xs, ys, marker="o", color="#1f5fa8", label="judge")
        for b, x, y in zip(full, xs, ys):
            ax.annotate(f"n={b['n']}", (x, y), textcoords="offset points", xytext=(4, 5), fontsize=7)
    else:
        ax.text(0.5, 0.5, "no decided verdict with p_met", ha="center", va="center")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("mean predicted p_met (10 equal-width bins)")
    ax.set_ylabel("observed met rate (human labels)")
    ax.set_title("reliability diagram")
    ax.legend(loc="upper left", fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def metrics_table(rows: list[tuple[str, dict]], first: str) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in [first] + [name for name, _ in COLUMNS])
    body = []
    for name, m in rows:
        cells = "".join(f"<td>{fmt(m.get(key))}</td>" for _, key in COLUMNS)
        body.append(f'<tr><td class="name">{html.escape(name)}</td>{cells}</tr>')
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def render_html(result: dict) -> str:
    """The page for an `agreement.json` result."""
    overall = result["overall"]
    intro = (f"<h1>Judge agreement with human labels</h1><p>judge <code>{html.escape(result['judge_id'])}</code>; "
             f"labels <code>{html.escape(result['labels_file'])}</code>: {overall['n_labels']} labels, "
             f"{overall['n_decided']} decided, {overall['n_errors']} judge errors, {overall['n_skipped']} skipped.</p>")
    parts = [intro]
    notes = result.get("notes", {})
    parts.append('<p class="note">' + "<br>".join(f"<b>{html.escape(k)}</b>: {html.escape(v)}"
                                                 for k, v in notes.items()) + "</p>")
    parts.append("<h2>Overall</h2>" + metrics_table([("all labels", overall)], ""))
    if overall.get("error_reasons"):
        reasons = ", ".join(f"{html.escape(k)}: {n}" for k, n in sorted(overall["error_reasons"].items()))
        parts.append(f'<p class="bad">judge errors by reason: {reasons}</p>')
    rows = [(m["text"], m) for m in result["by_criterion"].values()]
    parts.append("<h2>Per criterion</h2>" + metrics_table(rows, "criterion"))
    if result["by_tag"]:
        parts.append("<h2>Per tag</h2>" + metrics_table(list(result["by_tag"].items()), "tag"))
    bins = result["reliability"]
    parts.append(f'<h2>Reliability</h2><img alt="reliability diagram" src="{reliability_png(bins)}">')
    bin_rows = "".join(f"<tr><td>{b['lo']:.1f}–{b['hi']:.1f}</td><td>{b['n']}</td><td>{fmt(b['mean_p'])}</td>"
                       f"<td>{fmt(b['met_rate'])}</td></tr>" for b in bins)
    parts.append("<table><tr><th>p_met bin</th><th>n</th><th>mean p_met</th><th>met rate</th></tr>"
                 f"{bin_rows}</table>")
    if result.get("problems"):
        items = "".join(f"<li>{html.escape(p)}</li>" for p in result["problems"])
        parts.append(f'<h2>Label lines not used ({len(result["problems"])})</h2><ul class="bad">{items}</ul>')
    title = f"agreement: {result['judge_id']}"
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>")


def write_report(result: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(result), encoding="utf-8")
    return path
