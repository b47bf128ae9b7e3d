"""Prompt datasets for training: bundled or user files, validated rubric per row, train / held-out split.

Every row must resolve to a rubric (its own or the shared one) before any model loads. The
`rubric` column handed to TRL holds the rubric's content hash; `RubricReward` looks it up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rubricrl.core.messages import as_conversation
from rubricrl.core.problems import Problem, RubricError
from rubricrl.rubrics.loading import load_rubric, rubric_from_row, rubric_reference
from rubricrl.rubrics.model import Rubric
from rubricrl.core.resources import data_path

BUNDLED_PROMPTS = data_path("prompts")


@dataclass(frozen=True)
class PromptRow:
    id: str
    messages: list[dict]
    rubric_key: str
    split: str

    def to_trl(self) -> dict:
        return {"prompt": self.messages, "rubric": self.rubric_key, "row_id": self.id}


@dataclass
class PromptData:
    train: list[PromptRow]
    heldout: list[PromptRow]
    rubrics: dict[str, Rubric]  # content hash -> rubric


def resolve_data_path(spec: str) -> Path:
    if spec.startswith("bundled:"):
        path = BUNDLED_PROMPTS / f"{spec.removeprefix('bundled:')}.jsonl"
        if not path.is_file():
            names = sorted(p.stem for p in BUNDLED_PROMPTS.glob("*.jsonl"))
            raise FileNotFoundError(f"no bundled prompt set {spec!r}; available: {names}")
        return path
    path = Path(spec).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {spec}")
    return path


def read_records(path: Path) -> list[dict]:
    """Rows of a JSONL / JSON / CSV / Parquet file through Hugging Face `datasets`."""
    from datasets import load_dataset

    kind = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}.get(path.suffix.lower())
    if kind is None:
        raise ValueError(f"{path}: unsupported data format {path.suffix!r}; use .jsonl, .json, .csv or .parquet")
    return list(load_dataset(kind, data_files=str(path), split="train"))


def load_prompt_data(train: str, heldout: str | None, shared_rubric: str | None, prompt_field: str = "prompt",
                     limit_train: int | None = None, limit_heldout: int | None = None,
                     system_prompt: str | None = None) -> PromptData:
    """Training and held-out rows. `system_prompt`, when given, is put first in every row's messages
    that has no system message of its own."""
    rubrics: dict[str, Rubric] = {}
    shared = None
    if shared_rubric:
        path = Path(shared_rubric)
        shared = load_rubric(path) if path.suffix in (".yaml", ".yml", ".json") else rubric_reference(
            shared_rubric, Path.cwd(), "config rubric", None)
    train_path = resolve_data_path(train)
    rows = _rows(train_path, prompt_field, shared, rubrics, default_split="train")
    if heldout:
        held = _rows(resolve_data_path(heldout), prompt_field, shared, rubrics, default_split="heldout")
        train_rows = rows
    elif any(r.split == "heldout" for r in rows):
        train_rows = [r for r in rows if r.split != "heldout"]
        held = [r for r in rows if r.split == "heldout"]
    else:  # no split information: every 5th row is held out, deterministically
        train_rows = [r for i, r in enumerate(rows) if i % 5 != 4]
        held = [r for i, r in enumerate(rows) if i % 5 == 4]
    if not train_rows:
        raise ValueError(f"{train_path}: no training rows")
    if system_prompt:
        def with_system(row: PromptRow) -> PromptRow:
            if any(m["role"] == "system" for m in row.messages):
                return row
            return replace(row, messages=[{"role": "system", "content": system_prompt}, *row.messages])

        train_rows, held = [with_system(r) for r in train_rows], [with_system(r) for r in held]
    return PromptData(train_rows[:limit_train], held[:limit_heldout], rubrics)


def _rows(path: Path, prompt_field: str, shared: Rubric | None, rubrics: dict[str, Rubric],
          default_split: str) -> list[PromptRow]:
    out, problems = [], []
    for line, record in enumerate(read_records(path), start=1):
        if prompt_field not in record or record[prompt_field] in (None, ""):
            problems.append(Problem(str(path), line, prompt_field, "missing prompt",
                                    f"add `{prompt_field}` or set data.prompt_field"))
            continue
        try:
            conversation = as_conversation(record[prompt_field])
            rubric = rubric_from_row({k: v for k, v in record.items() if k in ("rubric", "rubrics") and v not in
                                      (None, "", [])}, str(path), line) or shared
        except RubricError as exc:
            problems += exc.problems
            continue
        except (ValueError, TypeError) as exc:
            problems.append(Problem(str(path), line, prompt_field, f"not a string or a list of messages ({exc})"))
            continue
        if rubric is None:
            problems.append(Problem(str(path), line, "rubric", "no rubric for this row",
                                    "add a `rubric` column or set `rubric:` in the config"))
            continue
        key = rubric.content_hash()
        rubrics[key] = rubric
        messages = [m.model_dump() for m in conversation]
        split = str(record.get("split") or default_split)
        out.append(PromptRow(str(record.get("id") or f"{path.stem}-{line}"), messages, key, split))
    if problems:
        raise RubricError(problems[:20])
    return out

