"""`rubricrl judge`: fit an exemplar judge, measure a judge against human labels (agree), fit
thresholds on its p_met (calibrate), probe it with responses that should meet nothing (audit)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from rubricrl.cli.common import console, err, fail, judge_or_fail, load_rubric_option, progress, refuse_clash, rubric_path
from rubricrl.cli.options import (DEFAULT_JUDGE, CachePath, LabelBatchSize, NoCache, Threshold, calibration_option,
                                  judge_option, rubric_option)
from rubricrl.core.jsonl import write_jsonl
from rubricrl.core.problems import RubricError
from rubricrl.rubrics.loading import load_rubric


class ThresholdRule(str, Enum):
    """judge_tools.fit.THRESHOLD_RULES"""

    calibrated = "calibrated"
    balanced = "balanced"


def judge_fit(
    rubric: Annotated[Path, rubric_option("Rubric file (bundled name or path); criteria may carry `examples`.")],
    out: Annotated[Path, typer.Option(help="Directory for the fitted exemplar judge.")],
    labels: Annotated[Optional[list[Path]], typer.Option(
        help="JSONL of {criterion_id, response, label, context?, rubric?} (repeatable). `context` is what the "
             "person said; when every example has one, the models are pair-aware (they also see how close the "
             "reply is to it).")] = None,
    min_examples: Annotated[int, typer.Option(min=2, help="Examples needed of each class to fit a criterion.")] = 8,
    folds: Annotated[int, typer.Option(min=2, help="Cross-validation folds.")] = 5,
    threshold_rule: Annotated[ThresholdRule, typer.Option(
        help="How p_met becomes met/unmet: `calibrated` decides at p_met >= 0.5 (right most often); `balanced` "
             "picks the threshold with the best out-of-fold balanced accuracy (calls a rare class far more "
             "often).")] = ThresholdRule.calibrated,
):
    """Fit one calibrated classifier per model-judged criterion on sentence embeddings of examples (and, when
    every example has a context, the reply's similarity to it)."""
    from rubricrl.judge_tools.fit import choose_features, collect_examples, fit_exemplars
    from rubricrl.judges.exemplar import MANIFEST, PAIR_AWARE

    path = rubric_path(rubric)
    refuse_clash([("--out", out), (f"--out (its {MANIFEST})", out / MANIFEST)],
                 [("--rubric", path)] + [("--labels", p) for p in labels or []])
    try:
        the_rubric = load_rubric(path)
        examples, warnings = collect_examples(the_rubric, labels, rubric_name=path.stem)
    except RubricError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot read: {exc}")
    features, why = choose_features(examples)
    warnings += [why] if why else []
    reports = fit_exemplars(the_rubric, examples, out, min_per_class=min_examples, folds=folds,
                            threshold_rule=threshold_rule.value, features=features)
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
    seen = ("the reply and its similarity to what the person said (pair-aware)" if features == PAIR_AWARE
            else "the reply alone")
    console.print(f"fitted {fitted} of {len(reports)} model-judged criteria into {out} (the models see {seen}); "
                  f"use it with --judge exemplar:{out}+local", highlight=False)


def judge_fit_gate(
    out: Annotated[Path, typer.Option(help="Directory for the fitted gate (use it with --judge gate:DIR+...).")],
    examples: Annotated[Optional[list[Path]], typer.Option(
        "--examples", help="JSONL of {prompt, reply, coherent, deflects?} (repeatable; default: the bundled "
                           "examples the bundled gate was fitted on).")] = None,
    lm: Annotated[Optional[str], typer.Option(help="Also use the reply's log-probabilities under this reference "
                                                   "model (e.g. smollm2-135m, a hub id or a directory). Off by "
                                                   "default: see docs/judges.md.")] = None,
    folds: Annotated[int, typer.Option(min=2, help="Cross-validation folds.")] = 5,
):
    """Fit the quality gate: a coherence and a deflection model on labelled (prompt, reply) pairs."""
    from rubricrl.judge_tools.gate_fit import BUNDLED_EXAMPLES, fit_gate, read_gate_examples
    from rubricrl.judges.gate import MANIFEST

    sources = examples or [BUNDLED_EXAMPLES]
    refuse_clash([("--out", out), (f"--out (its {MANIFEST})", out / MANIFEST)], [("--examples", p) for p in sources])
    rows = []
    try:
        for path in sources:
            rows += read_gate_examples(path)
    except RubricError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot read: {exc}")
    try:
        reports = fit_gate(rows, out, lm=lm, folds=folds)
    except ValueError as exc:
        fail(str(exc))
    table = Table(title=f"quality gate fit on {len(rows)} examples ({folds}-fold cross-validation)")
    for col in ("model", "examples", "true", "CV AUC", "balanced acc", "threshold", "C"):
        table.add_column(col)
    for r in reports:
        table.add_row(r.head, str(r.n), str(r.positives), f"{r.cv_auc:.3f}", f"{r.balanced_accuracy:.3f}",
                      f"{r.threshold:.2f}", f"{r.C:g}")
    console.print(table)
    console.print(f"gate written to {out}; use it with --judge gate:{out}+exemplar+local", highlight=False)


def _judged_labels(labels: Path, judge: str, *, no_cache: bool, cache_path: Path | None, threshold: float,
                   batch_size: int, calibration: Path | None = None):
    """Read a label file (bad lines reported, not fatal), build the judge, judge every label with a progress bar."""
    from rubricrl.judge_tools.agreement import judge_labels, read_labels

    if not labels.is_file():
        fail(f"--labels {labels}: file not found")
    try:
        items, problems = read_labels(labels)
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"--labels {labels}: cannot read: {exc}")
    for problem in problems:
        err.print(f"[yellow]skipped line[/] {problem}", highlight=False)
    if not items:
        fail(f"--labels {labels}: no usable label ({len(problems)} bad lines); see docs/agreement.md for the format")
    the_judge = judge_or_fail(judge, cache=not no_cache, cache_path=cache_path, threshold=threshold,
                              calibration=calibration)
    with progress("judging labels") as bar:
        task = bar.add_task("labels", total=len(items))
        verdicts = judge_labels(the_judge, items, batch_size=batch_size, on_labels=lambda n: bar.advance(task, n))
    return the_judge, items, problems, verdicts


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def judge_agree(
    labels: Annotated[Path, typer.Option(help="JSONL of human labels: {id?, prompt, response, criterion, label, "
                                               "tags?} (docs/agreement.md).")],
    judge: Annotated[str, judge_option("Judge spec, as for `rubricrl score` (also `vote:A|B`, `mean:A|B`).")]
    = DEFAULT_JUDGE,
    out: Annotated[Path | None, typer.Option(help="Directory for agreement.json, agreement.html and "
                                                     "verdicts.jsonl (default: LABELS_agreement/ beside the labels).")] = None,
    calibration: Annotated[Path | None, calibration_option("Measure the judge with this calibration applied.")] = None,
    no_cache: NoCache = False,
    cache_path: CachePath = None,
    threshold: Threshold = 0.5,
    batch_size: LabelBatchSize = 16,
):
    """Measure a judge against human labels, per criterion, per tag and overall.

    Precision, recall and F1 of both classes, balanced F1, Cohen's kappa, AUC of p_met, and a reliability diagram."""
    from rubricrl.judge_tools.agreement import agreement, verdict_records
    from rubricrl.reports.agreement import write_report

    out_dir = out or labels.with_name(labels.stem + "_agreement")
    refuse_clash([("--out", out_dir)] + [(f"--out (its {name})", out_dir / name)
                                         for name in ("agreement.json", "agreement.html", "verdicts.jsonl")],
                 [("--labels", labels), ("--calibration", calibration), ("--cache-path", cache_path)])
    the_judge, items, problems, verdicts = _judged_labels(labels, judge, no_cache=no_cache, cache_path=cache_path,
                                                          threshold=threshold, batch_size=batch_size,
                                                          calibration=calibration)
    result = agreement(items, verdicts, judge_id=the_judge.judge_id, labels_file=str(labels), problems=problems)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "agreement.json").write_text(json.dumps(result, indent=1, ensure_ascii=False), encoding="utf-8")
    write_jsonl(out_dir / "verdicts.jsonl", verdict_records(items, verdicts))
    write_report(result, out_dir / "agreement.html")
    table = Table(title=f"agreement of {the_judge.judge_id} with {labels}")
    columns = ("", "labels", "errors", "skipped", "P met", "R met", "F1 met", "F1 unmet", "balanced F1", "kappa", "AUC")
    keys = ("n_labels", "n_errors", "n_skipped", "precision_met", "recall_met", "f1_met", "f1_unmet", "balanced_f1",
            "kappa", "auc")
    for col in columns:
        table.add_column(col, justify="left" if not col else "right", overflow="fold")
    rows = [("overall", result["overall"])] + [(m["text"][:70], m) for m in result["by_criterion"].values()]
    rows += [(f"tag {tag}", m) for tag, m in result["by_tag"].items()]
    for i, (name, m) in enumerate(rows):
        table.add_row(name, *(_fmt(m[k]) for k in keys), end_section=i == 0)
    console.print(table)
    console.print("balanced F1 = mean of the met-class F1 and the unmet-class F1; judge errors and skipped verdicts "
                  "are excluded from the metrics", highlight=False)
    if problems:
        err.print(f"[yellow]warning[/] {len(problems)} label lines were not used (listed above and in agreement.json)",
                  highlight=False)
    console.print(f"wrote {out_dir / 'agreement.json'}, {out_dir / 'agreement.html'}, {out_dir / 'verdicts.jsonl'}",
                  highlight=False)


