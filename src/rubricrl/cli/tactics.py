"""`rubricrl tactics`: label supporter turns with tactics, measure their stickiness, fit the classifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from rubricrl.cli.common import console, fail, progress, refuse_clash
from rubricrl.cli.options import judge_option
from rubricrl.core.problems import RubricError


def tactics_classify(
    in_: Annotated[Path, typer.Option("--in", help="Conversations JSONL {id, messages: [{role, content}]}, or ESConv's "
                                      "TSV as distributed (its dialogues rebuilt, its labels kept as gold_tactics).")],
    out: Annotated[Path, typer.Option(help="Labeled conversations JSONL.")],
    classifier: Annotated[Optional[Path], typer.Option(help="Fitted classifier dir (default: bundled esconv8).")] = None,
    threshold: Annotated[float, typer.Option(help="Probability for a tactic to be assigned.")] = 0.5,
    judge: Annotated[Optional[str], judge_option("Use a judge instead of the classifier, e.g. local:MODEL.")] = None,
    taxonomy: Annotated[str, typer.Option(help="Taxonomy for --judge (bundled name or YAML).")] = "esconv8",
):
    """Label every supporter (assistant) turn with its tactics and their probabilities (all turns
    embedded in batches, with a progress bar)."""
    from rubricrl.judges import make_judge
    from rubricrl.tactics.classifier import TacticClassifier
    from rubricrl.tactics.judge_classifier import JudgeTacticClassifier
    from rubricrl.tactics.labeling import label_rows, read_conversations
    from rubricrl.tactics.taxonomy import load_taxonomy

    refuse_clash([("--out", out)], [("--in", in_), ("--taxonomy", Path(taxonomy) if judge is not None else None)])
    try:
        if judge is not None:
            model = JudgeTacticClassifier(load_taxonomy(taxonomy), make_judge(judge))
        else:
            model = TacticClassifier.load(classifier)
        rows = read_conversations(in_)
        with progress("embedding texts" if judge is None else "judging turns") as bar:
            task = bar.add_task("labeling", total=None)
            n, turns = label_rows(rows, out, model, threshold,
                                  progress=lambda done, total: bar.update(task, completed=done, total=total))
    except (RubricError, FileNotFoundError, ValueError) as exc:  # JudgeSpecError is a ValueError
        fail(str(exc))
    console.print(f"labeled {turns} supporter turns of {n} conversations into {out} "
                  f"({model.taxonomy or 'custom'} tactics)", highlight=False)


def tactics_stickiness(in_: Annotated[Path, typer.Option("--in", help="Labeled conversations JSONL.")]):
    """P(a tactic recurs at the next supporter turn), per tactic and overall, and Jaccard overlap."""
    from rubricrl.tactics.labeling import file_stickiness

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


def tactics_fit(
    data: Annotated[str, typer.Option(help="Labeled JSONL {text, tactics|tactic, context?, previous?}, ESConv's TSV as "
                                           "distributed, or a taxonomy name/YAML.")],
    out: Annotated[Path, typer.Option(help="Directory for the fitted classifier.")],
    folds: Annotated[int, typer.Option(min=2)] = 5,
    taxonomy: Annotated[Optional[str], typer.Option(
        help="Map the data's labels onto this taxonomy's names and aliases (bundled name or YAML); an unknown label "
             "is an error. ESConv TSV files use esconv8 unless told otherwise.")] = None,
):
    """Fit the tactic classifier; report cross-validated accuracy, macro-F1 and the confusion matrix."""
    from rubricrl.tactics.classifier import TacticClassifier, cross_validate
    from rubricrl.tactics.labeling import fit_examples

    refuse_clash([("--out", out)] + [(f"--out (its {name})", out / name) for name in ("weights.npz", "classifier.json")],
                 [("--data", Path(data)), ("--taxonomy", Path(taxonomy) if taxonomy else None)])
    try:
        examples, names, scheme = fit_examples(data, taxonomy)
        with console.status(f"fitting on {len(examples)} examples ({folds}-fold cross-validation, then all)"):
            report = cross_validate(examples, names, folds=folds)
            TacticClassifier.fit(examples, names, taxonomy=scheme).save(out)
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
