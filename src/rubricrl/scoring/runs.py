"""What `rubricrl score --out OUT` does when OUT already holds results: resume, refuse, re-judge.

Files beside OUT (STEM is OUT's name without its suffix, e.g. `scores` for `scores.jsonl`):
- `STEM.settings.json`: the settings that decided the verdicts in OUT: the judge spec, the `--rubric`
  path and content hash, `--threshold`, the `--calibration` path and sha256 (`ScoreSettings`).
  Written before the first result line, so no result is ever without it.
- `STEM.summary.json`: the summary (default `--summary-json`).
- `STEM.retry.jsonl`: the new results of a `--retry-errors` run, merged into OUT when the run ends
  (or at the start of the next run, after a kill).
- `STEM.<UTC time>.jsonl`, `STEM.<UTC time>.summary.json`: the results `--rejudge` moved aside;
  listed in the settings file's `archived`.

A re-run against an OUT with results (`plan_score`):
- same settings: rows already in OUT are skipped (resume); rows whose verdicts have judge errors
  are kept as they are and counted, and `--retry-errors` re-judges them;
- other settings (judge spec, rubric hash, threshold, calibration, or a row's own rubric changed
  since its result was written): refused before anything is written, naming what changed, unless
  `--rejudge`, which re-judges every row with the new settings after moving the old results aside.
- OUT written by a rubricrl without settings files: the rubric hashes of its rows are checked; the
  judge settings cannot be, and are recorded from this run on.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from rubricrl.scoring.batch import existing_ids
from rubricrl.scoring.records import ResultRecord, as_records, read_records, write_records
from rubricrl.rubrics.rows import ScoringRow, read_rows
from rubricrl.rubrics.model import Rubric

Mode = Literal["new", "resume", "rejudge", "retry_errors"]


class ScoreRunError(ValueError):
    """A refusal; the message says what is wrong and what to do. Nothing has been written."""


class ScoreSettings(BaseModel):
    """What decides the verdicts of a `rubricrl score` run; a re-run must match it (or --rejudge)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    judge: str
    rubric_path: str | None = None
    rubric_hash: str | None = None
    threshold: float = 0.5
    calibration_path: str | None = None
    calibration_sha256: str | None = None

    def changes_since(self, old: ScoreSettings) -> list[str]:
        """What differs from `old`, one phrase each (a moved file with the same content is no change)."""
        out = []
        if self.judge != old.judge:
            out.append(f"judge spec {old.judge!r} (now {self.judge!r})")
        if self.rubric_hash != old.rubric_hash:
            out.append(f"rubric {_file(old.rubric_path, old.rubric_hash)} (now "
                       f"{_file(self.rubric_path, self.rubric_hash)})")
        if self.threshold != old.threshold:
            out.append(f"--threshold {old.threshold:g} (now {self.threshold:g})")
        if self.calibration_sha256 != old.calibration_sha256:
            out.append(f"--calibration {_file(old.calibration_path, old.calibration_sha256)} (now "
                       f"{_file(self.calibration_path, self.calibration_sha256)})")
        return out


def _file(path: str | None, digest: str | None) -> str:
    return f"{path} (hash {digest[:12]})" if path and digest else "none"


