"""The HTML report of simulated conversations (`rubricrl simulate`): the Sentient-style summary
(`dialogue.summary.SimulationSummary`), emotion trajectories as an inline PNG, the mean final
emotion per persona and the lowest and highest conversations with the users' hidden analyses.
The page is `templates/simulation.html.j2`."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rubricrl.dialogue.rollout import Transcript
from rubricrl.dialogue.summary import SimulationSummary
from rubricrl.reports import figures
from rubricrl.reports.render import render, write

__all__ = ["trajectory_plot", "render_simulation_report", "write_simulation_report"]
EXAMPLES = 3  # lowest and highest conversations shown


def trajectory_plot(transcripts: list[Transcript]) -> str:
    """Emotion per supporter turn: per persona (mean over repeats) and the average, as a data URI."""
    fig, (left, right) = figures.subplots(1, 2, figsize=(11, 3.6))
    longest = max((len(t.emotions) for t in transcripts), default=1)
    by_persona: dict[str, list[list[float]]] = defaultdict(list)
    for t in transcripts:
        by_persona[t.persona_id].append(t.emotions)
    for persona, runs in by_persona.items():
        mean = _mean_padded(runs, longest)
        left.plot(range(len(mean)), mean, linewidth=1, alpha=0.7, label=persona)
    left.set_title("per persona (mean over repeats)")
    average = _mean_padded([t.emotions for t in transcripts], longest)
    right.plot(range(len(average)), average, linewidth=2.5, color="#1f4e79")
    right.set_title(f"average over {len(transcripts)} conversations")
    for ax in (left, right):
        ax.set_xlabel("supporter turn")
        ax.set_ylabel("emotion (0-100)")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    if len(by_persona) <= 12:
        left.legend(fontsize=7)
    return figures.data_uri(fig)


def _mean_padded(runs: list[list[float]], length: int) -> list[float]:
    """Mean per turn, a finished conversation carried at its final emotion to the longest one."""
    if not runs:
        return []
    padded = [r + [r[-1]] * (length - len(r)) for r in runs]
    return [sum(col) / len(col) for col in zip(*padded)]


def summary_rows(s: SimulationSummary) -> list[tuple[str, object]]:
    head = (f"{s.score.mean:.1f} (95% CI {s.score.ci_low:.1f}-{s.score.ci_high:.1f}, n={s.score.n})"
            if s.score else "no conversation completed")
    return [("mean final emotion", head), ("conversations", f"{s.conversations} ({s.errors} ended in an error)"),
            ("successes (reached 100)", s.successes), ("failures (below 10)", s.failures),
            ("mean supporter turns", f"{s.mean_turns:.2f}" if s.mean_turns is not None else "-"),
            ("end reasons", s.end_reasons), ("error reasons", s.error_reasons or "none"),
            ("empty supporter replies", s.empty_supporter_replies)]


def render_simulation_report(transcripts: list[Transcript], summary: SimulationSummary, title: str) -> str:
    shown = sorted(transcripts, key=lambda t: t.final_emotion)
    examples = shown[:EXAMPLES] + shown[-EXAMPLES:] if len(shown) > 2 * EXAMPLES else shown
    return render("simulation.html.j2", title=title, rows=summary_rows(summary),
                  trajectories=trajectory_plot(transcripts) if transcripts else None,
                  per_persona=summary.per_persona, examples=examples)


def write_simulation_report(out_dir: Path, transcripts: list[Transcript], summary: SimulationSummary) -> Path:
    out_dir = Path(out_dir)
    return write(out_dir / "report.html",
                 render_simulation_report(transcripts, summary, f"rubricrl simulate: {out_dir.name}"))
