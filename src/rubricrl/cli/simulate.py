"""`rubricrl simulate`: conversations with simulated users who have hidden emotions, and
`rubricrl simulate summarize FILE...`: the Sentient-style summary of transcript files (rubricrl's or
SAGE's released results)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from rubricrl.cli.common import console, err, fail, progress, refuse_clash
from rubricrl.core.jsonl import escape_line_separators


def simulate(
    ctx: typer.Context,
    out: Annotated[Optional[Path], typer.Option(help="Directory for transcripts.jsonl, summary.json and "
                                                     "report.html (required to run conversations).")] = None,
    policy: Annotated[str, typer.Option(help="Supporter: local[:MODEL] (e.g. a training run's final/), "
                                             "llamacpp[:FILE.gguf] or openai:URL?model=NAME.")] = "local",
    personas: Annotated[Optional[Path], typer.Option(help="Persona YAML/JSONL (rubricrl or SAGE format) or a "
                                                          "bundled name (default: support_seekers).")] = None,
    user_model: Annotated[str, typer.Option(help="Chat model playing the users (same specs as --policy).")] = "llamacpp",
    repeats: Annotated[int, typer.Option(min=1, help="Conversations per persona.")] = 1,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Use only the first N personas.")] = None,
    max_turns: Annotated[int, typer.Option(min=1, help="Supporter turns before a conversation is cut.")] = 8,
    start_emotion: Annotated[float, typer.Option(min=0, max=100, help="Users' starting emotion.")] = 40,
    max_change: Annotated[int, typer.Option(min=1, help="Bound on the emotion change per turn.")] = 10,
    concurrency: Annotated[int, typer.Option(min=1, help="Conversations in flight at once.")] = 4,
    seed: Annotated[int, typer.Option(help="Seed for the users (same seed, same users).")] = 0,
):
    """Talk to simulated users with hidden emotions and report the Sentient-style score
    (`rubricrl simulate summarize FILE...` summarizes transcript files instead)."""
    if ctx.invoked_subcommand is not None:
        return
    if out is None:
        fail("missing option --out (the directory for transcripts.jsonl, summary.json and report.html); "
             "to summarize existing transcript files use `rubricrl simulate summarize FILE...`")
    import asyncio

    from rubricrl.llm.chat import make_chat_model
    from rubricrl.dialogue.persona import load_personas
    from rubricrl.dialogue.rollout import chat_policy, plan, run_conversations
    from rubricrl.dialogue.summary import summarize_simulation
    from rubricrl.reports.simulation import write_simulation_report
    from rubricrl.dialogue.user import SimulatedUser, UserSettings
    from rubricrl.llm.models import ModelNotFoundError

    refuse_clash([("--out", out)] + [(f"--out (its {name})", out / name)
                                     for name in ("transcripts.jsonl", "summary.json", "report.html")],
                 [("--personas", personas)])
    try:
        loaded = load_personas(personas)
    except (FileNotFoundError, ValueError) as exc:
        fail(f"--personas: {exc}")
    for problem in loaded.problems:
        err.print(f"[yellow]skipped persona[/] {problem}", highlight=False, soft_wrap=True)
    chosen = loaded.personas[:limit] if limit else loaded.personas
    if not chosen:
        fail("no usable persona; fix the problems above")
    try:
        policy_model = make_chat_model(policy)
        user_chat = policy_model if user_model == policy else make_chat_model(user_model)
    except (ValueError, ModelNotFoundError, RuntimeError, OSError) as exc:
        fail(f"cannot load a chat model: {exc}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "transcripts.jsonl"
    if path.exists() and path.stat().st_size:
        fail(f"{path} already has transcripts; choose a new --out directory")
    settings = UserSettings(max_turns=max_turns, start_emotion=start_emotion, max_change=max_change)
    slots = plan(chosen, repeats=repeats, seed=seed)
    with progress("conversations") as bar, path.open("w", encoding="utf-8") as handle:
        task = bar.add_task("simulate", total=len(slots))

        def done(transcript) -> None:
            handle.write(escape_line_separators(transcript.model_dump_json()) + "\n")
            handle.flush()
            bar.advance(task)

        transcripts = asyncio.run(run_conversations(slots, chat_policy(policy_model), SimulatedUser(user_chat, settings),
                                                    concurrency=concurrency, on_done=done))
    ordered = [transcripts[s.trajectory_id] for s in slots]
    summary = summarize_simulation(ordered, success_at=settings.success_at, failure_below=settings.failure_below)
    (out / "summary.json").write_text(json.dumps({**summary.to_dict(), "personas_skipped": len(loaded.problems)}, indent=2))
    report = write_simulation_report(out, ordered, summary)
    table = Table(title="rubricrl simulate", show_header=False)
    score = summary.score
    table.add_row("mean final emotion", f"{tenth(score.mean)}  95% CI [{tenth(score.ci_low)}, {tenth(score.ci_high)}]  "
                  f"n={score.n}" if score else "no conversation completed")
    table.add_row("successes (reached 100)", str(summary.successes))
    table.add_row("failures (below 10)", str(summary.failures))
    table.add_row("mean supporter turns", f"{summary.mean_turns:.2f}" if summary.mean_turns is not None else "-")
    table.add_row("conversations", f"{summary.conversations} ({summary.errors} ended in an error"
                  + (f": {summary.error_reasons}" if summary.errors else "") + ")")
    table.add_row("end reasons", ", ".join(f"{k} x{v}" for k, v in summary.end_reasons.items()))
    table.add_row("empty supporter replies", str(summary.empty_supporter_replies))
    table.add_row("personas skipped", str(len(loaded.problems)))
    console.print(table)
    console.print(f"wrote {path}, {out / 'summary.json'} and {report}", highlight=False)


def summarize(
    files: Annotated[list[Path], typer.Argument(help="Transcript files: rubricrl's transcripts.jsonl or SAGE's "
                                                     "*_result.jsonl (format detected per file).")],
    success_at: Annotated[float, typer.Option(help="A conversation ending at or above this emotion is a success.")] = 100,
    failure_below: Annotated[float, typer.Option(help="A conversation ending below this emotion is a failure.")] = 10,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the summaries to this JSON file.")] = None,
):
    """Summarize transcript files (rubricrl's or SAGE's released results): mean final emotion with a
    95% CI, successes and failures, one row per file."""
    from rubricrl.dialogue.summary import summarize_simulation
    from rubricrl.dialogue.transcripts import TranscriptFileError, read_transcript_file

    refuse_clash([("--json", json_out)], [(f"FILE {i + 1}", f) for i, f in enumerate(files)])
    rows = []
    for path in files:
        if not path.is_file():
            fail(f"{path}: no such file")
        try:
            fmt, transcripts = read_transcript_file(path, success_at=success_at, failure_below=failure_below)
        except TranscriptFileError as exc:
            fail(str(exc))
        summary = summarize_simulation(transcripts, success_at=success_at, failure_below=failure_below)
        rows.append({"file": str(path), "format": fmt, **summary.to_dict()})
    table = Table(title="rubricrl simulate summarize")
    for name in ("file", "format", "mean final emotion", "95% CI", "successes", "failures", "turns", "errors"):
        table.add_column(name, justify="left" if name in ("file", "format") else "right")
    for row in rows:
        score = row["score"]
        table.add_row(Path(row["file"]).name, row["format"], tenth(score["mean"]) if score else "-",
                      f"[{tenth(score['ci_low'])}, {tenth(score['ci_high'])}]" if score else "-", str(row["successes"]),
                      str(row["failures"]), f"{row['mean_turns']:.2f}" if row["mean_turns"] is not None else "-",
                      f"{row['errors']} of {row['conversations']}")
    console.print(table)
    console.print(f"success: final emotion >= {success_at:g}; failure: below {failure_below:g}; conversations that "
                  "ended in an error are counted, not scored", highlight=False)
    if json_out is not None:
        json_out.write_text(json.dumps({"success_at": success_at, "failure_below": failure_below, "files": rows},
                                       indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        console.print(f"wrote {json_out}", highlight=False)


def tenth(value: float) -> str:
    """`value` to one decimal, halves rounded up as SAGE's leaderboard does (31.75 -> 31.8, 28.95 -> 29.0)."""
    from decimal import ROUND_HALF_UP, Decimal

    return str(Decimal(repr(round(value, 9))).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))
