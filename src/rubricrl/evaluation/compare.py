"""`rubricrl compare DIR_A DIR_B`: the paired difference B - A between two eval directories.

Units pair on (row id, sample index) and count only when scored in both. The difference is the
mean of the unclipped unit differences, with a bootstrap CI that resamples rows (a row's sample
differences are averaged first), so prompt difficulty cancels out of the comparison. Per-criterion
pass rates compare the units where the criterion was decided (met/unmet) on both sides; the
examples that changed most list the criteria whose verdict flipped.
"""

from __future__ import annotations

from collections import defaultdict
from functools import partial
from pathlib import Path

from pydantic import BaseModel

from rubricrl.core.verdicts import Status
from rubricrl.evaluation.summary import EstimateOut, criteria_key_mode, criterion_key, row_estimate
from rubricrl.scoring.records import EvalRecord, EvalVerdict, RecordError, read_records
from rubricrl.evaluation.run import RESULTS, is_eval_dir, load_run


class ComparisonError(ValueError):
    """The two directories cannot be compared; the message says why and what to do."""


class CriterionDiff(BaseModel):
    key: str
    id: str
    text: str = ""
    weight: float
    n: int  # units where both sides decided it
    pass_a: float
    pass_b: float
    diff: float


class TagDiff(BaseModel):
    tag: str
    kind: str  # "criterion" (e.g. axis:*) or "example" (e.g. theme:*)
    mean_a: float
    mean_b: float
    diff: EstimateOut


class ChangedExample(BaseModel):
    key: str
    id: str
    sample: int
    score_a: float
    score_b: float
    diff: float
    prompt: str = ""
    flipped: list[dict] = []  # {criterion, weight, a, b}


class Comparison(BaseModel):
    a: str
    b: str
    paired_units: int
    paired_rows: int
    score_a: EstimateOut  # over the paired units, clipped like the headline
    score_b: EstimateOut
    diff: EstimateOut  # B - A, unclipped paired differences, bootstrap over rows
    unpaired: dict[str, int]
    unpaired_examples: dict[str, list[str]]
    criteria_key: str
    criteria: list[CriterionDiff]
    tags: list[TagDiff]
    changed: list[ChangedExample]
    notes: list[str]


def load_results(path: Path) -> list[EvalRecord]:
    path = Path(path)
    if not is_eval_dir(path) or not (path / RESULTS).is_file():
        raise ComparisonError(f"{path} is not a `rubricrl eval` directory with {RESULTS} (run `rubricrl eval --out "
                              f"{path}` first)")
    try:
        return read_records(path / RESULTS, EvalRecord)
    except RecordError as exc:
        raise ComparisonError(f"{exc}; not written by `rubricrl eval`") from None


def compare_dirs(a: Path, b: Path, *, top: int = 10, resamples: int = 1000, seed: int = 0) -> Comparison:
    """Compare eval directory `b` against `a` (differences are B - A)."""
    rec_a, rec_b = ({r.key: r for r in load_results(p)} for p in (a, b))
    scored_a = {k for k, r in rec_a.items() if r.status == "scored"}
    scored_b = {k for k, r in rec_b.items() if r.status == "scored"}
    paired = sorted(scored_a & scored_b)
    unpaired_keys = {"only_in_a": sorted(rec_a.keys() - rec_b.keys()), "only_in_b": sorted(rec_b.keys() - rec_a.keys()),
                     "not_scored_in_both": sorted((rec_a.keys() & rec_b.keys()) - set(paired))}
    if not paired:
        raise ComparisonError(
            f"{a} and {b} share no (row id, sample) scored in both: A has {len(scored_a)} scored units (e.g. "
            f"{sorted(scored_a)[:3]}), B has {len(scored_b)} (e.g. {sorted(scored_b)[:3]}); compare evals of the same "
            "--data (and look at their policy and judge errors)")
    pa, pb = [rec_a[k] for k in paired], [rec_b[k] for k in paired]
    est = partial(row_estimate, resamples=resamples, seed=seed)
    mode = criteria_key_mode(pa + pb)
    return Comparison(
        a=str(a), b=str(b), paired_units=len(paired), paired_rows=len({r.id for r in pa}),
        score_a=est([(r.id, r.score) for r in pa]), score_b=est([(r.id, r.score) for r in pb]),
        diff=est([(x.id, y.score - x.score) for x, y in zip(pa, pb)], clip=False),
        unpaired={k: len(v) for k, v in unpaired_keys.items()},
        unpaired_examples={k: v[:10] for k, v in unpaired_keys.items()},
        criteria_key=mode, criteria=criterion_diffs(pa, pb, mode), tags=tag_diffs(pa, pb, est),
        changed=changed_most(pa, pb, top), notes=setting_notes(a, b))


