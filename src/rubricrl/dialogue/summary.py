"""The Sentient-style summary of simulated conversations and their HTML report.

Benchmark score = mean final emotion (0-100) over conversations, with a bootstrap 95% CI;
success = reached 100, failure = fell below 10. Conversations that ended in an error are
counted and left out of the score (their final emotion is not a measurement).
"""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rubricrl.reports.training import CSS, _png  # noqa: E402
from rubricrl.scoring.formulas import Estimate, bootstrap  # noqa: E402
from rubricrl.dialogue.rollout import Transcript  # noqa: E402


@dataclass
class SimulationSummary:
    conversations: int
    scored: int
    errors: int
    score: Estimate | None  # mean final emotion, 0-100
    successes: int
    failures: int
    mean_turns: float | None
    end_reasons: dict[str, int]
    error_reasons: dict[str, int]
    empty_supporter_replies: int
    per_persona: dict[str, float]

    def to_dict(self) -> dict:
        return asdict(self)


def summarize_simulation(transcripts: list[Transcript], *, success_at: float = 100, failure_below: float = 10,
                         seed: int = 0) -> SimulationSummary:
    ok = [t for t in transcripts if t.end_reason != "error"]
    finals = [t.final_emotion for t in ok]
    score = None
    if finals:
        unit = bootstrap([f / 100 for f in finals], seed=seed, clip=False)
        score = Estimate(unit.mean * 100, unit.std * 100, unit.ci_low * 100, unit.ci_high * 100, unit.n)
    by_persona: dict[str, list[float]] = defaultdict(list)
    for t in ok:
        by_persona[t.persona_id].append(t.final_emotion)
    reasons = Counter((next((x.error for x in t.turns if x.error), "") or "unknown").split(":", 1)[0]
                      for t in transcripts if t.end_reason == "error")
    return SimulationSummary(
        conversations=len(transcripts), scored=len(ok), errors=len(transcripts) - len(ok), score=score,
        successes=sum(f >= success_at for f in finals), failures=sum(f < failure_below for f in finals),
        mean_turns=sum(t.supporter_turns for t in ok) / len(ok) if ok else None,
        end_reasons=dict(Counter(t.end_reason for t in transcripts)), error_reasons=dict(reasons),
        empty_supporter_replies=sum(t.notes.count("empty_supporter_reply") for t in transcripts),
        per_persona={k: sum(v) / len(v) for k, v in sorted(by_persona.items())})


def trajectory_plot(transcripts: list[Transcript]) -> str:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
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
    return _png(fig)


def _mean_padded(runs: list[list[float]], length: int) -> list[float]:
    """Mean per turn, a finished conversation carried at its final emotion to the longest one."""
    if not runs:
        return []
    padded = [r + [r[-1]] * (length - len(r)) for r in runs]
    return [sum(col) / len(col) for col in zip(*padded)]


def render_simulation_report(transcripts: list[Transcript], summary: SimulationSummary, title: str) -> str:
    e = html.escape
    s = summary
    head = (f"{s.score.mean:.1f} (95% CI {s.score.ci_low:.1f}-{s.score.ci_high:.1f}, n={s.score.n})"
            if s.score else "no conversation completed")
    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in (
        ("mean final emotion", head), ("conversations", f"{s.conversations} ({s.errors} ended in an error)"),
        ("successes (reached 100)", s.successes), ("failures (below 10)", s.failures),
        ("mean supporter turns", f"{s.mean_turns:.2f}" if s.mean_turns is not None else "-"),
        ("end reasons", s.end_reasons), ("error reasons", s.error_reasons or "none"),
        ("empty supporter replies", s.empty_supporter_replies)))
    persona_rows = "".join(f"<tr><td>{e(k)}</td><td>{v:.1f}</td></tr>" for k, v in s.per_persona.items())
    shown = sorted(transcripts, key=lambda t: t.final_emotion)
    examples = "".join(_transcript_html(t) for t in (shown[:3] + shown[-3:] if len(shown) > 6 else shown))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>{CSS}</style></head>"
            f"<body><h1>{e(title)}</h1><table>{rows}</table><h2>Emotion trajectories</h2>"
            f"{trajectory_plot(transcripts) if transcripts else ''}"
            f"<h2>Per persona: mean final emotion</h2><table><tr><th>persona</th><th>final</th></tr>{persona_rows}</table>"
            f"<h2>Lowest and highest conversations</h2>{examples}"
            "<p class='note'>The user's analyses are hidden from the supporter; they are shown here to explain "
            "each change.</p></body></html>")


def _transcript_html(t: Transcript) -> str:
    e = html.escape
    lines = []
    for turn in t.turns:
        if turn.role == "supporter":
            lines.append(f"<tr><td>supporter</td><td><pre>{e(turn.text)}</pre></td><td></td></tr>")
        else:
            change = f"{turn.change:+d} -> {turn.emotion:.0f}" if turn.change is not None else (
                f"{turn.emotion:.0f}" if turn.emotion is not None else "")
            error = f"<span class='error'>{e(turn.error)}</span> " if turn.error else ""
            lines.append(f"<tr><td>user</td><td><pre>{e(turn.text)}</pre></td><td>{error}{e(change)}"
                         f"<div class='note'>{e(turn.reasons)}</div></td></tr>")
    return (f"<h3>{e(t.trajectory_id)}: final {t.final_emotion:.0f}, {e(t.end_reason)}</h3>"
            f"<table><tr><th>who</th><th>text</th><th>emotion (hidden analysis)</th></tr>{''.join(lines)}</table>")


def write_simulation_report(out_dir: Path, transcripts: list[Transcript], summary: SimulationSummary) -> Path:
    path = out_dir / "report.html"
    path.write_text(render_simulation_report(transcripts, summary, f"rubricrl simulate: {out_dir.name}"),
                    encoding="utf-8")
    return path
