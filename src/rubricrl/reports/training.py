"""Self-contained HTML report of a training run (no network: plots are inline PNGs).

Reads the run directory's metrics.jsonl, samples.jsonl, eval_before/after.jsonl and summary.json;
the page is `templates/training.html.j2`.
"""

from __future__ import annotations

import json
from pathlib import Path

from rubricrl.core import jsonl
from rubricrl.reports import figures
from rubricrl.reports.render import render, write

__all__ = ["render_report", "write_report", "heldout_pairs", "read_jsonl", "last_per_step"]
SAMPLES_SHOWN = 6


def read_jsonl(path: Path) -> list[dict]:
    return jsonl.read_jsonl(path) if path.is_file() else []


def last_per_step(rows: list[dict]) -> list[dict]:
    """One log line per step (a resumed run re-logs steps after its last checkpoint: keep the newest)."""
    by_step: dict[int, dict] = {}
    for row in rows:
        if "loss" in row or "reward" in row:
            by_step[row["step"]] = row
    return [by_step[s] for s in sorted(by_step)]


def line_plot(steps_rows: list[dict], keys: list[str], title: str, ylabel: str) -> str:
    fig, ax = figures.subplots(figsize=(7, 3.2))
    plotted = False
    for key in keys:
        points = [(r["step"], r[key]) for r in steps_rows if r.get(key) is not None]
        if points:
            ax.plot(*zip(*points), marker="o", markersize=3, label=key.split("/")[-1])
            plotted = True
    ax.set_title(title)
    ax.set_xlabel("step")
    figures.integer_ticks(ax.xaxis)
    ax.set_ylabel(ylabel)
    if len(keys) > 1 and plotted:
        ax.legend(fontsize=7, loc="best")
    if not plotted:
        ax.text(0.5, 0.5, "no data logged", ha="center", va="center", transform=ax.transAxes)
    return figures.data_uri(fig)


def verdicts_of(record: dict | None) -> list[dict]:
    """A record's verdicts with the keys the templates read (older or partial lines lack some)."""
    return [{"criterion_id": v.get("criterion_id", "?"), "status": v.get("status", "?"), "p_met": v.get("p_met"),
             "evidence": v.get("evidence") or "", "reason": v.get("reason") or ""}
            for v in (record or {}).get("verdicts") or []]


def _side(record: dict | None) -> dict | None:
    if record is None:
        return None
    return {"reply": record.get("completion", ""), "score": record.get("score"),
            "n_error": record.get("n_error", 0), "verdicts": verdicts_of(record)}


def heldout_pairs(before: list[dict], after: list[dict]) -> list[dict]:
    """Each held-out id (before's order, then ids only after has) with its reply, score and verdicts
    before and after training (None for a side without that id), and one row per criterion."""
    by_before, by_after = {r["id"]: r for r in before}, {r["id"]: r for r in after}
    pairs = []
    for row_id in dict.fromkeys([r["id"] for r in before] + [r["id"] for r in after]):
        b, a = _side(by_before.get(row_id)), _side(by_after.get(row_id))
        verdicts = {side: {v["criterion_id"]: v for v in (s["verdicts"] if s else [])}
                    for side, s in (("before", b), ("after", a))}
        criteria = dict.fromkeys([*verdicts["before"], *verdicts["after"]])
        pairs.append({"id": str(row_id), "prompt": (by_before.get(row_id) or by_after[row_id]).get("prompt", ""),
                      "before": b, "after": a,
                      "criteria": [{"id": c, "before": verdicts["before"].get(c), "after": verdicts["after"].get(c)}
                                   for c in criteria]})
    return pairs


def tactic_shares(before: list[dict], after: list[dict]) -> dict:
    """Share of held-out completions using each tactic (bundled classifier), before vs after; on a
    failure, `error` says what failed (the report is still written)."""
    try:
        from rubricrl.tactics.classifier import TacticClassifier, TurnExample

        model = TacticClassifier.load()
        shares = []
        for records in (before, after):
            labels = model.predict([TurnExample(r["completion"], frozenset(), r["prompt"]) for r in records])
            shares.append({t: sum(t in set_ for set_ in labels) / max(len(labels), 1) for t in model.tactics})
    except Exception as exc:  # noqa: BLE001 - the report must still be written; say what failed
        return {"error": str(exc), "taxonomy": "", "rows": []}
    return {"error": None, "taxonomy": model.taxonomy,
            "rows": [(t, shares[0][t], shares[1][t]) for t in model.tactics]}


def _samples(samples: list[dict]) -> tuple[int | None, list[dict]]:
    """The last step's samples, highest reward first (masked last), at most SAMPLES_SHOWN."""
    if not samples:
        return None, []
    last_step = max(s["step"] for s in samples)
    shown = sorted((s for s in samples if s["step"] == last_step),
                   key=lambda s: -(s["reward"] if s.get("reward") is not None else -1e9))[:SAMPLES_SHOWN]
    return last_step, [{"prompt": s.get("prompt", ""), "completion": s.get("completion", ""),
                        "reward": s.get("reward"), "note": s.get("note", ""), "verdicts": verdicts_of(s)}
                       for s in shown]


def render_report(run_dir: Path) -> str:
    run_dir = Path(run_dir)
    metrics = last_per_step(read_jsonl(run_dir / "metrics.jsonl"))
    summary = json.loads(jsonl.read_text(run_dir / "summary.json")) if (run_dir / "summary.json").is_file() else {}
    before = read_jsonl(run_dir / "eval_before.jsonl")
    after = read_jsonl(run_dir / "eval_after.jsonl")
    keys = sorted({k for r in metrics for k in r})
    emotion_keys = [k for k in keys if k.endswith("/final_emotion")]
    last_step, samples = _samples(read_jsonl(run_dir / "samples.jsonl"))
    plots = {
        "reward": line_plot(metrics, ["reward"], "mean reward per step", "reward"),
        "emotion": (line_plot(metrics, emotion_keys, "simulated users' mean final emotion per step", "emotion (0-100)")
                    if emotion_keys else None),
        "pass_rates": line_plot(metrics, [k for k in keys if "/pass_rate/" in k],
                                "pass rate per criterion (reward judge)", "pass rate"),
        "zero_spread": line_plot(metrics, ["frac_reward_zero_std"], "share of GRPO groups with identical rewards",
                                 "share"),
        "errors": line_plot(metrics, [k for k in keys if k.endswith(("/judge_errors", "/masked", "/defence_gated"))],
                            "judge errors, masked completions and replies stopped by the quality gate per step",
                            "count"),
    }
    return render(
        "training.html.j2", run_name=run_dir.name, run_dir=str(run_dir), model=str(summary.get("model", "?")),
        steps=summary.get("steps", "?"), seconds=summary.get("seconds", "?"),
        held_before=summary.get("before"), held_after=summary.get("after"), plots=plots,
        change=summary.get("change"), eval_judge=summary.get("eval_judge"),
        reward_totals=json.dumps(summary.get("reward_totals", {})), last_step=last_step, samples=samples,
        tactics=tactic_shares(before, after) if before and after else None, heldout=heldout_pairs(before, after))


def write_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").is_file() and not (run_dir / "summary.json").is_file():
        raise FileNotFoundError(f"{run_dir}: no metrics.jsonl or summary.json; is this a rubricrl run directory?")
    return write(run_dir / "report.html", render_report(run_dir))
