"""Personas of simulated users: who they are, what happened, how they talk, and the hidden need
that would actually help them. Read from YAML (a list) or JSONL, in rubricrl's format or as
SAGE profile rows (`id, player, scene, main_cha, cha_group, task, first_talk`). A bad row is a
`Problem` naming the file, line and field; the other rows still load.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rubricrl.core.jsonl import iter_jsonl, read_text
from rubricrl.core.problems import Problem
from rubricrl.core.resources import data_path

BUNDLED_DIR = data_path("personas")
SAGE_FIELDS = ("id", "player", "scene", "main_cha", "cha_group", "task", "first_talk")
_CJK = re.compile(r"[\u4e00-\u9fff]")


class Persona(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    background: str = Field(min_length=1)
    situation: str = Field(min_length=1)
    personality: str = ""
    speaking_style: str = ""
    hidden_need: str = Field(min_length=1, description="what would actually help; the user never says it outright")
    need: str = Field("", description="a category such as heard, advice, not_to_blame, reflection")
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    first_message: str = Field(min_length=1)
    language: str = "en"

    @field_validator("id", "name", "background", "situation", "hidden_need", "first_message")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


@dataclass
class PersonaSet:
    """Valid personas in file order, and the rows that could not be used."""

    personas: list[Persona]
    problems: list[Problem]


def bundled_personas_path(name: str = "support_seekers") -> Path:
    return BUNDLED_DIR / f"{name}.yaml"


def load_personas(path: str | Path | None = None) -> PersonaSet:
    """Personas from a file (default: the bundled support seekers) or a bundled name."""
    if path is None:
        path = bundled_personas_path()
    path = Path(path)
    if not path.exists() and bundled_personas_path(str(path)).is_file():
        path = bundled_personas_path(str(path))
    if not path.is_file():
        raise FileNotFoundError(f"persona file not found: {path} (give a YAML/JSONL file or a bundled name: "
                                f"{', '.join(p.stem for p in sorted(BUNDLED_DIR.glob('*.yaml')))})")
    rows, problems = _rows(path)
    personas: list[Persona] = []
    seen: set[str] = set()
    for line, row in rows:
        try:
            persona = _from_sage(row) if _is_sage(row) else Persona.model_validate(row)
        except (ValidationError, ValueError) as exc:
            problems.append(_problem(path, line, exc))
            continue
        if persona.id in seen:
            problems.append(Problem(source=str(path), line=line, field="id",
                                    message=f"duplicate persona id {persona.id!r}", fix="give every persona its own id"))
            continue
        seen.add(persona.id)
        personas.append(persona)
    return PersonaSet(personas=personas, problems=problems)


def _rows(path: Path) -> tuple[list[tuple[int, dict]], list[Problem]]:
    rows, problems = [], []
    if path.suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(read_text(path))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise ValueError(f"{path}:{mark.line + 1 if mark else '?'}: not valid YAML ({exc})") from None
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a YAML list of personas, got {type(data).__name__}")
        lines = _item_lines(path)
        for i, item in enumerate(data):
            line = lines[i] if i < len(lines) else None
            if isinstance(item, dict):
                rows.append((line, item))
            else:
                problems.append(Problem(source=str(path), line=line, field="",
                                        message=f"item {i + 1} is a {type(item).__name__}, not a mapping",
                                        fix="write each persona as a mapping of fields"))
        return rows, problems
    for number, text in iter_jsonl(path):
        try:
            item = json.loads(text)
        except (ValueError, RecursionError) as exc:
            problems.append(Problem(source=str(path), line=number, field="", message=f"not JSON: {exc}",
                                    fix="write one JSON object per line"))
            continue
        if isinstance(item, dict):
            rows.append((number, item))
        else:
            problems.append(Problem(source=str(path), line=number, field="", message="not a JSON object",
                                    fix="write one JSON object per line"))
    return rows, problems


def _item_lines(path: Path) -> list[int]:
    node = yaml.compose(read_text(path))
    return [item.start_mark.line + 1 for item in getattr(node, "value", [])] if node is not None else []


def _is_sage(row: dict) -> bool:
    return "player" in row or "first_talk" in row or "main_cha" in row


def _from_sage(row: dict) -> Persona:
    """A SAGE profile row: `player` is the character profile, `scene` the situation, `task` the
    hidden goal, `first_talk` the opening line; unexpected keys are refused, not dropped."""
    unknown = sorted(set(row) - set(SAGE_FIELDS))
    if unknown:
        raise ValueError(f"unexpected key(s) {unknown} in a SAGE profile row; SAGE rows have exactly "
                         f"{', '.join(SAGE_FIELDS)}")
    missing = [k for k in ("id", "player", "scene", "task", "first_talk") if not str(row.get(k) or "").strip()]
    if missing:
        raise ValueError(f"missing SAGE field(s) {missing}")
    others = row.get("cha_group") or []
    others = "、".join(map(str, others)) if isinstance(others, list) else str(others)
    text = " ".join(str(row.get(k) or "") for k in ("player", "scene", "first_talk"))
    return Persona(id=str(row["id"]), name=str(row.get("main_cha") or "the user"),
                   background=str(row["player"]) + (f" (others in the scene: {others})" if others else ""),
                   situation=str(row["scene"]), hidden_need=str(row["task"]), first_message=str(row["first_talk"]),
                   language="zh" if _CJK.search(text) else "en")


def _problem(path: Path, line: int | None, exc: Exception) -> Problem:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        field = ".".join(map(str, first["loc"]))
        kinds = {e["type"] for e in exc.errors()}
        fix = ("remove the unknown field or fix its spelling" if "extra_forbidden" in kinds else
               "add the missing field" if "missing" in kinds else "fix the value")
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return Problem(source=str(path), line=line, field=field, message=message, fix=fix)
    return Problem(source=str(path), line=line, field="", message=str(exc), fix="fix the row")
