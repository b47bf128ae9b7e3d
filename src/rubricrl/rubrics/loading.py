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
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rubricrl.core.jsonl import read_text
from rubricrl.core.problems import Problem, RubricError
from rubricrl.rubrics.model import Criterion, Rubric, weight_sum_problems
from rubricrl.core.resources import data_path

_FIXES = {
    "missing": "add this field",
    "extra_forbidden": "remove it, or check its spelling against docs/rubrics.md",
    "float_type": "use a number, e.g. 2 or -1",
    "string_type": "use a string",
    "too_short": "add at least one item",
    "string_pattern_mismatch": "use letters, digits and _ . : - (starting with a letter or digit)",
    "union_tag_invalid": "use one of: regex, contains, not_contains, length, json_valid, tagged_span",
    "literal_error": "use one of the allowed values",
    "value_error": "correct the value as described",
}


def load_rubric(path: str | Path) -> Rubric:
    """Load a rubric from a YAML or JSON file (`.json` is read with the JSON parser)."""
    path = Path(path)
    try:
        text = read_text(path)  # UTF-8, a BOM (as Windows editors write) dropped
    except (OSError, UnicodeDecodeError) as exc:
        raise RubricError([Problem(str(path), None, "", f"cannot read file: {exc}")]) from None
    node = None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise RubricError([Problem(str(path), exc.lineno, "", f"malformed JSON: {exc.msg}",
                                   "fix the syntax at that line")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        reason = getattr(exc, "problem", None) or str(exc)
        raise RubricError([Problem(str(path), mark.line + 1 if mark else None, "", f"malformed YAML: {reason}",
                                   "fix the syntax at that line")]) from None
    except RecursionError:
        raise RubricError([Problem(str(path), None, "", "nested too deeply to parse")]) from None
    try:
        node = yaml.compose(text)  # only to find line numbers; JSON that YAML cannot read has none
    except (yaml.YAMLError, RecursionError):
        pass
    return rubric_from_data(data, source=str(path), line_of=lambda loc: _yaml_line(node, loc))


@dataclass(frozen=True)
class _Shape:
    """How the user wrote the rubric, so errors use the user's field names."""

    root: str = ""  # e.g. "rubrics" for HealthBench items
    is_list: bool = False  # items are the top level, not under `criteria`
    rename: tuple[tuple[str, str], ...] = ()  # our field name -> the user's

    def data_loc(self, loc: tuple) -> tuple:
        if self.is_list and loc[:1] == ("criteria",):
            loc = loc[1:]
        names = dict(self.rename)
        return tuple(names.get(p, p.rstrip()) if isinstance(p, str) else p for p in loc)

    def field(self, loc: tuple) -> str:
        formatted = _format_loc(self.data_loc(loc))
        return (self.root + formatted) if self.root else formatted.lstrip(".")


def rubric_from_data(data: Any, source: str, line: int | None = None, line_of=None,
                     healthbench: bool = False) -> Rubric:
    """Build a Rubric from parsed data in any accepted shape; `line_of(loc)` locates a field.
    `healthbench=True` reads `data` as HealthBench `rubrics` items even if some are malformed."""
    shaped, shape = _normalise(data, source, line, healthbench)
    errors: list[dict] = []
    items = shaped.get("criteria") if isinstance(shaped, dict) else None
    if isinstance(items, list) and items:
        for i, item in enumerate(items):  # each item on its own, so every bad item is reported
            try:
                Criterion.model_validate(item)
            except ValidationError as exc:
                errors += [{**e, "loc": ("criteria", i, *e["loc"])} for e in exc.errors()]
        errors += _whole_rubric_errors(items)
    if not errors:
        try:
            return Rubric.model_validate(shaped)
        except ValidationError as exc:
            errors = exc.errors()
    problems = []
    for err in errors:
        loc = tuple(err["loc"])
        where = line_of(shape.data_loc(loc)) if line_of else line
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = f"unknown field {str(shape.data_loc(loc)[-1])!r}"
        problems.append(Problem(source, where, shape.field(loc), message,
                                err.get("ctx", {}).get("fix") or _FIXES.get(err["type"], "")))
    raise RubricError(problems)


def _whole_rubric_errors(items: list) -> list[dict]:
    """Rubric-level problems (duplicate ids, no positive weight, weight sums that are not finite),
    located at the criteria concerned."""
    errors: list[dict] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        cid = item.get("id") if isinstance(item, dict) else None
        if isinstance(cid, str) and cid in seen:
            errors.append({"loc": ("criteria", i, "id"), "type": "value_error",
                           "msg": f"duplicate criterion id {cid!r} (first at criteria[{seen[cid]}])",
                           "ctx": {"fix": "give every criterion a unique id"}})
        elif isinstance(cid, str):
            seen[cid] = i
    weights_by_index = [i.get("weight", 1.0) if isinstance(i, dict) else None for i in items]
    weights = [i.get("weight", 1.0) for i in items if isinstance(i, dict)]
    numeric = [w for w in weights if isinstance(w, (int, float)) and not isinstance(w, bool)]
    if weights and len(numeric) == len(weights) and not any(w > 0 for w in numeric):
        errors.append({"loc": ("criteria",), "type": "value_error",
                       "msg": "the rubric has no criterion with a positive weight, so no score can be computed",
                       "ctx": {"fix": "give at least one criterion a weight > 0"}})
    for index, message, fix in weight_sum_problems(weights_by_index):  # sums that would make a score non-finite
        errors.append({"loc": ("criteria", index, "weight"), "type": "value_error", "msg": message,
                       "ctx": {"fix": fix}})
    return errors


def rubric_from_row(row: dict, source: str, line: int) -> Rubric | None:
    """The rubric a dataset row carries (native `rubric`, HealthBench `rubrics`), or None."""
    if "rubrics" in row and "rubric" in row:
        raise RubricError([Problem(source, line, "rubric", "row has both `rubric` and `rubrics`",
                                   "keep one of them")])
    if "rubrics" in row:
        items = row["rubrics"]
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise RubricError([Problem(source, line, "rubrics", "must be a list of {criterion, points, tags}")])
        return rubric_from_data(items, source, line, healthbench=True)
    if "rubric" in row and row["rubric"] is not None:
        value = row["rubric"]
        if isinstance(value, str) and not value.lstrip().startswith(("{", "[")):
            return rubric_reference(value, base=Path(source).parent, source=source, line=line)
        if isinstance(value, str):  # a rubric serialised as a JSON string (common in parquet/CSV exports)
            try:
                value = json.loads(value)
            except (ValueError, RecursionError) as exc:
                raise RubricError([Problem(source, line, "rubric", f"string is not valid JSON: {exc}",
                                           "store the rubric as an object or a JSON string")]) from None
        return rubric_from_data(value, source, line)
    return None


def bundled_rubric_path(name: str) -> Path:
    """Path of a rubric shipped with rubricrl (`empathy`, `crisis_safety`, ...)."""
    return data_path("rubrics", f"{name}.yaml")


@lru_cache(maxsize=256)
def _load_cached(path: Path, mtime: float) -> Rubric:
    return load_rubric(path)


def rubric_reference(ref: str, base: Path, source: str, line: int | None) -> Rubric:
    """Resolve a rubric named in a row: a bundled rubric name, or a file path (relative to the data file)."""
    candidates = [bundled_rubric_path(ref)] if "/" not in ref and "." not in ref else []
    candidates += [base / ref, Path(ref)]
    for path in candidates:
        try:
            found = path.is_file()
        except OSError:  # e.g. a name too long to be a path
            found = False
        if found:
            return _load_cached(path.resolve(), path.stat().st_mtime)
    bundled = sorted(p.stem for p in bundled_rubric_path("x").parent.glob("*.yaml"))
    raise RubricError([Problem(source, line, "rubric", f"{ref!r} is neither a bundled rubric nor a file",
                               f"use one of {bundled}, a path to a YAML/JSON rubric, or an inline rubric")])


_HEALTHBENCH = _Shape(root="rubrics", is_list=True, rename=(("text", "criterion"), ("weight", "points")))
_RAR = _Shape(root="rubric", is_list=True, rename=(("text", "description"),))


def _normalise(data: Any, source: str, line: int | None, healthbench: bool) -> tuple[Any, _Shape]:
    """Turn the accepted shapes into the native mapping, and say which shape it was."""
    if healthbench:
        return {"criteria": _from_healthbench(data)}, _HEALTHBENCH
    if isinstance(data, list):
        if data and all(isinstance(i, dict) and "title" in i and "description" in i for i in data):
            return {"criteria": _from_rar(data)}, _RAR
        if data and all(isinstance(i, dict) and "criterion" in i and "points" in i for i in data):
            return {"criteria": _from_healthbench(data)}, _HEALTHBENCH
        return {"criteria": _with_default_ids(data)}, _Shape(root="criteria", is_list=True)
    if isinstance(data, dict):
        if isinstance(data.get("criteria"), list):
            data = {**data, "criteria": _with_default_ids(data["criteria"])}
        return data, _Shape()
    kind = "empty" if data is None else type(data).__name__
    raise RubricError([Problem(source, line, "", f"a rubric must be a mapping with `criteria` or a list of "
                                                 f"criteria, got {kind}", "see docs/rubrics.md for the format")])


def _with_default_ids(items: list) -> list:
    """Criteria without an id get `c1`, `c2`, ... by position."""
    return [({"id": f"c{i + 1}", **item} if isinstance(item, dict) and "id" not in item else item)
            for i, item in enumerate(items)]


def _from_healthbench(items: list[dict]) -> list[dict]:
    criteria = []
    for i, item in enumerate(items):
        tags = item.get("tags") or []
        criterion = {"id": f"c{i + 1}", "text": item.get("criterion"), "weight": item.get("points"),
                     "tags": tags if isinstance(tags, list) else [tags]}
        criteria.append(_keep_unknown(criterion, item, ("criterion", "points", "tags")))
    return criteria


_RAR_CATEGORY = re.compile(r"^\s*(essential|important|optional|pitfall)\s+criteria\s*:\s*", re.IGNORECASE)


def _from_rar(items: list[dict]) -> list[dict]:
    criteria = []
    for i, item in enumerate(items):
        match = _RAR_CATEGORY.match(str(item.get("title", "")))
        tags = [f"category:{match.group(1).lower()}"] if match else []
        criterion = {"id": f"c{i + 1}", "text": item.get("description"), "weight": item.get("weight"), "tags": tags}
        criteria.append(_keep_unknown(criterion, item, ("title", "description", "weight")))
    return criteria


def _keep_unknown(criterion: dict, item: dict, known: tuple[str, ...]) -> dict:
    """Carry a foreign item's unknown keys over so validation reports them as unknown fields;
    a key that collides with one of our own names (e.g. `weight` in a HealthBench item) is
    carried under a name that cannot be a field, so it is reported instead of used."""
    for key, value in item.items():
        if key not in known:
            criterion[key if key not in criterion else f"{key} "] = value
    return criterion


def _format_loc(loc: tuple) -> str:
    """`("criteria", 1, "weight")` -> `.criteria[1].weight` (the caller strips or prefixes the dot)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("regex", "contains", "not_contains", "length", "json_valid", "tagged_span"):
            continue  # discriminated-union branch names are noise for the user
        else:
            out += f".{part}"
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
