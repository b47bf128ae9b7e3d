"""Agreement between a judge and human labels: reading label files, judging them, and the metrics.

A label file is JSONL, one human label per line (docs/agreement.md):
`{"id"?, "prompt": str | [{role, content}], "response": str, "criterion": str | {criterion dict},
"label": true | false | "met" | "unmet", "tags"?: [str]}`.
A bad line is reported as a `Problem` (file:line, field, fix) and skipped; the other lines are used.

Metrics compare the judge's met/unmet with the human label on decided verdicts only: `error`
and `skipped` verdicts are counted and reported, never treated as unmet.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from rubricrl.core.extras import require

require("sklearn", extra="local", feature="judge agreement metrics")
from sklearn.metrics import (  # noqa: E402 - after the check that names the extra to install
    cohen_kappa_score,
    precision_recall_fscore_support,
    roc_auc_score,
)

from rubricrl.core.messages import Conversation, as_conversation
from rubricrl.judges.base import Judge, JudgeRequest
from rubricrl.judges.exemplar import criterion_key
from rubricrl.core.jsonl import iter_jsonl
from rubricrl.core.problems import Problem
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status, Verdict, error_verdict

LABEL_VALUES = {True: True, False: False, "met": True, "unmet": False}
NOTES = {
    "balanced_f1": "mean of the F1 of the met class and the F1 of the unmet class",
    "kappa": "Cohen's kappa between the judge's met/unmet and the human label",
    "auc": "ROC AUC of p_met against the human label (null: no p_met, or one class only)",
    "excluded": "error and skipped verdicts are left out of every metric and counted in n_errors / n_skipped",
    "zero_division": "an undefined precision or recall (no predicted or no true item of a class) counts as 0",
}


@dataclass(frozen=True)
class Label:
    id: str
    line: int
    conversation: Conversation
    response: str
    criterion: Criterion  # its tags are the label's tags (criterion dict tags + the line's `tags`)
    label: bool

    @property
    def key(self) -> str:
        """The criterion's normalised-text key (as exemplar models and calibrations use)."""
        return criterion_key(self.criterion.text)

    @property
    def tags(self) -> tuple[str, ...]:
        return self.criterion.tags


def parse_label(raw: object, source: str, line: int) -> Label | Problem:
    """One decoded JSONL value -> a Label, or the Problem that makes it unusable."""
    def problem(field: str, message: str, fix: str) -> Problem:
        return Problem(source, line, field, message, fix)

    if not isinstance(raw, dict):
        return problem("", f"line must be a JSON object, got {type(raw).__name__}", "write one object per line")
    lid = raw.get("id", f"line-{line}")
    if not isinstance(lid, (str, int)) or isinstance(lid, bool):
        return problem("id", "must be a string or an integer", "use e.g. \"r1-q\", or leave it out")
    if "prompt" not in raw:
        return problem("prompt", "missing", "add `prompt`: a string or a list of {role, content} messages")
    try:
        conversation = as_conversation(raw["prompt"])
    except (ValidationError, TypeError, ValueError) as exc:
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        return problem("prompt", f"not a string or a list of {{role, content}} messages ({first})",
                       "use a string, or [{\"role\": \"user\", \"content\": \"...\"}]")
    response = raw.get("response")
    if not isinstance(response, str):
        return problem("response", "missing" if response is None else f"must be a string, got {type(response).__name__}",
                       "add `response` with the text that was labelled")
    tags = raw.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t.strip() for t in tags):
        return problem("tags", "must be a list of non-empty strings", "use e.g. [\"safety\", \"hard\"], or leave it out")
    value = raw.get("label")
    if isinstance(value, str):
        value = value.strip().lower()
    if not (isinstance(value, bool) or value in ("met", "unmet")):
        return problem("label", "missing" if value is None else f"must be true/false or \"met\"/\"unmet\", got {value!r}",
                       "write the human judgement as true (met) or false (unmet)")
    spec = raw.get("criterion")
    if isinstance(spec, str) and spec.strip():
        spec = {"text": spec}
    if not isinstance(spec, dict):
        return problem("criterion", "missing" if spec is None else "must be the criterion text or a criterion object",
                       "add `criterion`: its text, or {\"id\", \"text\", ...} as in a rubric")
    own_tags = spec.get("tags", [])
    if not isinstance(own_tags, list) or not all(isinstance(t, str) for t in own_tags):
        return problem("criterion.tags", "must be a list of strings", "use e.g. [\"safety\"], or leave it out")
    text = spec.get("text")
    spec = {"id": f"c-{criterion_key(text)}" if isinstance(text, str) else "c", **spec,
            "tags": list(dict.fromkeys([*own_tags, *(t.strip() for t in tags)]))}
    try:
        criterion = Criterion.model_validate(spec)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return problem(f"criterion.{where}" if where else "criterion", err["msg"].removeprefix("Value error, "),
                       "correct it as in a rubric criterion (docs/rubrics.md)")
    return Label(str(lid), line, conversation, response, criterion, LABEL_VALUES[value])


