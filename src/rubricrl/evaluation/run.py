"""`rubricrl eval`: generate with a policy, judge with a rubric judge, aggregate. Every step streams
to disk (fsync'd, one line at a time) and resumes after a kill, so no row is lost or duplicated.

An eval directory holds:
- `run.json`: the settings (policy, data path and sha256, generation settings, judge, rubric); a
  resume with other settings is refused, a change of judge needs `--rejudge`;
- `generations.jsonl`: one line per (row id, sample index), key `"<id>#<sample>"`; a policy
  failure (error or empty text) is a line with `error` set, counted and never judged;
- `results.jsonl`: one result record (`scoring.records.EvalRecord`: a score result record plus `key`,
  `sample`, `example_tags`, `prompt`, `response`, `judge`) per (row id, sample), in data order;
- `summary.json` (`evaluation/summary.py`); `report.html` is the command's (`reports/eval.py`), not run_eval's.
`--rejudge` re-scores the saved generations: the old results.jsonl and summary.json are kept as
`results.<UTC time>.jsonl` / `summary.<UTC time>.json` and listed in run.json `archived`.
Policy errors are final on a resume; `--retry-errors` drops them (and their results) and generates
them again (their new results are appended, after the others).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from rubricrl.scoring.batch import existing_ids, read_results, score_rows
from rubricrl.scoring.records import EvalRecord, EvalVerdict, ResultRecord, read_records
from rubricrl.llm.endpoint import ChatResult
from rubricrl.core.jsonl import dumps_line, iter_jsonl, read_text, write_raw_lines
from rubricrl.core.problems import RubricError
from rubricrl.judges.base import Judge, JudgeStats
from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric
from rubricrl.rubrics.rows import InvalidRow, ScoringRow, read_rows
from rubricrl.rubrics.model import Rubric

RUN_FILE, GENERATIONS, RESULTS, SUMMARY = "run.json", "generations.jsonl", "results.jsonl", "summary.json"
DEFAULT_JUDGE = "gate+exemplar+local"
DEFAULTS = {"samples": 1, "max_tokens": 512, "temperature": 0.0, "seed": 0}

Phase = Callable[[str, int], Callable[[int], None]]  # (phase name, total) -> advance(n)


class EvalError(ValueError):
    """A refusal or bad input; the message says what is wrong and what to do."""


class GenerationSettings(BaseModel):
    """What decides the generations; a resume must match all of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: str
    data_sha256: str
    samples: int
    max_tokens: int
    temperature: float
    seed: int


class JudgingSettings(BaseModel):
    """What decides the verdicts; changing it needs `--rejudge`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    judge: str
    rubric_path: str | None = None
    rubric_hash: str | None = None

    def same(self, other: JudgingSettings | None) -> bool:
        """Same judge spec and rubric content (a moved rubric file is the same rubric)."""
        return other is not None and (self.judge, self.rubric_hash) == (other.judge, other.rubric_hash)


class RunFile(BaseModel):
    """run.json of an eval directory."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["rubricrl-eval"] = "rubricrl-eval"
    version: int = 1
    created: str
    data_path: str
    generation: GenerationSettings
    judging: JudgingSettings
    judging_complete: bool = False
    archived: list[dict] = []


@dataclass
class EvalRequest:
    """What the command line asked for; None means "the run's setting, or the default"."""

    out: Path
    policy: str | None = None
    data: Path | None = None
    judge: str | None = None
    rubric: Path | None = None
    samples: int | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    concurrency: int = 4
    batch_size: int = 16
    rejudge: bool = False
    retry_errors: bool = False


@dataclass
class EvalOutcome:
    run: RunFile
    summary: dict
    generated_now: int = 0
    generated_before: int = 0
    judged_now: int = 0
    judged_before: int = 0
    archived: list[str] = field(default_factory=list)
    retried: int = 0  # policy errors dropped by --retry-errors to be generated again
    judge_id: str | None = None  # the judge used by this invocation, with its running totals (judge.report())
    judge_stats: JudgeStats | None = None
    invalid_rows: list[str] = field(default_factory=list)