def judge_calibrate(
    labels: Annotated[Path, typer.Option(help="JSONL of human labels (as for `judge agree`).")],
    out: Annotated[Path, typer.Option(help="Where to write calibration.json.")],
    judge: Annotated[str, judge_option("Judge spec whose model judge (or ensemble) is calibrated.")] = DEFAULT_JUDGE,
    by: Annotated[str, typer.Option(help="Thresholds per `criterion` (normalised text) or per `tag`.")] = "criterion",
    heldout: Annotated[float, typer.Option(min=0.0, max=0.9, help="Fraction of labels held out (stratified by "
                                                                  "criterion and label, seeded) to measure the gain.")] = 0.3,
    seed: Annotated[int, typer.Option(help="Seed of the held-out split.")] = 0,
    min_labels: Annotated[int, typer.Option(min=2, help="Fit labels a key needs (and 3 of each class) for its own "
                                                        "threshold; others use the global one.")] = 20,
    no_cache: NoCache = False,
    cache_path: CachePath = None,
    batch_size: LabelBatchSize = 16,
):
    """Fit per-criterion (or per-tag) thresholds on p_met that maximise balanced F1.

    Prints the held-out agreement before and after; use the file with `rubricrl score --calibration FILE`."""
    from rubricrl.judge_tools.calibrate import calibrate

    if by not in ("criterion", "tag"):
        fail(f"--by {by}: use `criterion` or `tag`")
    refuse_clash([("--out", out)], [("--labels", labels), ("--cache-path", cache_path)])
    the_judge, items, _, verdicts = _judged_labels(labels, judge, no_cache=no_cache, cache_path=cache_path,
                                                   threshold=0.5, batch_size=batch_size)
    model = the_judge.model_judge
    if model is None:
        fail(f"--judge {judge} has no model judge to calibrate (its verdicts come from rules or exemplar models, "
             "which have their own thresholds); use e.g. --judge local")
    outside = sum(v.decided and v.judge_id != model.judge_id for v in verdicts)
    if outside:
        err.print(f"note: {outside} labels were decided by rules or exemplar models, not by {model.judge_id}; they "
                  "are not used to fit", highlight=False)
    result = calibrate(items, verdicts, judge_id=model.judge_id, by=by, heldout=heldout, seed=seed,
                       min_labels=min_labels, calibratable=lambda v: v.judge_id == model.judge_id)
    result.save(out)
    table = Table(title=f"thresholds ({by}; fitted on {result.fitted_on} labels; global {result.default:.3f})")
    for col in (by, "fit n", "met", "threshold", "fit bal.F1", "held-out bal.F1 before -> after"):
        table.add_column(col, overflow="fold")
    held_keys = (result.heldout or {}).get("by_key", {})
    for key, info in result.keys.items():
        h = held_keys.get(key)
        table.add_row(info.name[:70], str(info.n), str(info.n_met),
                      f"{result.thresholds[key]:.3f}" if info.fitted else f"global ({result.default:.3f})",
                      _fmt(info.fit_balanced_f1),
                      f"{_fmt(h['balanced_f1_before'])} -> {_fmt(h['balanced_f1_after'])} (n={h['n']})" if h else "-")
    console.print(table)
    if result.heldout:
        before, after = result.heldout["before"], result.heldout["after"]
        held = Table(title=f"held-out agreement ({result.heldout['n']} labels, {before['n_errors']} judge errors)")
        for col in ("", "before", "after", "change"):
            held.add_column(col, justify="right")
        for key in ("balanced_f1", "f1_met", "f1_unmet", "precision_met", "recall_met", "kappa", "auc"):
            change = after[key] - before[key] if after[key] is not None and before[key] is not None else None
            held.add_row(key, _fmt(before[key]), _fmt(after[key]), "-" if change is None else f"{change:+.3f}")
        console.print(held)
    else:
        console.print("no held-out labels (--heldout 0): no before/after comparison", highlight=False)
    console.print(f"wrote {out}; use it with: rubricrl score ... --judge {judge} --calibration {out}", highlight=False)