def criterion_diffs(pa: list[EvalRecord], pb: list[EvalRecord], mode: str) -> list[CriterionDiff]:
    """Pass rates over the units where both sides decided the criterion, largest change first."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # n, met in A, met in B
    first: dict[str, EvalVerdict] = {}
    for x, y in zip(pa, pb):
        vb = {v.criterion_id: v for v in y.verdicts}
        for va in x.verdicts:
            other = vb.get(va.criterion_id)
            if other is None or not va.decided or not other.decided:
                continue
            key = criterion_key(va, mode)
            first.setdefault(key, va)
            c = counts[key]
            c[0] += 1
            c[1] += va.status is Status.MET
            c[2] += other.status is Status.MET
    out = [CriterionDiff(key=k, id=first[k].criterion_id, text=first[k].text, weight=first[k].weight, n=n,
                         pass_a=ma / n, pass_b=mb / n, diff=(mb - ma) / n)
           for k, (n, ma, mb) in counts.items()]
    return sorted(out, key=lambda c: (-abs(c.diff), c.key))


def tag_diffs(pa: list[EvalRecord], pb: list[EvalRecord], est) -> list[TagDiff]:
    """Per criterion tag (tag scores) and per example tag (unit scores), over paired units having it."""
    values: dict[tuple[str, str], list[tuple[str, float, float]]] = defaultdict(list)
    for x, y in zip(pa, pb):
        ta, tb = x.tag_scores, y.tag_scores
        for tag in ta.keys() & tb.keys():
            values[("criterion", tag)].append((x.id, ta[tag], tb[tag]))
        for tag in x.example_tags:
            values[("example", tag)].append((x.id, x.score, y.score))
    out = []
    for (kind, tag), items in sorted(values.items()):
        out.append(TagDiff(tag=tag, kind=kind, mean_a=est([(i, va) for i, va, _ in items]).mean,
                           mean_b=est([(i, vb) for i, _, vb in items]).mean,
                           diff=est([(i, vb - va) for i, va, vb in items], clip=False)))
    return out


def changed_most(pa: list[EvalRecord], pb: list[EvalRecord], top: int) -> list[ChangedExample]:
    order = sorted(range(len(pa)), key=lambda i: (-abs(pb[i].score - pa[i].score), pa[i].key))
    out = []
    for i in order[:top]:
        x, y = pa[i], pb[i]
        vb = {v.criterion_id: v for v in y.verdicts}
        flipped = [{"criterion": v.text or v.criterion_id, "weight": v.weight, "a": v.status.value,
                    "b": vb[v.criterion_id].status.value}
                   for v in x.verdicts if v.criterion_id in vb and vb[v.criterion_id].status is not v.status]
        out.append(ChangedExample(key=x.key, id=x.id, sample=x.sample, score_a=x.score, score_b=y.score,
                                  diff=y.score - x.score, prompt=x.prompt[:500], flipped=flipped))
    return out


def setting_notes(a: Path, b: Path) -> list[str]:
    """What differs between the two runs besides what is being compared."""
    ra, rb = load_run(Path(a)), load_run(Path(b))
    notes = []
    if ra.generation.data_sha256 != rb.generation.data_sha256:
        notes.append("the two runs used different data files (sha256 differs); only rows with the same id pair")
    if ra.generation.policy != rb.generation.policy:
        notes.append(f"policy: A {ra.generation.policy!r}, B {rb.generation.policy!r}")
    if ra.judging.judge != rb.judging.judge or ra.judging.rubric_hash != rb.judging.rubric_hash:
        notes.append(f"judging differs (A: {ra.judging.judge!r}, rubric {ra.judging.rubric_hash}; B: "
                     f"{rb.judging.judge!r}, rubric {rb.judging.rubric_hash}): the difference mixes judge and policy")
    for name in ("samples", "max_tokens", "temperature", "seed"):
        va, vb = getattr(ra.generation, name), getattr(rb.generation, name)
        if va != vb:
            notes.append(f"{name}: A {va}, B {vb}")
    return notes


def ci(e: EstimateOut) -> str:
    """A difference with its 95% CI, signed (the terminal table and the HTML page, reports/compare.py)."""
    return f"{e.mean:+.3f} [{e.ci_low:+.3f}, {e.ci_high:+.3f}]"
