"""Personas of simulated users: who they are, what happened, how they talk, and the hidden need
that would actually help them. Read from YAML (a list) or JSONL, in rubricrl's format or as
SAGE profile rows (`id, player, scene, main_cha, cha_group, task, first_talk`, and `topic`,
`3-question` as SAGE's profile builder writes them). A bad row is a `Problem` naming the file,
line and field; the other rows still load.

In a SAGE row `main_cha` is the persona's personality type (one of three, described in English
below) and `cha_group` three trait words of that type; the name is the `姓名` (or `Name`) line of
the `player` profile, else the neutral label `User`.
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
SAGE_FIELDS = ("id", "player", "scene", "main_cha", "cha_group", "task", "first_talk", "topic", "3-question")
# SAGE's three personality types (`main_cha`), described in English for the user model's persona card
SAGE_TYPES = {
    "负面型": "negative type: irritable and quick to complain, easily provoked, slow to be won over",
    "被动型": "passive type: waits to be asked, rarely leads the conversation, goes along with the other person",
    "回避型": "avoidant type: guarded, sidesteps painful subjects and withdraws when pressed",
}
SAGE_NO_NAME = "User"
_CJK = re.compile(r"[\u4e00-\u9fff]")
_NAME_LINE = re.compile(r"^[\s*#>-]*(?:姓名|名字|name)\s*[:：]\s*\**\s*([^\n*]+?)\s*\**\s*$", re.I | re.M)


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
    """A SAGE profile row: `player` (the character profile) is the background, `scene` the
    situation (after `topic`, if given), `task` the hidden need, `first_talk` the opening line,
    `main_cha` the personality type and `cha_group` its trait words, `3-question` (things the
    character said to a friend) the speaking style. Unexpected keys are refused, not dropped."""
    unknown = sorted(set(row) - set(SAGE_FIELDS))
    if unknown:
        raise ValueError(f"unexpected key(s) {unknown} in a SAGE profile row; SAGE rows have "
                         f"{', '.join(SAGE_FIELDS[:7])} (and optionally topic, 3-question)")
    missing = [k for k in ("id", "player", "scene", "task", "first_talk") if not str(row.get(k) or "").strip()]
    if missing:
        hint = (" (SAGE's profile/simulator_profile.jsonl has no opening line; use "
                "profile/simulator_profile_withfirsttalk.jsonl)" if "first_talk" in missing else "")
        raise ValueError(f"missing SAGE field(s) {missing}{hint}")
    player = str(row["player"])
    kind = str(row.get("main_cha") or "").strip()
    traits = _words(row.get("cha_group"), "cha_group")
    parts = [SAGE_TYPES.get(kind, kind), f"traits: {', '.join(traits)}" if traits else ""]
    personality = "; ".join(x for x in parts if x)
    said = _words(row.get("3-question"), "3-question")
    topic = str(row.get("topic") or "").strip()
    name = _NAME_LINE.search(player)
    text = " ".join(str(row.get(k) or "") for k in ("player", "scene", "first_talk"))
    return Persona(id=str(row["id"]), name=name.group(1).strip() if name else SAGE_NO_NAME, background=player,
                   situation=(f"Topic: {topic}\n" if topic else "") + str(row["scene"]), personality=personality,
                   speaking_style=f"things you have said to a friend: {' / '.join(said)}" if said else "",
                   hidden_need=str(row["task"]), first_message=str(row["first_talk"]),
                   language="zh" if _CJK.search(text) else "en")


def _words(value, key: str) -> list[str]:
    """A SAGE list of short strings (`cha_group`, `3-question`); one string is a list of one."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    raise ValueError(f"{key} must be a list of strings, got {json.dumps(value, ensure_ascii=False)[:80]}")


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
