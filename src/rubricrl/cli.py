"""The `rubricrl` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from .loading import RubricError, criterion_summary, load_rubric
from .summary import RunSummary

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Rubric rewards for RL of language models: lint rubrics, judge, score.")
rubrics_app = typer.Typer(no_args_is_help=True, help="Check rubric files.")
app.add_typer(rubrics_app, name="rubrics")
judge_app = typer.Typer(no_args_is_help=True, help="Fit and inspect judges.")
app.add_typer(judge_app, name="judge")
tactics_app = typer.Typer(no_args_is_help=True, help="Tactic labels, stickiness and classifiers.")
app.add_typer(tactics_app, name="tactics")
console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@rubrics_app.command("lint")
def lint(files: Annotated[list[Path], typer.Argument(help="Rubric YAML/JSON files, or JSONL datasets with per-row rubrics.")]):
    """Validate rubrics; every problem is printed with file, line, field and the fix."""
    from .rows import InvalidRow, read_rows

    problems = 0
    for path in files:
        if not path.exists():
            err.print(f"{path}: file not found", highlight=False)
            problems += 1
            continue
        if path.suffix == ".jsonl":
            rows = bad = with_rubric = 0
            for row in read_rows(path):
                rows += 1
                if isinstance(row, InvalidRow):
                    bad += 1
                    err.print(str(row.problem), highlight=False, soft_wrap=True)
                elif row.rubric is not None:
                    with_rubric += 1
            problems += bad
            if not bad:
                console.print(f"[green]ok[/] {path}: {rows} rows, {with_rubric} with their own rubric")
            continue
        try:
            rubric = load_rubric(path)
        except RubricError as exc:
            problems += len(exc.problems)
            for problem in exc.problems:
                err.print(str(problem), highlight=False, soft_wrap=True)
            continue
        console.print(f"[green]ok[/] {path}: {len(rubric.criteria)} criteria, positive weight "
                      f"{rubric.positive_weight:g}, hash {rubric.content_hash()[:12]}", highlight=False)
        for c in rubric.criteria:
            console.print(f"  - {criterion_summary(c)}", highlight=False)
    if problems:
        fail(f"{problems} problem(s) found", code=1)


@app.command()
def score(
    data: Annotated[Path, typer.Option(help="JSONL rows: prompt (or messages), response, optional rubric.")],
    out: Annotated[Path, typer.Option(help="Output JSONL; rows already in it are skipped (resume).")],
    rubric: Annotated[Optional[Path], typer.Option(help="Rubric file or bundled name (empathy, crisis_safety) "
                                                        "for rows without their own rubric.")] = None,
    judge: Annotated[str, typer.Option(help="`rules`, `local[:MODEL]`, `exemplar[:DIR]`, `openai:URL?mode=...`, "
                                            "`llamacpp[:FILE.gguf]`, or a `+` mix (default: bundled exemplar "
                                            "models, then the embedded LLM).")] = "exemplar+local",
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Bypass the SQLite verdict cache.")] = False,
    cache_path: Annotated[Optional[Path], typer.Option(help="Verdict cache file (default: user cache dir).")] = None,
    threshold: Annotated[float, typer.Option(help="P(yes) at or above which a model verdict is `met`.")] = 0.5,
    batch_size: Annotated[int, typer.Option(min=1, help="Rows judged together (shared-prefix batching).")] = 16,
    summary_json: Annotated[Optional[Path], typer.Option(help="Where to write the summary (default: OUT with .summary.json).")] = None,
):
    """Judge every row against its rubric and write verdicts, scores and a summary."""
    from .batch_scoring import count_lines, read_results, score_file
    from .judges import JudgeSpecError, make_judge
    from .models import ModelNotFoundError
    from .summary import summarize

    if not data.is_file():
        fail(f"--data {data}: file not found")
    shared = None
    if rubric is not None:
        from .loading import bundled_rubric_path

        if not rubric.exists() and bundled_rubric_path(str(rubric)).is_file():
            rubric = bundled_rubric_path(str(rubric))
        try:
            shared = load_rubric(rubric)
        except RubricError as exc:
            fail(f"--rubric is not valid:\n{exc}")
    try:
        the_judge = make_judge(judge, cache=not no_cache, cache_path=cache_path, threshold=threshold)
    except (JudgeSpecError, ModelNotFoundError, OSError) as exc:
        fail(f"--judge {judge}: {exc}")
    total = count_lines(data)
    columns = (TextColumn("scoring"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    try:
        with Progress(*columns, console=err, transient=False) as progress:
            task = progress.add_task("rows", total=total)
            result = score_file(data, out, the_judge, shared, batch_size=batch_size,
                                on_rows=lambda n: progress.advance(task, n))
    except ValueError as exc:
        fail(str(exc))
    summary = summarize(read_results(out))
    target = summary_json or out.with_name(out.stem + ".summary.json")
    target.write_text(json.dumps(summary.to_dict(), indent=2))
    print_summary(summary)
    exemplar = getattr(the_judge, "exemplar_judge", None)
    if exemplar is not None:
        console.print(f"judge {exemplar.judge_id}: {exemplar.stats.verdicts} verdicts", highlight=False)
    model = getattr(the_judge, "model_judge", None)
    if model is not None:
        hits = getattr(model, "hits", None)
        console.print(f"judge {model.judge_id}: {model.stats.model_calls} model calls, {model.stats.tokens} tokens"
                      + (f", cache hits {hits}, misses {model.misses}" if hits is not None else ""), highlight=False)
    endpoint = getattr(getattr(model, "inner", model), "endpoint", None)
    if endpoint is not None:
        e = endpoint.stats
        console.print(f"endpoint {endpoint.config.base_url}: {e.calls} calls, {e.retries} retries, "
                      f"{e.prompt_tokens}+{e.completion_tokens} tokens, cost {e.cost:.4f}"
                      + (f", failures {e.errors}" if e.errors else ""), highlight=False)
    console.print(f"wrote {result.written} rows to {out} (skipped {result.skipped_existing} already there); "
                  f"summary in {target}", highlight=False)


@judge_app.command("fit")
def judge_fit(
    rubric: Annotated[Path, typer.Option(help="Rubric file (bundled name or path); criteria may carry `examples`.")],
    out: Annotated[Path, typer.Option(help="Directory for the fitted exemplar judge.")],
    labels: Annotated[Optional[Path], typer.Option(help="JSONL of {criterion_id, response, label, rubric?}.")] = None,
    min_examples: Annotated[int, typer.Option(min=2, help="Examples needed of each class to fit a criterion.")] = 8,
    folds: Annotated[int, typer.Option(min=2, help="Cross-validation folds.")] = 5,
):
    """Fit one calibrated classifier per model-judged criterion on sentence embeddings of examples."""
    from .exemplar_fit import collect_examples, fit_exemplars
    from .loading import bundled_rubric_path

    path = rubric if rubric.exists() else bundled_rubric_path(str(rubric))
    try:
        the_rubric = load_rubric(path)
        examples, warnings = collect_examples(the_rubric, labels, rubric_name=path.stem)
    except RubricError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot read: {exc}")
    reports = fit_exemplars(the_rubric, examples, out, min_per_class=min_examples, folds=folds)
    table = Table(title=f"exemplar judge fit ({folds}-fold cross-validation)")
    for col in ("criterion", "met", "unmet", "status", "CV AUC", "balanced acc", "threshold"):
        table.add_column(col)
    for r in reports:
        table.add_row(r.criterion_id, str(r.n_met), str(r.n_unmet), r.status,
                      f"{r.auc:.3f}" if r.auc is not None else "-",
                      f"{r.balanced_accuracy:.3f}" if r.balanced_accuracy is not None else "-",
                      f"{r.threshold:.2f}" if r.threshold is not None else "-")
    console.print(table)
    for note in warnings + [f"{r.criterion_id}: {w}" for r in reports for w in r.warnings]:
        err.print(f"[yellow]warning[/] {note}", highlight=False)
    fitted = sum(r.status == "fitted" for r in reports)
    console.print(f"fitted {fitted} of {len(reports)} model-judged criteria into {out}; use it with "
                  f"--judge exemplar:{out}+local", highlight=False)


@tactics_app.command("classify")
def tactics_classify(
    in_: Annotated[Path, typer.Option("--in", help="Conversations JSONL: {id, messages: [{role, content}]}.")],
    out: Annotated[Path, typer.Option(help="Labeled conversations JSONL.")],
    classifier: Annotated[Optional[Path], typer.Option(help="Fitted classifier dir (default: bundled esconv8).")] = None,
    threshold: Annotated[float, typer.Option(help="Probability for a tactic to be assigned.")] = 0.5,
    judge: Annotated[Optional[str], typer.Option(help="Use a judge instead of the classifier, e.g. local:MODEL.")] = None,
    taxonomy: Annotated[str, typer.Option(help="Taxonomy for --judge (bundled name or YAML).")] = "esconv8",
):
    """Label every supporter (assistant) turn with its tactics and their probabilities."""
    from .judges import make_judge
    from .tactics.classifier import TacticClassifier
    from .tactics.judge_classifier import JudgeTacticClassifier
    from .tactics.labeling import label_conversations
    from .tactics.taxonomy import load_taxonomy

    try:
        if judge is not None:
            model = JudgeTacticClassifier(load_taxonomy(taxonomy), make_judge(judge))
        else:
            model = TacticClassifier.load(classifier)
        n = label_conversations(in_, out, model, threshold)
    except (RubricError, FileNotFoundError, ValueError) as exc:  # JudgeSpecError is a ValueError
        fail(str(exc))
    console.print(f"labeled {n} conversations into {out} ({model.taxonomy or 'custom'} tactics)", highlight=False)


@tactics_app.command("stickiness")
def tactics_stickiness(in_: Annotated[Path, typer.Option("--in", help="Labeled conversations JSONL.")]):
    """P(a tactic recurs at the next supporter turn), per tactic and overall, and Jaccard overlap."""
    from .tactics.labeling import file_stickiness

    try:
        s = file_stickiness(in_)
    except (RubricError, FileNotFoundError) as exc:
        fail(str(exc))
    if s.overall is None:
        fail("no pair of consecutive supporter turns in the file")
    console.print(f"stickiness {s.overall:.3f} over {s.pairs} consecutive supporter-turn pairs; "
                  f"mean Jaccard {s.jaccard:.3f}", highlight=False)
    table = Table(title="per tactic")
    for col in ("tactic", "stickiness", "share of turns"):
        table.add_column(col)
    for tactic, share in s.distribution.items():
        sticky = s.per_tactic.get(tactic)
        table.add_row(tactic, f"{sticky:.3f}" if sticky is not None else "-", f"{share:.1%}")
    console.print(table)
    console.print(json.dumps({"overall": s.overall, "jaccard": s.jaccard, "pairs": s.pairs,
                              "per_tactic": s.per_tactic, "distribution": s.distribution}), highlight=False)


@tactics_app.command("fit")
def tactics_fit(
    data: Annotated[str, typer.Option(help="Labeled JSONL {text, tactics|tactic, context?} or a taxonomy name/YAML.")],
    out: Annotated[Path, typer.Option(help="Directory for the fitted classifier.")],
    folds: Annotated[int, typer.Option(min=2)] = 5,
):
    """Fit the tactic classifier; report cross-validated accuracy, macro-F1 and the confusion matrix."""
    from .tactics.classifier import TacticClassifier, cross_validate
    from .tactics.labeling import fit_examples

    try:
        examples, names, taxonomy = fit_examples(data)
        report = cross_validate(examples, names, folds=folds)
        TacticClassifier.fit(examples, names, taxonomy=taxonomy).save(out)
    except (RubricError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    console.print(f"{len(examples)} examples, {len(names)} tactics: {folds}-fold accuracy {report['accuracy']:.3f}, "
                  f"macro-F1 {report['macro_f1']:.3f}", highlight=False)
    table = Table(title="confusion matrix (rows: gold, columns: predicted)")
    table.add_column("gold")
    for j, _ in enumerate(names):
        table.add_column(str(j), justify="right")
    table.add_column("F1", justify="right")
    for i, name in enumerate(names):
        table.add_row(f"{i} {name}", *[str(v) for v in report["confusion"][i]], f"{report['per_class_f1'][name]:.2f}")
    console.print(table)
    console.print(f"saved to {out}", highlight=False)


@app.command()
def train(
    config: Annotated[Optional[Path], typer.Argument(help="YAML config; without one, the embedded CPU demo runs.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a config key: --set grpo.beta=0.04")] = None,
    resume: Annotated[Optional[Path], typer.Option(help="Continue the run in this directory from its last checkpoint.")] = None,
):
    """Train a policy with GRPO (TRL) against rubric rewards, evaluate before/after, write a report."""
    from .loading import RubricError
    from .train.config import ConfigError, load_config
    from .train.run import RunDirError, resume_config, run_training

    try:
        if resume is not None:
            if config is not None or set_:
                fail("--resume continues a run with its saved config.yaml; do not pass a config or --set")
            cfg = resume_config(resume)
        else:
            cfg = load_config(config, set_ or [])
    except (ConfigError, RunDirError) as exc:
        fail(str(exc))
    try:
        summary = run_training(cfg, resume=resume is not None, log=lambda m: console.print(m, highlight=False))
    except (RunDirError, RubricError, FileNotFoundError) as exc:
        fail(str(exc))
    table = Table(title="held-out score (evaluation judge)")
    for col in ("", "mean", "95% CI", "n", "judge errors"):
        table.add_column(col)
    for label in ("before", "after"):
        part = summary.get(label) or {}
        e = part.get("estimate")
        if e:
            table.add_row(label, f"{e['mean']:.3f}", f"[{e['ci_low']:.3f}, {e['ci_high']:.3f}]", str(e["n"]),
                          str(part["errors"]))
    console.print(table)
    console.print(f"{summary['steps']} steps in {summary['seconds']} s; report: {summary['report']}", highlight=False)


@app.command("llama-server")
def llama_server(
    model: Annotated[Optional[str], typer.Option(help="A .gguf file (default: the embedded SmolLM2-135M).")] = None,
    host: Annotated[str, typer.Option(help="Interface to bind; keep loopback unless you secure it.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    parallel: Annotated[int, typer.Option(min=1, help="Concurrent sequences (llama.cpp slots).")] = 4,
    context: Annotated[int, typer.Option(min=256, help="Context tokens per slot.")] = 4096,
    threads: Annotated[int, typer.Option(min=1, help="CPU threads.")] = 2,
):
    """Serve a GGUF model with llama.cpp's OpenAI-compatible API until interrupted (judge it with
    `--judge openai:http://HOST:PORT/v1`)."""
    import time

    from .llama_server import LlamaServer
    from .models import ModelNotFoundError

    try:
        server = LlamaServer(model, host=host, port=port, parallel=parallel, context=context, threads=threads).start()
    except (ModelNotFoundError, RuntimeError) as exc:
        fail(str(exc))
    console.print(f"serving {server.model_path.name} at {server.url} (Ctrl-C to stop)", highlight=False)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A training run directory.")]):
    """(Re)write RUN_DIR/report.html from the run's files."""
    from .report import write_report

    try:
        path = write_report(run_dir)
    except FileNotFoundError as exc:
        fail(str(exc))
    console.print(f"wrote {path}", highlight=False)


