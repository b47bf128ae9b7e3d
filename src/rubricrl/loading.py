"""Read rubrics from files and dataset rows, with errors that name the file, line, field and fix.

Accepted shapes (see docs/rubrics.md):
- native: a mapping `{id?, description?, hard_rule_gate?, criteria: [...]}` or a bare criteria list;
- HealthBench rows: `rubrics: [{criterion, points, tags}]`;
- Rubrics-as-Rewards rows: `rubric: [{title, description, weight}]`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .rubric import Criterion, Rubric

_FIXES = {
    "missing": "add this field",
    "extra_forbidden": "remove it, or check its spelling against docs/rubrics.md",
    "float_type": "use a number, e.g. 2 or -1",
    "string_type": "use a string",
    "too_short": "add at least one item",
    "string_pattern_mismatch": "use letters, digits and _ . : - (starting with a letter or digit)",
    "union_tag_invalid": "use one of: regex, contains, not_contains, length, json_valid, tagged_span",
    "literal_error": "use one of the allowed values",
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located as precisely as we can."""

    source: str
    line: int | None
    field: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        field = f" {self.field}:" if self.field else ""
        fix = f" (fix: {self.fix})" if self.fix else ""
        return f"{where}:{field} {self.message}{fix}"


class RubricError(ValueError):
    """Raised with every problem found in a rubric, not just the first."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def load_rubric(path: str | Path) -> Rubric:
    """Load a rubric from a YAML or JSON file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RubricError([Problem(str(path), None, "", f"cannot read file: {exc}")]) from None
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        reason = getattr(exc, "problem", None) or str(exc)
        raise RubricError([Problem(str(path), line, "", f"malformed YAML/JSON: {reason}",
                                   "fix the syntax at that line")]) from None
    return rubric_from_data(data, source=str(path), line_of=lambda loc: _yaml_line(node, loc))


def rubric_from_data(data: Any, source: str, line: int | None = None, line_of=None) -> Rubric:
    """Build a Rubric from parsed data in any accepted shape; `line_of(loc)` locates a field."""
    shaped, prefix = _normalise(data, source, line)
    errors: list[dict] = []
    items = shaped.get("criteria") if isinstance(shaped, dict) else None
    if isinstance(items, list) and items:
        for i, item in enumerate(items):  # each item on its own, so every bad item is reported
            try:
                Criterion.model_validate(item)
            except ValidationError as exc:
                errors += [{**e, "loc": ("criteria", i, *e["loc"])} for e in exc.errors()]
        if errors:
            errors += _whole_rubric_errors(items)
    if not errors:
        try:
            return Rubric.model_validate(shaped)
        except ValidationError as exc:
            errors = exc.errors()
    problems = []
    for err in errors:
        loc = tuple(err["loc"])
        where = line_of(loc) if line_of else line
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = f"unknown field {str(loc[-1])!r}"
        problems.append(Problem(source, where, prefix + _format_loc(loc), message, _FIXES.get(err["type"], "")))
    raise RubricError(problems)


def _whole_rubric_errors(items: list) -> list[dict]:
    """Rubric-level problems visible in raw items even when some items are invalid."""
    weights = [i.get("weight", 1.0) for i in items if isinstance(i, dict)]
    numeric = [w for w in weights if isinstance(w, (int, float)) and not isinstance(w, bool)]
    if len(numeric) == len(weights) and not any(w > 0 for w in numeric):
        return [{"loc": ("criteria",), "type": "value_error",
                 "msg": "the rubric has no criterion with a positive weight; give at least one a weight > 0"}]
    return []