def judge_audit(
    judge: Annotated[str, judge_option("Judge spec to audit (as in `rubricrl score`).")],
    rubric: Annotated[Path | None, rubric_option("Rubric file or bundled name for every row (default: the "
                                                 "bundled prompts' own rubrics; a --data row's own wins).")] = None,
    data: Annotated[Path | None, typer.Option(help="JSONL rows: prompt (or messages), optional rubric, reference, "
                                                      "response (a good reply, for the first_sentence probe).")] = None,
    limit: Annotated[int, typer.Option(min=0, help="Rows to audit: a spread of N bundled prompts, or the first N "
                                                   "--data rows (0: all).")] = 8,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the full audit as JSON here.")] = None,
    no_cache: NoCache = False,
    cache_path: CachePath = None,
):
    """Probe a judge with responses that should meet no criterion (master keys, empty, fake verdicts,
    injections...) and print its false-positive rate without and with the defences (docs/judges.md)."""
    from rubricrl.judge_tools import probes
    from rubricrl.judges.defences import Defences

    refuse_clash([("--json", json_out)], [("--data", data), ("--rubric", rubric_path(rubric) if rubric else None),
                                          ("--cache-path", cache_path)])
    shared = load_rubric_option(rubric) if rubric is not None else None
    if data is not None:
        if not data.is_file():
            fail(f"--data {data}: file not found")
        items, problems = probes.file_items(data, limit, shared)
        for problem in problems:
            err.print(f"[yellow]skipped row[/] {problem}", highlight=False)
        if not items:
            fail(f"--data {data}: no usable row")
    else:
        items = probes.bundled_items(limit, shared)
    # one judge (one model load, one server) behind two sets of defences
    without = judge_or_fail(judge, cache=not no_cache, cache_path=cache_path, defences=Defences.off())
    with_ = without.with_defences(Defences())
    with progress("auditing") as bar:
        task = bar.add_task("judge calls", total=2 * len(items))
        result = probes.run_audit(without, with_, items, on_step=lambda: bar.advance(task))

    def pct(tally) -> str:
        return "-" if tally.fpr is None else f"{tally.fpr:.1%}"

    lines = list(result.probes.values())
    skips = any(line.without.skipped or line.with_.skipped for line in lines)

    def mean_p(line) -> str:
        return "/".join("-" if t.mean_p is None else f"{t.mean_p:.2f}" for t in (line.without, line.with_))

    def row(line, *names) -> list[str]:
        return [*names, str(line.without.pairs), pct(line.without), pct(line.with_), mean_p(line),
                f"{line.without.errors}/{line.with_.errors}"] + (
                    [f"{line.without.skipped}/{line.with_.skipped}"] if skips else [])

    numbers = ("pairs", "FPR off", "FPR on", "p_met off/on", "errors") + (("skipped",) if skips else ())
    table = Table(title=f"judge audit: {result.judge_id}, {result.rows} prompts, {result.criteria} positive "
                        "model-judged criteria (off / on: without / with defences)")
    for col in ("probe", "family", *numbers):
        table.add_column(col, justify="left" if col in ("probe", "family") else "right",
                         overflow="fold" if col in ("probe", "family") else "ellipsis",
                         no_wrap=col not in ("probe", "family"))
    for line in lines:
        table.add_row(*row(line, line.name, line.family))
    console.print(table)
    table = Table(title="per family")
    for col in ("family", *numbers):
        table.add_column(col, justify="left" if col == "family" else "right", no_wrap=col != "family")
    for line in result.family_lines().values():
        table.add_row(*row(line, line.family))
    table.add_row(*row(result.aggregate(), f"overall (all but {', '.join(probes.EXCLUDED_FROM_OVERALL)})"),
                  style="bold")
    table.add_row(*row(result.aggregate(["master_key"], "master_key"), "master keys"), style="bold")
    console.print(table)
    keys = result.aggregate(["master_key"], "master_key")
    target = "" if keys.with_.fpr is None else (" (target <= 5%: " + ("met" if keys.with_.fpr <= 0.05 else "NOT met")
                                                 + ")")
    console.print(f"master-key FPR: {pct(keys.without)} without, {pct(keys.with_)} with defences{target}",
                  highlight=False)
    s = result.defence_stats
    console.print(f"defences ({result.defences}): {s.get('prechecked', 0)} responses pre-checked "
                  f"{s.get('precheck_reasons', {})}, {s.get('neutralised', 0)} neutralised "
                  f"{s.get('neutralised_kinds', {})}, {s.get('downgraded', 0)} verdicts downgraded", highlight=False)
    console.print("FPR = met / (met + unmet) over (probe, positive-weight model-judged criterion) pairs; errors and "
                  "skipped verdicts are excluded and counted; criteria with a declarative check are excluded (no "
                  "model decides them). p_met: the mean over the same pairs (what a soft reward pays).",
                  highlight=False)
    if result.criteria == 0:
        err.print(f"[yellow]note[/] --judge {judge} sends no positive criterion of these rubrics to a model judge, so "
                  "there is nothing to audit (FPR '-'); use e.g. --judge local or exemplar+local", highlight=False)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"spec": judge, **result.to_dict()}, indent=2, ensure_ascii=False),
                            encoding="utf-8")
        console.print(f"wrote {json_out}", highlight=False)
