"""Score a JSONL file of rows: judge every row, write each result as soon as it is known, resume.

Every input row produces exactly one output line: `scored` (with a score), `unscored` (no
positive criterion could be decided, e.g. all judge errors) or `invalid` (the row itself is
unusable; the problem says why). Re-running with the same `--out` skips rows already written.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rubricrl.core.jsonl import iter_jsonl, read_jsonl
from rubricrl.judges.base import Judge, JudgeRequest
from rubricrl.rubrics.rows import InvalidRow, ScoringRow, read_rows
from rubricrl.rubrics.model import Rubric
from rubricrl.scoring.formulas import score_row
from rubricrl.scoring.records import RecordVerdict, ResultRecord, record_line
from rubricrl.core.verdicts import Verdict


@dataclass
class ScoreRunResult:
    out_path: Path
    written: int  # rows written by this run
    skipped_existing: int  # rows found already in --out


def existing_ids(out_path: Path, field: str = "id") -> set[str]:
    """Ids (the `field` of each line) of rows already in `out_path`. A torn last line (a killed run)
    is cut off first, so no partial JSON stays in the file; a corrupt line elsewhere is an error,
    never overwritten."""
    if not out_path.exists():
        return set()
    data = out_path.read_bytes()
    cut = data.rfind(b"\n") + 1
    if cut != len(data):
        with open(out_path, "r+b") as handle:
            handle.truncate(cut)
    ids = set()
    for number, line in iter_jsonl(out_path):  # split on \n only: U+2028 & co. may sit in a value
        try:
            ids.add(json.loads(line)[field])
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{out_path}:{number}: not a rubricrl result line; choose another --out "
                             "or remove that line") from None
    return ids


def count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())


def result_record(row: ScoringRow, rubric: Rubric, rubric_source: str, verdicts: list[Verdict]) -> ResultRecord:
    s = score_row(rubric, verdicts)
    by_id = {c.id: c for c in rubric.criteria}
    return ResultRecord(
        id=row.id, line=row.line, status="scored" if s.score is not None else "unscored",
        score=s.score, raw_score=s.raw_score, gated=s.gated, failed_hard_rules=s.failed_hard_rules,
        coverage=s.coverage, n_error=s.n_error, n_skipped=s.n_skipped, tag_scores=s.tag_scores,
        rubric_hash=rubric.content_hash(), rubric_source=rubric_source,
        verdicts=[RecordVerdict(**dict(v), weight=by_id[v.criterion_id].weight, kind=by_id[v.criterion_id].kind,
                                tags=by_id[v.criterion_id].tags) for v in verdicts])


def invalid_record(row: InvalidRow | ScoringRow, problem: str | None = None) -> ResultRecord:
    """The record of a row that cannot be judged: `problem`, or the invalid row's own problem."""
    return ResultRecord(id=row.id, line=row.line, status="invalid", score=None,
                        problem=problem if problem is not None else str(row.problem))


def score_file(data: Path, out: Path, judge: Judge, rubric: Rubric | None = None, *, batch_size: int = 16,
               on_rows: Callable[[int], None] | None = None) -> ScoreRunResult:
    """Score `data` into `out` (appending; rows already present are skipped)."""
    return score_rows(read_rows(data), Path(out), judge, rubric, batch_size=batch_size, on_rows=on_rows)


def score_rows(rows: Iterable[ScoringRow | InvalidRow | ResultRecord], out: Path, judge: Judge,
               rubric: Rubric | None = None, *, batch_size: int = 16, on_rows: Callable[[int], None] | None = None,
               key_field: str = "id",
               annotate: Callable[[ScoringRow | InvalidRow, ResultRecord], ResultRecord] | None = None
               ) -> ScoreRunResult:
    """Score `rows` into `out` like `score_file`. A row is skipped when its id is already the
    `key_field` of a line in `out`; a ResultRecord is a finished record (e.g. a failed generation),
    written as is; `annotate(row, record)` turns each judged or invalid row's record into the one written
    (e.g. an EvalRecord)."""
    return asyncio.run(_score_rows(rows, Path(out), judge, rubric, batch_size, on_rows or (lambda n: None),
                                   key_field, annotate))


async def _score_rows(rows: Iterable[ScoringRow | InvalidRow | ResultRecord], out: Path, judge: Judge,
                      rubric: Rubric | None, batch_size: int, on_rows: Callable[[int], None], key_field: str,
                      annotate: Callable | None) -> ScoreRunResult:
    done = existing_ids(out, key_field)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = skipped = 0
    with open(out, "a", encoding="utf-8") as sink:
        for batch in _batches(rows, batch_size):
            todo = []
            for row in batch:
                if (row.unit_key if isinstance(row, ResultRecord) else row.id) in done:
                    skipped += 1
                    on_rows(1)
                else:
                    todo.append(row)
            records = await _score_batch(todo, judge, rubric)
            if annotate is not None:
                records = [r if isinstance(row, ResultRecord) else annotate(row, r) for row, r in zip(todo, records)]
            for record in records:
                sink.write(record_line(record) + "\n")
            sink.flush()
            os.fsync(sink.fileno())
            written += len(records)
            on_rows(len(records))
    return ScoreRunResult(out, written, skipped)


async def _score_batch(rows: list[ScoringRow | InvalidRow | ResultRecord], judge: Judge,
                       shared: Rubric | None) -> list[ResultRecord]:
    """One record per row, in order (a ResultRecord row is already a record)."""
    records: list[ResultRecord | None] = [None] * len(rows)
    jobs = []
    for i, row in enumerate(rows):
        if isinstance(row, ResultRecord):
            records[i] = row
        elif isinstance(row, InvalidRow):
            records[i] = invalid_record(row)
        elif row.rubric is None and shared is None:
            records[i] = invalid_record(row, "no rubric: add `rubric` (or HealthBench `rubrics`) to the row, "
                                             "or pass --rubric FILE")
        else:
            rubric = row.rubric or shared
            jobs.append((i, row, rubric, "row" if row.rubric else "file"))
    if jobs:
        answers = await judge.judge([JudgeRequest(row.conversation, row.response, rubric.criteria)
                                     for _, row, rubric, _ in jobs])
        for (i, row, rubric, source), verdicts in zip(jobs, answers):
            records[i] = result_record(row, rubric, source, verdicts)
    return records


def _batches(items: Iterable, size: int) -> Iterable[list]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def read_results(out: Path) -> list[dict]:
    """The lines of a JSONL file as plain dicts, unvalidated (eval generations). Scored rows are read
    with `scoring.records.read_records`, which returns typed, validated records."""
    return read_jsonl(out)