def unit_key(row_id: str, sample: int) -> str:
    """The key of one (row id, sample index) in generations.jsonl and results.jsonl."""
    return f"{row_id}#{sample}"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_json_atomic(path: Path, data: dict) -> None:
    """Write JSON so that a kill leaves either the old or the new file, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def is_eval_dir(path: Path) -> bool:
    """True when `path` holds a run.json written by `rubricrl eval`."""
    try:
        return json.loads(read_text(Path(path) / RUN_FILE)).get("kind") == "rubricrl-eval"
    except (OSError, ValueError, AttributeError):
        return False


def load_run(out: Path) -> RunFile:
    path = Path(out) / RUN_FILE
    try:
        return RunFile.model_validate_json(read_text(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise EvalError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}; this is not a run.json "
                        "written by `rubricrl eval` (choose another --out)") from None


def resolve_rubric(path: Path | None) -> tuple[Rubric | None, str | None]:
    """The shared rubric and its path (a bundled name resolves to the bundled file)."""
    if path is None:
        return None, None
    if not path.exists() and bundled_rubric_path(str(path)).is_file():
        path = bundled_rubric_path(str(path))
    try:
        return load_rubric(path), str(path.resolve())
    except RubricError as exc:
        raise EvalError(f"--rubric is not valid:\n{exc}") from None


def plan_run(req: EvalRequest) -> tuple[RunFile, JudgingSettings | None, Rubric | None]:
    """The run's settings (from run.json, checked against the request, or new), the judging settings
    run.json had (a change is only allowed with --rejudge) and the shared rubric. Nothing is written."""
    out = Path(req.out)
    existing = load_run(out) if (out / RUN_FILE).is_file() else None
    if existing is None and ((out / GENERATIONS).exists() or (out / RESULTS).exists()):
        raise EvalError(f"{out} has {GENERATIONS} or {RESULTS} but no {RUN_FILE}; it was not written by "
                        "`rubricrl eval`; choose another --out")
    if req.rejudge and existing is None:
        raise EvalError(f"--rejudge re-scores saved generations, but {out} has no {RUN_FILE}; run `rubricrl eval` "
                        "without --rejudge first")
    if existing is None and (req.policy is None or req.data is None):
        raise EvalError(f"{out} is a new eval directory: --policy and --data are required")
    data = Path(req.data) if req.data is not None else Path(existing.data_path)
    _refuse_clash(out, "--data", data)
    if not data.is_file():
        raise EvalError(f"--data {data}: file not found" + ("" if req.data else " (the path in run.json; pass --data "
                                                                                "with the same file)"))
    digest = file_sha256(data)
    old_gen = existing.generation if existing else None
    asked = {"policy": req.policy, "samples": req.samples, "max_tokens": req.max_tokens,
             "temperature": req.temperature, "seed": req.seed}
    values = {k: v if v is not None else (getattr(old_gen, k) if old_gen else DEFAULTS[k]) for k, v in asked.items()}
    generation = GenerationSettings(data_sha256=digest, **values)
    if old_gen is not None and generation != old_gen:
        diffs = [f"--{k.replace('_', '-')} {getattr(old_gen, k)!r} (now {getattr(generation, k)!r})"
                 for k in GenerationSettings.model_fields if k != "data_sha256"
                 and getattr(old_gen, k) != getattr(generation, k)]
        if old_gen.data_sha256 != digest:
            diffs.append(f"data sha256 {old_gen.data_sha256[:12]} (now {digest[:12]}: {data} changed or is another file)")
        raise EvalError(f"{out} was started with other generation settings: {'; '.join(diffs)}. Re-run with the "
                        "run's settings (or leave them out to reuse them), or choose a new --out")
    rubric_arg = req.rubric if req.rubric is not None else (
        Path(existing.judging.rubric_path) if existing and existing.judging.rubric_path else None)
    _refuse_clash(out, "--rubric", rubric_arg)
    if req.rubric is None and rubric_arg is not None and not rubric_arg.is_file():
        raise EvalError(f"the run's rubric {rubric_arg} (run.json) is gone; pass --rubric with the same rubric")
    rubric, rubric_path = resolve_rubric(rubric_arg)
    judging = JudgingSettings(judge=req.judge or (existing.judging.judge if existing else DEFAULT_JUDGE),
                              rubric_path=rubric_path, rubric_hash=rubric.content_hash() if rubric else None)
    changed = existing is not None and not judging.same(existing.judging)
    if changed and not req.rejudge:
        before = existing.judging
        raise EvalError(f"{out} was judged with --judge {before.judge!r}"
                        + (f" and --rubric {before.rubric_path} (hash {before.rubric_hash[:12]})" if before.rubric_path
                           else "") + f"; this command asks for --judge {judging.judge!r}"
                        + (f" and --rubric {judging.rubric_path} (hash {judging.rubric_hash[:12]})" if rubric_path
                           else "") + ". Add --rejudge to re-score the saved generations with the new judge (the "
                        "old results are kept), or re-run with the run's judge")
    run = existing.model_copy(update={"judging": judging, "data_path": str(data.resolve())}) if existing else RunFile(
        created=_now(), data_path=str(data.resolve()), generation=generation, judging=judging)
    return run, existing.judging if existing else None, rubric


def _refuse_clash(out: Path, option: str, path: Path | None) -> None:
    """Refuse an input that is --out itself or one of the files an eval writes into it."""
    from rubricrl.core.paths import clash

    names = (RUN_FILE, GENERATIONS, RESULTS, SUMMARY, "report.html")
    problem = clash([("--out", out)] + [(f"--out (its {name})", out / name) for name in names], [(option, path)])
    if problem:
        raise EvalError(problem)


def read_prompt_rows(data: Path, shared: Rubric | None) -> tuple[list[ScoringRow | InvalidRow], list[str]]:
    """Every data row (prompts to generate for) and the problems of the invalid ones. A valid row
    without a rubric when there is no --rubric is refused up front, before any generation."""
    rows = list(read_rows(data, need_response=False))
    problems = [str(r.problem) for r in rows if isinstance(r, InvalidRow)]
    if shared is None:
        bare = [r for r in rows if isinstance(r, ScoringRow) and r.rubric is None]
        if bare:
            raise EvalError(f"{data}:{bare[0].line}: row {bare[0].id!r} has no rubric ({len(bare)} such row(s)); add "
                            "`rubric` (or HealthBench `rubrics`) to every row, or pass --rubric FILE")
    return rows, problems


def read_generations(path: Path) -> dict[str, dict]:
    """Saved generations by key (a torn last line from a kill is cut off first)."""
    existing_ids(path, "key")  # truncates a torn last line, checks every line has a key
    return {g["key"]: g for g in read_results(path)} if path.exists() else {}


def generation_record(row: ScoringRow, sample: int, result: ChatResult, policy_name: str, seed: int) -> dict:
    """One generations.jsonl line; an error or an empty text is a policy error (`error` set)."""
    error = result.error
    if error is None and not (result.text or "").strip():
        error = f"empty: the policy returned no text (finish_reason {result.finish_reason})"
    return {"key": unit_key(row.id, sample), "id": row.id, "sample": sample, "line": row.line,
            "text": result.text or "", "error": error, "finish_reason": result.finish_reason,
            "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "seed": seed, "policy": policy_name}


async def _generate(todo: list[tuple[ScoringRow, int]], model, gen: GenerationSettings, path: Path,
                    concurrency: int, advance: Callable[[int], None]) -> int:
    """Generate every (row, sample) in `todo`, appending each line (fsync'd) as soon as it is known."""
    slots = asyncio.Semaphore(concurrency)
    with open(path, "a", encoding="utf-8") as sink:
        async def one(row: ScoringRow, sample: int) -> None:
            messages = [{"role": m.role, "content": m.content} for m in row.conversation]
            async with slots:
                try:
                    result = await model.chat(messages, max_tokens=gen.max_tokens, temperature=gen.temperature,
                                              seed=gen.seed + sample)
                except Exception as exc:  # noqa: BLE001 - chat models report errors, but a bug must not lose the run
                    result = ChatResult(error=f"exception: {type(exc).__name__}: {exc}"[:300])
            record = generation_record(row, sample, result, model.name, gen.seed + sample)
            sink.write(dumps_line(record) + "\n")
            sink.flush()
            os.fsync(sink.fileno())
            advance(1)

        await asyncio.gather(*(one(row, sample) for row, sample in todo))
    return len(todo)


def judging_units(rows: list[ScoringRow | InvalidRow], samples: int, gens: dict[str, dict], judge_spec: str,
                  shared: Rubric | None):
    """What to judge, in data order: one unit per (row, sample), plus `annotate` that turns a judged
    record into an eval result record."""
    meta: dict[str, tuple[str, int, list, str]] = {}
    units: list[ScoringRow | InvalidRow | EvalRecord] = []
    for row in rows:
        tags = _example_tags(row)
        prompt = _last_user_text(row)
        for sample in range(samples):
            key = unit_key(row.id, sample)
            meta[key] = (row.id, sample, tags, prompt)
            if isinstance(row, InvalidRow):
                units.append(replace(row, id=key))
            elif gens[key]["error"] is not None:
                units.append(EvalRecord(key=key, id=row.id, sample=sample, line=row.line, status="policy_error",
                                        score=None, problem=gens[key]["error"], example_tags=tags, prompt=prompt,
                                        response=gens[key]["text"], judge=judge_spec))
            else:
                units.append(replace(row, id=key, response=gens[key]["text"]))

    def annotate(unit: ScoringRow | InvalidRow, record: ResultRecord) -> EvalRecord:
        row_id, sample, tags, prompt = meta[unit.id]
        rubric = (unit.rubric or shared) if isinstance(unit, ScoringRow) else None
        texts = {c.id: c.text for c in rubric.criteria} if rubric else {}
        verdicts = [EvalVerdict(**dict(v), text=texts.get(v.criterion_id, "")) for v in record.verdicts]
        return EvalRecord(**{**dict(record), "id": row_id, "verdicts": verdicts}, key=unit.id, sample=sample,
                          example_tags=tags, prompt=prompt,
                          response=unit.response if isinstance(unit, ScoringRow) else "", judge=judge_spec)

    return units, annotate


def _example_tags(row: ScoringRow | InvalidRow) -> list[str]:
    tags = row.extra.get("example_tags") if isinstance(row, ScoringRow) else None
    if isinstance(tags, str):
        return [tags]
    return [str(t) for t in tags] if isinstance(tags, list) else []


def _last_user_text(row: ScoringRow | InvalidRow) -> str:
    if not isinstance(row, ScoringRow):
        return ""
    users = [m.content for m in row.conversation if m.role == "user"]
    return users[-1] if users else (row.conversation[-1].content if row.conversation else "")


def run_eval(req: EvalRequest, *, make_policy: Callable[[str], object], make_judge: Callable[[str], Judge],
             phase: Phase | None = None) -> EvalOutcome:
    """Plan, generate what is missing, judge what is missing, summarise; see the module docstring."""
    from rubricrl.evaluation.summary import summarize_eval

    phase = phase or (lambda name, total: (lambda n: None))
    out = Path(req.out)
    run, previous, shared = plan_run(req)
    rows, invalid = read_prompt_rows(Path(run.data_path), shared)
    gen = run.generation
    expected = [(row, s) for row in rows if isinstance(row, ScoringRow) for s in range(gen.samples)]
    out.mkdir(parents=True, exist_ok=True)
    gens = read_generations(out / GENERATIONS)
    retried = 0
    if req.retry_errors:
        if req.rejudge:
            raise EvalError("--retry-errors and --rejudge do not combine: retry the policy errors first, then re-judge")
        gens, retried = _drop_policy_errors(out, gens)
    todo = [(row, s) for row, s in expected if unit_key(row.id, s) not in gens]
    if req.rejudge and todo:
        raise EvalError(f"--rejudge re-scores saved generations, but {len(todo)} of {len(expected)} are not generated "
                        f"yet; finish them first with `rubricrl eval --out {out}` (without --rejudge)")
    outcome = EvalOutcome(run, {}, generated_before=len(expected) - len(todo), retried=retried, invalid_rows=invalid)
    if req.rejudge and (not run.judging.same(previous) or run.judging_complete):  # else: resume an unfinished rejudge
        outcome.archived = _archive(out)
        run.archived += [{"file": name, "judge": previous.judge, "rubric_hash": previous.rubric_hash, "at": _now()}
                         for name in outcome.archived]
        run.judging_complete = False
    write_json_atomic(out / RUN_FILE, run.model_dump(mode="json"))
    results_path = out / RESULTS
    if todo or not run.judging_complete or not results_path.exists():
        _check_results_judge(results_path, run.judging.judge)
        judge = make_judge(run.judging.judge)  # before generating: a bad judge spec fails fast
        if todo:
            advance = phase("generating", len(expected))
            advance(outcome.generated_before)
            model = make_policy(gen.policy)
            outcome.generated_now = asyncio.run(_generate(todo, model, gen, out / GENERATIONS, req.concurrency,
                                                          advance))
            del model
            gens = read_generations(out / GENERATIONS)
        units, annotate = judging_units(rows, gen.samples, gens, run.judging.judge, shared)
        advance = phase("judging", len(units))
        result = score_rows(units, results_path, judge, shared, batch_size=req.batch_size, on_rows=advance,
                            key_field="key", annotate=annotate)
        outcome.judged_now, outcome.judged_before = result.written, result.skipped_existing
        report = judge.report()
        outcome.judge_id, outcome.judge_stats = report.judge_id, report.stats
        run.judging_complete = True
        write_json_atomic(out / RUN_FILE, run.model_dump(mode="json"))
    else:
        outcome.judged_before = len(read_records(results_path, EvalRecord))
    summary = summarize_eval(read_records(results_path, EvalRecord), samples=gen.samples)
    outcome.summary = summary.model_dump(mode="json")
    write_json_atomic(out / SUMMARY, outcome.summary)
    return outcome


def _check_results_judge(path: Path, judge: str) -> None:
    """Refuse to append to results judged by another judge (e.g. run.json edited by hand)."""
    if not path.exists():
        return
    existing_ids(path, "key")
    others = {r.judge for r in read_records(path, EvalRecord)} - {judge}
    if others:
        raise EvalError(f"{path} holds results judged by {sorted(map(str, others))}, not {judge!r}; re-score them "
                        "with --rejudge (the old results are kept)")


def _drop_policy_errors(out: Path, gens: dict[str, dict]) -> tuple[dict[str, dict], int]:
    """Remove failed generations (and their results) so they are generated again. Results go first:
    killed in between, the failures are still in generations.jsonl and a re-run with --retry-errors
    drops them again; never a result without its generation."""
    failed = {key for key, g in gens.items() if g["error"] is not None}
    for name in (RESULTS, GENERATIONS):
        path = out / name
        if failed and path.exists():
            existing_ids(path, "key")  # cut a torn last line
            kept = [line for _, line in iter_jsonl(path) if json.loads(line)["key"] not in failed]
            write_raw_lines(path, kept, atomic=True)
    return {k: g for k, g in gens.items() if k not in failed}, len(failed)


def _archive(out: Path) -> list[str]:
    """Move results.jsonl and summary.json aside as results.<UTC time>.jsonl / summary.<UTC time>.json."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    moved = []
    for name in (RESULTS, SUMMARY):
        source = out / name
        if not source.exists():
            continue
        stem, suffix = name.split(".", 1)
        target, n = out / f"{stem}.{stamp}.{suffix}", 1
        while target.exists():
            target, n = out / f"{stem}.{stamp}-{n}.{suffix}", n + 1
        os.replace(source, target)
        moved.append(target.name)
    return moved


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