def read_labels(path: str | Path) -> tuple[list[Label], list[Problem]]:
    """Every usable label and every problem (bad JSON, bad field, duplicate id), in file order."""
    labels: list[Label] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for number, text in iter_jsonl(path):
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as exc:
            problems.append(Problem(str(path), number, "", f"malformed JSON: {exc}", "fix the syntax of this line"))
            continue
        item = parse_label(raw, str(path), number)
        if isinstance(item, Problem):
            problems.append(item)
        elif item.id in seen:
            problems.append(Problem(str(path), number, "id", f"duplicate id {item.id!r} (first at line "
                                    f"{seen[item.id]})", "give every label a unique id"))
        else:
            seen[item.id] = number
            labels.append(item)
    return labels, problems


# -- judging ------------------------------------------------------------------------------------


def build_requests(labels: Sequence[Label]) -> tuple[list[JudgeRequest], list[tuple[int, int]]]:
    """One request per (conversation, response) holding all its criteria (ids unique per request;
    an identical criterion labelled twice is judged once). Requests that share a conversation are
    adjacent, so a shared-prefix judge batches them. Returns the requests and, per label, its
    (request index, criterion position)."""
    criteria: list[list[Criterion]] = []
    heads: list[tuple[Conversation, str]] = []
    by_item: dict[tuple[Conversation, str], list[int]] = {}
    seen: dict[tuple, tuple[int, int]] = {}
    where = []
    for lab in labels:
        ident = (lab.conversation, lab.response, lab.criterion.id, lab.criterion.content_hash())
        if ident not in seen:
            slots = by_item.setdefault((lab.conversation, lab.response), [])
            ri = next((r for r in slots if all(c.id != lab.criterion.id for c in criteria[r])), None)
            if ri is None:
                ri = len(criteria)
                slots.append(ri)
                criteria.append([])
                heads.append((lab.conversation, lab.response))
            criteria[ri].append(lab.criterion)
            seen[ident] = (ri, len(criteria[ri]) - 1)
        where.append(seen[ident])
    first: dict[Conversation, int] = {}
    for i, (conv, _) in enumerate(heads):
        first.setdefault(conv, i)
    order = sorted(range(len(heads)), key=lambda i: (first[heads[i][0]], i))
    new_index = {old: new for new, old in enumerate(order)}
    requests = [JudgeRequest(heads[i][0], heads[i][1], tuple(criteria[i])) for i in order]
    return requests, [(new_index[r], k) for r, k in where]


def judge_labels(judge: Judge, labels: Sequence[Label], *, batch_size: int = 16,
                 on_labels: Callable[[int], None] | None = None) -> list[Verdict]:
    """One verdict per label. A batch whose judge call raises gets `error` verdicts; the rest go on."""
    requests, where = build_requests(labels)
    per_request = [0] * len(requests)
    for ri, _ in where:
        per_request[ri] += 1

    async def run() -> list[list[Verdict]]:
        out: list[list[Verdict]] = []
        for start in range(0, len(requests), batch_size):
            batch = requests[start:start + batch_size]
            try:
                out += await judge.judge(batch)
            except Exception as exc:  # noqa: BLE001 - a failed batch becomes counted error verdicts
                reason = f"exception: {type(exc).__name__}: {exc}"
                out += [[error_verdict(c.id, judge.judge_id, reason) for c in r.criteria] for r in batch]
            if on_labels:
                on_labels(sum(per_request[start:start + batch_size]))
        return out

    answers = asyncio.run(run()) if requests else []
    return [answers[ri][k] for ri, k in where]