def rubric_from_row(row: dict, source: str, line: int) -> Rubric | None:
    """The rubric a dataset row carries (native `rubric`, HealthBench `rubrics`), or None."""
    if "rubrics" in row and "rubric" in row:
        raise RubricError([Problem(source, line, "rubric", "row has both `rubric` and `rubrics`",
                                   "keep one of them")])
    if "rubrics" in row:
        return rubric_from_data(_from_healthbench(row["rubrics"], source, line), source, line)
    if "rubric" in row and row["rubric"] is not None:
        value = row["rubric"]
        if isinstance(value, str):  # a rubric serialised as a JSON string (common in parquet/CSV exports)
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise RubricError([Problem(source, line, "rubric", f"string is not valid JSON: {exc}",
                                           "store the rubric as an object or a JSON string")]) from None
        return rubric_from_data(value, source, line)
    return None


def _normalise(data: Any, source: str, line: int | None) -> tuple[Any, str]:
    """Turn the accepted shapes into the native mapping; return it and a field prefix for errors."""
    if isinstance(data, list):
        if data and all(isinstance(i, dict) and "title" in i and "description" in i for i in data):
            return {"criteria": _from_rar(data)}, "rubric"
        if data and all(isinstance(i, dict) and "criterion" in i and "points" in i for i in data):
            return _from_healthbench(data, source, line), "rubrics"
        return {"criteria": _with_default_ids(data)}, ""
    if isinstance(data, dict):
        if isinstance(data.get("criteria"), list):
            data = {**data, "criteria": _with_default_ids(data["criteria"])}
        return data, ""
    kind = "empty" if data is None else type(data).__name__
    raise RubricError([Problem(source, line, "", f"a rubric must be a mapping with `criteria` or a list of "
                                                 f"criteria, got {kind}", "see docs/rubrics.md for the format")])


def _with_default_ids(items: list) -> list:
    """Criteria without an id get `c1`, `c2`, ... by position."""
    return [({"id": f"c{i + 1}", **item} if isinstance(item, dict) and "id" not in item else item)
            for i, item in enumerate(items)]


def _from_healthbench(items: Any, source: str, line: int | None) -> dict:
    if not isinstance(items, list):
        raise RubricError([Problem(source, line, "rubrics", "must be a list of {criterion, points, tags}")])
    criteria = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RubricError([Problem(source, line, f"rubrics[{i}]", "must be an object")])
        unknown = set(item) - {"criterion", "points", "tags"}
        if unknown:
            raise RubricError([Problem(source, line, f"rubrics[{i}]", f"unknown field(s) {sorted(unknown)}",
                                       "HealthBench items have only criterion, points, tags")])
        tags = item.get("tags") or []
        criteria.append({"id": f"c{i + 1}", "text": item.get("criterion"), "weight": item.get("points"),
                         "tags": tags if isinstance(tags, list) else [tags]})
    return {"criteria": criteria}


_RAR_CATEGORY = re.compile(r"^\s*(essential|important|optional|pitfall)\s+criteria\s*:\s*", re.IGNORECASE)


def _from_rar(items: list[dict]) -> list[dict]:
    criteria = []
    for i, item in enumerate(items):
        title = str(item.get("title", ""))
        match = _RAR_CATEGORY.match(title)
        tags = [f"category:{match.group(1).lower()}"] if match else []
        extra = set(item) - {"title", "description", "weight"}
        criterion = {"id": f"c{i + 1}", "text": item.get("description"), "weight": item.get("weight"), "tags": tags}
        criterion.update({k: item[k] for k in extra})  # unknown keys surface as 'unknown field' errors
        criteria.append(criterion)
    return criteria


def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("regex", "contains", "not_contains", "length", "json_valid", "tagged_span"):
            continue  # discriminated-union branch names are noise for the user
        else:
            out += f".{part}" if out else str(part)
    return out


def _yaml_line(node: yaml.Node | None, loc: tuple) -> int | None:
    """1-based line of the deepest YAML node reachable along `loc`."""
    best = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), None) or next(
                (k for k, _ in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        if node is None:
            break
        best = node.start_mark.line + 1
    return best


def criterion_summary(criterion: Criterion) -> str:
    kind = "hard rule" if criterion.kind == "hard_rule" else "principle"
    judged = f"check:{criterion.check.type}" if criterion.check else "model"
    return f"{criterion.id} ({kind}, weight {criterion.weight:g}, {judged})"