class SettingsFile(BaseModel):
    """STEM.settings.json."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["rubricrl-score"] = "rubricrl-score"
    version: int = 1
    settings: ScoreSettings
    rejudge_pending: bool = False  # a --rejudge started and has not finished: its re-run resumes it
    updated: str
    archived: list[dict] = []


def settings_path(out: Path) -> Path:
    return out.with_name(out.stem + ".settings.json")


def default_summary_path(out: Path) -> Path:
    return out.with_name(out.stem + ".summary.json")


def retry_path(out: Path) -> Path:
    return out.with_name(out.stem + ".retry.jsonl")


def sidecar_paths(out: Path) -> list[tuple[str, Path]]:
    """The files a score run writes besides OUT and the summary (for the same-file check)."""
    return [("--out (its settings file)", settings_path(out)), ("--out (its retry file)", retry_path(out))]


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def make_settings(judge: str, rubric: Rubric | None, rubric_file: Path | None, threshold: float,
                  calibration: Path | None) -> ScoreSettings:
    return ScoreSettings(
        judge=judge.strip(), rubric_path=str(Path(rubric_file).resolve()) if rubric is not None else None,
        rubric_hash=rubric.content_hash() if rubric is not None else None, threshold=threshold,
        calibration_path=str(Path(calibration).resolve()) if calibration is not None else None,
        calibration_sha256=file_sha256(calibration) if calibration is not None and Path(calibration).is_file()
        else None)


def load_settings(out: Path) -> SettingsFile | None:
    path = settings_path(out)
    if not path.exists():
        return None
    try:
        return SettingsFile.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ScoreRunError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}; this is not a settings "
                            "file written by `rubricrl score`; move it away or choose another --out") from None


def has_errors(record: ResultRecord | dict) -> bool:
    """A result with a judge error (scored from the other criteria, or unscored because of it); a
    plain dict is validated first."""
    [record] = as_records([record])
    return record.has_errors


@dataclass
class ScorePlan:
    """What a `rubricrl score` invocation will do; `plan_score` writes nothing."""

    mode: Mode
    settings: ScoreSettings
    previous: SettingsFile | None
    existing: int = 0  # result lines in OUT before this run
    retry_ids: set[str] = field(default_factory=set)  # --retry-errors: the rows to judge again
    kept_errors: int = 0  # rows with judge errors that stay as they are (resume)
    notes: list[str] = field(default_factory=list)


def plan_score(data: Path, out: Path, settings: ScoreSettings, shared: Rubric | None, *, rejudge: bool = False,
               retry_errors: bool = False) -> ScorePlan:
    """Decide between a new run, a resume, a re-judge and a retry of judge errors; refuse a re-run
    whose settings differ from the ones OUT was scored with. Reads OUT (a torn last line from a
    kill is cut off, as every resume does) but writes nothing else."""
    if rejudge and retry_errors:
        raise ScoreRunError("--rejudge re-judges every row, --retry-errors only the rows with judge errors: "
                            "choose one")
    previous = load_settings(out)
    pending = retry_path(out)
    if not _has_lines(out) and not _has_lines(pending):
        if retry_errors:
            raise ScoreRunError(f"--retry-errors re-judges rows with judge errors in {out}, but it holds no results "
                                "yet; run without --retry-errors first")
        return ScorePlan("new", settings, previous)
    existing_ids(out)  # cut a torn last line; a line that is not a result is an error (never overwritten)
    records = read_records(out) if out.exists() else []
    if _has_lines(pending):
        existing_ids(pending)
        merged = {r.id: r for r in read_records(pending)}
        records = [merged.pop(r.id, r) for r in records] + list(merged.values())
    plan = ScorePlan("resume", settings, previous, existing=len(records))
    changes = settings.changes_since(previous.settings) if previous is not None else []
    if not rejudge:  # a row's own rubric (or, for an OUT without settings file, the --rubric) changed
        changes += _rubric_changes(data, records, shared, own_only=previous is not None)
    if previous is None:
        plan.notes.append(f"{out} has {len(records)} results but no {settings_path(out).name} (written by an older "
                          "rubricrl?): the judge settings they were scored with cannot be checked; the current "
                          f"settings are recorded in {settings_path(out).name} from now on")
    if rejudge:
        plan.mode = "rejudge"
        return plan
    if changes:
        raise ScoreRunError(
            f"{out} was scored with other settings: {'; '.join(changes)}. Nothing was written. Add --rejudge to "
            "re-judge every row with the new settings (the old results are kept as "
            f"{out.stem}.<time>{out.suffix}; verdicts already in the verdict cache cost no model call), re-run with "
            "the settings it was scored with (--retry-errors re-judges only its rows with judge errors), or choose "
            "another --out")
    errored = {r.id for r in records if r.has_errors}
    if retry_errors:
        plan.mode, plan.retry_ids = "retry_errors", errored
    else:
        plan.kept_errors = len(errored)
    return plan


def _has_lines(path: Path) -> bool:
    if not path.is_file():
        return False
    with open(path, "rb") as handle:
        return any(line.strip() for line in handle)


def _rubric_changes(data: Path, records: list[ResultRecord], shared: Rubric | None, *, own_only: bool) -> list[str]:
    """Rows of `data` whose result in OUT was scored with another rubric than the row has now
    (`own_only`: rows with their own rubric; the --rubric is checked with the settings file)."""
    written = {r.id: r.rubric_hash for r in records if r.rubric_hash}
    if not written:
        return []
    changed = []
    for row in read_rows(data):
        if not isinstance(row, ScoringRow) or row.id not in written or (own_only and row.rubric is None):
            continue
        rubric = row.rubric or shared
        if rubric is not None and rubric.content_hash() != written[row.id]:
            changed.append(row.id)
    if not changed:
        return []
    return [f"the rubric of {len(changed)} row(s) (e.g. {changed[0]!r}: hash {written[changed[0]][:12]} in the "
            "results, another rubric now)"]


def begin(plan: ScorePlan, out: Path) -> list[str]:
    """Prepare OUT for the run `plan` describes; returns the names of archived files. Order matters
    for a kill at any point: a pending retry is merged first (its rows' new results replace the old
    ones), --rejudge then moves the results aside, and the settings file is written last, before
    any new result line."""
    archived: list[str] = []
    finish_retry(out)
    previous = plan.previous
    pending_rejudge = (previous is not None and previous.rejudge_pending and previous.settings == plan.settings)
    if plan.mode == "rejudge" and not pending_rejudge:
        archived = _archive(out)
    entries = list(previous.archived) if previous is not None else []
    if archived:
        old = previous.settings.model_dump(mode="json") if previous is not None else None
        entries.append({"files": archived, "settings": old, "at": _now()})
    write_settings(out, SettingsFile(settings=plan.settings, rejudge_pending=plan.mode == "rejudge",
                                     updated=_now(), archived=entries))
    return archived


def finish(plan: ScorePlan, out: Path) -> None:
    """After the run: merge the retried rows, clear `rejudge_pending`."""
    finish_retry(out)
    current = load_settings(out)
    if current is not None and current.rejudge_pending:
        write_settings(out, current.model_copy(update={"rejudge_pending": False, "updated": _now()}))


def finish_retry(out: Path) -> int:
    """Replace OUT's result of every row in STEM.retry.jsonl by the new one there (atomically: a kill
    leaves the old OUT or the new one), then remove the retry file. Returns the rows replaced."""
    pending = retry_path(out)
    if not pending.exists():
        return 0
    existing_ids(pending)
    new = {r.id: r for r in read_records(pending)}
    if new:
        if out.exists():
            existing_ids(out)
        old = read_records(out) if out.exists() else []
        records = [new.pop(r.id, r) for r in old] + list(new.values())
        _write_records_atomic(out, records)
    pending.unlink()
    return len(new)


def _write_records_atomic(path: Path, records: list[ResultRecord]) -> None:
    write_records(path, records, atomic=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def write_settings(out: Path, settings: SettingsFile) -> None:
    path = settings_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(settings.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _archive(out: Path) -> list[str]:
    """Move OUT and its default summary aside as STEM.<UTC time>.jsonl / STEM.<UTC time>.summary.json
    (a --summary-json elsewhere is rewritten at the end; the archived results hold everything)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    moved = []
    for source, suffix in ((out, out.suffix), (default_summary_path(out), ".summary.json")):
        if not source.exists():
            continue
        target, n = out.with_name(f"{out.stem}.{stamp}{suffix}"), 1
        while target.exists():
            target, n = out.with_name(f"{out.stem}.{stamp}-{n}{suffix}"), n + 1
        os.replace(source, target)
        moved.append(target.name)
    return moved


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
