"""Result records: one line of a `rubricrl score` output, as a typed value.

A line is validated once, when it is read (`read_records`, which names the file and line of a bad
one), and written with `model_dump(mode="json")` (`record_line`). The JSON is exactly what rubricrl
wrote before these models existed, key for key and in the same order, so files stay byte for byte
the same through a read and a write (tests/test_scoring.py round-trips a real score output).

- `scored` / `unscored` (judged): id, line, status, score, raw_score, gated, failed_hard_rules,
  coverage, n_error, n_skipped, tag_scores, rubric_hash, rubric_source, verdicts (each a Verdict
  with the criterion's weight, kind and tags);
- `invalid`: id, line, status, score (null), problem.

`rubricrl eval` results (evaluation/run.py) are `EvalRecord`s: the same plus key, sample,
example_tags, prompt, response and judge, each verdict with the criterion's text, and the status
`policy_error` (the policy failed; never judged).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_serializer, model_validator

from rubricrl.core.jsonl import dumps_line, iter_jsonl
from rubricrl.core.verdicts import Status, Verdict

JUDGED = ("scored", "unscored")
JUDGED_KEYS = ("id", "line", "status", "score", "raw_score", "gated", "failed_hard_rules", "coverage", "n_error",
               "n_skipped", "tag_scores", "rubric_hash", "rubric_source", "verdicts")
INVALID_KEYS = ("id", "line", "status", "score", "problem")


class RecordVerdict(Verdict):
    """A verdict as a result line holds it: with its criterion's weight, kind and tags."""

    weight: float
    kind: Literal["principle", "hard_rule"]
    tags: tuple[str, ...] = ()

    @property
    def criterion_text(self) -> str:
        """The criterion's text where the line holds it (eval results), else ""."""
        return ""


class ResultRecord(BaseModel):
    """One line of a `rubricrl score` output (see the module docstring for the keys per status)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    line: int
    status: Literal["scored", "unscored", "invalid"]
    score: float | None = None  # None unless scored
    raw_score: float | None = None  # before the hard-rule gate
    gated: bool = False
    failed_hard_rules: tuple[str, ...] = ()
    coverage: float = 0.0  # share of the rubric's criteria with a met/unmet verdict
    n_error: int = 0
    n_skipped: int = 0
    tag_scores: dict[str, float] = {}
    rubric_hash: str | None = None
    rubric_source: Literal["row", "file"] | None = None
    verdicts: tuple[RecordVerdict, ...] = ()
    problem: str | None = None  # why the row could not be judged (invalid rows)

    @property
    def judged(self) -> bool:
        """True for scored and unscored records: the row was judged and has verdicts."""
        return self.status in JUDGED

    @property
    def unit_key(self) -> str:
        """What identifies this record in its file (a resume skips rows already there): the row id."""
        return self.id

    @property
    def has_errors(self) -> bool:
        """A judge error in any verdict (the row was scored from the others, or unscored because of it)."""
        return any(v.status is Status.ERROR for v in self.verdicts)

    def file_keys(self) -> tuple[str, ...]:
        """The JSON keys of this record, in file order."""
        return JUDGED_KEYS if self.judged else INVALID_KEYS

    @model_validator(mode="after")
    def _complete(self) -> ResultRecord:
        missing = [k for k in self.file_keys() if k not in self.model_fields_set]
        if missing:
            raise ValueError(f"a {self.status} record needs {', '.join(missing)}")
        if not self.judged and (self.score is not None or self.verdicts):
            raise ValueError(f"a {self.status} record has no score and no verdicts")
        return self

    @model_serializer(mode="wrap")
    def _in_file_order(self, handler) -> dict[str, Any]:
        data = handler(self)
        return {k: data[k] for k in self.file_keys()}


class EvalVerdict(RecordVerdict):
    """A verdict in an eval result: also the criterion's text (per-row rubrics reuse ids)."""

    text: str = ""

    @property
    def criterion_text(self) -> str:
        return self.text


class EvalRecord(ResultRecord):
    """One line of an eval directory's results.jsonl: a result record of one (row, sample) unit."""

    key: str  # "<row id>#<sample>" (evaluation/run.py unit_key)
    status: Literal["scored", "unscored", "invalid", "policy_error"]
    sample: int
    example_tags: tuple[str, ...] = ()
    prompt: str = ""
    response: str = ""
    judge: str  # the judge spec
    verdicts: tuple[EvalVerdict, ...] = ()

    @property
    def unit_key(self) -> str:
        """The unit key `<row id>#<sample>` (a row has one record per sample)."""
        return self.key

    def file_keys(self) -> tuple[str, ...]:
        eval_keys = ("example_tags", "prompt", "response", "judge")
        if self.status == "policy_error":
            return ("key", "id", "sample", "line", "status", "score", "problem", *eval_keys)
        return ("key", *super().file_keys(), "sample", *eval_keys)


Record = TypeVar("Record", bound=ResultRecord)


class RecordError(ValueError):
    """A line that is not a result record; the message names the file and line."""


def record_line(record: ResultRecord) -> str:
    """One JSONL line (no newline) for `record`, as rubricrl writes it."""
    return dumps_line(record.model_dump(mode="json"))


def parse_record(text: str, model: type[Record] = ResultRecord, where: str = "") -> Record:
    """One record from one JSON line; RecordError names `where` (e.g. `file:line`) and the problem."""
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(_problem(e) for e in exc.errors()[:3])
        raise RecordError(f"{where}: not a rubricrl {_name(model)} line ({problems})") from None


def read_records(path: str | Path, model: type[Record] = ResultRecord) -> list[Record]:
    """Every record of a result file, each validated once; a bad line raises RecordError naming the
    file and line."""
    return [parse_record(text, model, f"{path}:{number}") for number, text in iter_jsonl(path)]


def as_records(items: Iterable[Record | dict], model: type[Record] = ResultRecord) -> list[Record]:
    """Records from records or plain dicts (from `scoring.batch.read_results`, which callers in
    cli/ and reports/ still use); a dict is validated here."""
    return [item if isinstance(item, ResultRecord) else model.model_validate(item) for item in items]


def write_records(path: str | Path, records: Sequence[ResultRecord], *, atomic: bool = False) -> Path:
    """Replace `path` with one line per record (`atomic`: a kill leaves the old file or the new one)."""
    from rubricrl.core.jsonl import write_raw_lines

    return write_raw_lines(path, (record_line(r) for r in records), atomic=atomic)


def _name(model: type[ResultRecord]) -> str:
    return "eval result" if issubclass(model, EvalRecord) else "result"


def _problem(error: dict) -> str:
    where = ".".join(map(str, error["loc"]))
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "json_invalid":
        return f"malformed JSON: {error.get('ctx', {}).get('error', message)}"
    return f"{where}: {message}" if where else message


__all__ = ["ResultRecord", "EvalRecord", "RecordVerdict", "EvalVerdict", "RecordError", "read_records",
           "parse_record", "record_line", "write_records", "as_records"]