# -- metrics -------------------------------------------------------------------------------------


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def binary_metrics(y_true: Sequence[bool], y_pred: Sequence[bool], p_met: Sequence[float | None] = ()) -> dict:
    """Precision / recall / F1 of both classes, balanced F1 (mean of the two class F1s), Cohen's
    kappa and the AUC of `p_met` (over the items that have one; None with fewer than both classes)."""
    y, pred = np.asarray(y_true, dtype=bool), np.asarray(y_pred, dtype=bool)
    out: dict = {"n_decided": len(y), "tp": int((y & pred).sum()), "fp": int((~y & pred).sum()),
                 "fn": int((y & ~pred).sum()), "tn": int((~y & ~pred).sum())}
    keys = ("precision_met", "recall_met", "f1_met", "precision_unmet", "recall_unmet", "f1_unmet",
            "balanced_f1", "kappa", "auc")
    out.update(dict.fromkeys(keys))
    scored = [(t, p) for t, p in zip(y, p_met) if p is not None]
    out["auc_n"] = len(scored)
    if not len(y):
        return out
    precision, recall, f1, _ = precision_recall_fscore_support(y, pred, labels=[True, False], zero_division=0.0)
    out.update(precision_met=_num(precision[0]), recall_met=_num(recall[0]), f1_met=_num(f1[0]),
               precision_unmet=_num(precision[1]), recall_unmet=_num(recall[1]), f1_unmet=_num(f1[1]),
               balanced_f1=_num((f1[0] + f1[1]) / 2))
    if len(set(y.tolist()) | set(pred.tolist())) > 1:
        out["kappa"] = _num(cohen_kappa_score(y, pred))
    if len({t for t, _ in scored}) == 2:
        out["auc"] = _num(roc_auc_score([t for t, _ in scored], [p for _, p in scored]))
    return out


def group_metrics(labels: Sequence[Label], verdicts: Sequence[Verdict]) -> dict:
    """Counts (labels, each class, errors with their reasons, skipped) and `binary_metrics` on the decided."""
    decided = [(lab, v) for lab, v in zip(labels, verdicts) if v.decided]
    errors = [v for v in verdicts if v.status is Status.ERROR]
    reasons: dict[str, int] = {}
    for v in errors:
        key = v.reason.split(":", 1)[0][:80] or "unknown"
        reasons[key] = reasons.get(key, 0) + 1
    counts = {"n_labels": len(labels), "n_met_labels": sum(lab.label for lab in labels),
              "n_unmet_labels": sum(not lab.label for lab in labels), "n_errors": len(errors),
              "n_skipped": sum(v.status is Status.SKIPPED for v in verdicts), "error_reasons": reasons}
    metrics = binary_metrics([lab.label for lab, _ in decided], [v.status is Status.MET for _, v in decided],
                             [v.p_met for _, v in decided])
    return {**counts, **metrics}


def reliability_bins(labels: Sequence[Label], verdicts: Sequence[Verdict], bins: int = 10) -> list[dict]:
    """Decided verdicts with p_met in `bins` equal-width bins: count, mean p_met, observed met rate."""
    pairs = [(v.p_met, lab.label) for lab, v in zip(labels, verdicts) if v.decided and v.p_met is not None]
    p = np.array([x for x, _ in pairs], dtype=float)
    y = np.array([t for _, t in pairs], dtype=bool)
    index = np.minimum((p * bins).astype(int), bins - 1) if len(p) else np.zeros(0, dtype=int)
    out = []
    for b in range(bins):
        mask = index == b
        n = int(mask.sum())
        out.append({"lo": b / bins, "hi": (b + 1) / bins, "n": n, "mean_p": _num(p[mask].mean()) if n else None,
                    "met_rate": _num(y[mask].mean()) if n else None})
    return out


def agreement(labels: Sequence[Label], verdicts: Sequence[Verdict], *, judge_id: str = "",
              labels_file: str = "", problems: Sequence[Problem] = ()) -> dict:
    """The full result: overall, per criterion (by normalised text), per tag, reliability bins."""
    by_criterion: dict[str, list[int]] = {}
    by_tag: dict[str, list[int]] = {}
    for i, lab in enumerate(labels):
        by_criterion.setdefault(lab.key, []).append(i)
        for tag in lab.tags:
            by_tag.setdefault(tag, []).append(i)

    def subset(indices: list[int]) -> dict:
        return group_metrics([labels[i] for i in indices], [verdicts[i] for i in indices])

    return {
        "version": 1, "judge_id": judge_id, "labels_file": labels_file, "notes": NOTES,
        "problems": [str(p) for p in problems],
        "overall": group_metrics(labels, verdicts),
        "by_criterion": {key: {"text": labels[ix[0]].criterion.text, "criterion_id": labels[ix[0]].criterion.id,
                               **subset(ix)} for key, ix in by_criterion.items()},
        "by_tag": {tag: subset(ix) for tag, ix in sorted(by_tag.items())},
        "reliability": reliability_bins(labels, verdicts),
    }


def verdict_records(labels: Sequence[Label], verdicts: Sequence[Verdict]) -> list[dict]:
    """One line per label for `verdicts.jsonl`: the human label beside the judge's verdict."""
    return [{"id": lab.id, "line": lab.line, "criterion": lab.criterion.text, "tags": list(lab.tags),
             "label": "met" if lab.label else "unmet", "status": v.status.value, "p_met": v.p_met,
             "reason": v.reason, "judge_id": v.judge_id} for lab, v in zip(labels, verdicts)]
