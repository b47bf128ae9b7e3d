"""Self-contained HTML page of a judge-agreement result (`rubricrl judge agree`): the tables and a
reliability diagram as an inline PNG (no network, no external files). The page is
`templates/agreement.html.j2`."""

from __future__ import annotations

from pathlib import Path

from rubricrl.reports import figures
from rubricrl.reports.render import render, write

__all__ = ["render_html", "write_report", "reliability_png", "fmt"]

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
    fig, ax = figures.subplots(figsize=(5.2, 4.4))
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
    return figures.data_uri(fig)


def metric_rows(rows: list[tuple[str, dict]]) -> list[tuple[str, list[str]]]:
    """(name, formatted cell per COLUMNS entry) for a metrics table."""
    return [(str(name), [fmt(m.get(key)) for _, key in COLUMNS]) for name, m in rows]


def render_html(result: dict) -> str:
    """The page for an `agreement.json` result."""
    overall = result["overall"]
    return render(
        "agreement.html.j2", judge_id=result["judge_id"], labels_file=result["labels_file"], overall=overall,
        notes=result.get("notes", {}), columns=[name for name, _ in COLUMNS],
        overall_rows=metric_rows([("all labels", overall)]),
        error_reasons=sorted((overall.get("error_reasons") or {}).items()),
        criterion_rows=metric_rows([(m["text"], m) for m in result["by_criterion"].values()]),
        tag_rows=metric_rows(list(result["by_tag"].items())),
        reliability=reliability_png(result["reliability"]),
        bins=[{"lo": b["lo"], "hi": b["hi"], "n": b["n"], "mean_p": fmt(b["mean_p"]), "met_rate": fmt(b["met_rate"])}
              for b in result["reliability"]],
        problems=result.get("problems") or [])


def write_report(result: dict, path: str | Path) -> Path:
    return write(path, render_html(result))