def print_summary(s: RunSummary) -> None:
    head = Table(title="rubricrl score", show_header=False)
    head.add_row("rows", f"{s.rows} ({s.scored} scored, {s.unscored} unscored, {s.invalid} invalid)")
    if s.score:
        head.add_row("score (mean, clipped)", f"{s.score.mean:.3f}  95% CI [{s.score.ci_low:.3f}, "
                     f"{s.score.ci_high:.3f}]  bootstrap std {s.score.std:.3f}  n={s.score.n}")
    else:
        head.add_row("score", "no row could be scored")
    if s.mean_coverage is not None:
        head.add_row("coverage", f"{s.mean_coverage:.1%} of criteria decided (met/unmet)")
    head.add_row("hard-rule gated rows", str(s.gated_rows))
    reasons = ", ".join(f"{k} x{v}" for k, v in s.error_reasons.items())
    head.add_row("judge errors", f"{s.errors} of {s.verdicts} verdicts" + (f" ({reasons})" if reasons else ""))
    console.print(head)
    if s.criteria:
        table = Table(title="per criterion")
        for col in ("criterion", "pass rate", "met", "unmet", "error", "skipped"):
            table.add_column(col, justify="left" if col == "criterion" else "right")
        for cid, c in list(s.criteria.items())[:40]:
            rate = f"{c.pass_rate:.1%}" if c.pass_rate is not None else "-"
            table.add_row(cid, rate, str(c.met), str(c.unmet), str(c.error), str(c.skipped))
        console.print(table)
    if s.tags:
        console.print("per tag: " + ", ".join(f"{t} {v:.3f}" for t, v in s.tags.items()), highlight=False)
    for problem in s.invalid_examples:
        err.print(f"[yellow]invalid row[/] {problem}", highlight=False, soft_wrap=True)


if __name__ == "__main__":
    app()
