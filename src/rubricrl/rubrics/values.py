"""Rubrics carried inside data values (an OpenRLHF label, a verl `ground_truth` or `extra_info`).

A value is a rubric in any shape `rubric_from_data` reads (a mapping with `criteria`, a criteria
list, HealthBench `rubrics` items, Rubrics-as-Rewards items), the same as a JSON string, or the
name of a bundled rubric. File paths are refused: these values come from requests and datasets,
and must not make the process read files.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Any

from rubricrl.core.problems import Problem, RubricError

from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric, rubric_from_data
from rubricrl.rubrics.model import Rubric

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class RubricValueError(ValueError):
    """A value meant as a rubric that is not one; the message says what is wrong and how to fix it."""


def plain(value: Any) -> Any:
    """`value` with numpy arrays and scalars turned into lists and Python numbers, recursively
    (verl reads parquet into numpy object arrays: a list of dicts arrives as an ndarray)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return plain(value.tolist())
    return value


def is_blank(value: Any) -> bool:
    """None, a blank string, or NaN (what pandas and OpenRLHF put in a missing cell or label)."""
    return value is None or (isinstance(value, str) and not value.strip()) or \
        (isinstance(value, float) and math.isnan(value))


def bundled_names() -> list[str]:
    return sorted(p.stem for p in bundled_rubric_path("x").parent.glob("*.yaml"))


def looks_like_rubric(value: Any) -> bool:
    """True for values `rubric_value` would try to read as a rubric (not, e.g., a reference answer)."""
    value = plain(value)
    if isinstance(value, (dict, list, Rubric)):
        return True
    if isinstance(value, str):
        text = value.strip()
        return text.startswith(("{", "[")) or bool(_NAME.match(text) and bundled_rubric_path(text).is_file())
    return False


def rubric_value(value: Any, source: str) -> Rubric:
    """The rubric `value` holds (see the module docstring); RubricValueError names `source` and the fix."""
    value = plain(value)
    if isinstance(value, Rubric):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("{", "[")):
            return _from_json(text, source)
        if _NAME.match(text) and bundled_rubric_path(text).is_file():
            return _bundled(text)
        raise RubricValueError(f"{source}: {_short(text)} is neither a rubric as JSON nor a bundled rubric name "
                               f"(fix: put the rubric as a JSON object or list, or use one of {bundled_names()})")
    if isinstance(value, (dict, list)):
        try:
            text = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)
        except ValueError as exc:
            if "Out of range float" not in str(exc):
                raise RubricValueError(f"{source}: not JSON-serialisable data ({exc}); use JSON values only") from None
            return _checked(_read(value), source)  # NaN or infinity: read uncached, so the problem names its field
        except TypeError as exc:
            raise RubricValueError(f"{source}: not JSON-serialisable data ({exc}); use JSON values only") from None
        return _from_json(text, source)
    raise RubricValueError(f"{source}: a rubric must be a JSON object, a list of criteria, a JSON string or a "
                           f"bundled rubric name, got {type(value).__name__}")


def _from_json(text: str, source: str) -> Rubric:
    return _checked(_parse_json(text), source)


def _checked(parsed: Rubric | str, source: str) -> Rubric:
    if isinstance(parsed, str):
        raise RubricValueError(f"{source}: {parsed}")
    return parsed


@lru_cache(maxsize=1024)
def _parse_json(text: str) -> Rubric | str:
    """The rubric, or what is wrong with it; once per distinct text (a batch repeats a few rubrics
    many times, good or bad)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"not valid JSON ({str(exc)[:120]}); store the rubric as a JSON object or list"
    return _read(data)


def _read(data: Any) -> Rubric | str:
    if isinstance(data, dict) and ("rubric" in data or "rubrics" in data) and "criteria" not in data:
        return ("holds a row (`rubric`/`rubrics` key), not a rubric; put the rubric itself here (a mapping "
                "with `criteria` or a list of criteria)")
    try:
        return rubric_from_data(data, "rubric")
    except RubricError as exc:
        return "; ".join(_problem(p) for p in exc.problems)
    except RecursionError:
        return "nested too deeply to read as a rubric"


@lru_cache(maxsize=64)
def _bundled(name: str) -> Rubric:
    return load_rubric(bundled_rubric_path(name))


def load_named_rubric(ref: str) -> Rubric:
    """A rubric for a command-line option or setting: a bundled name or a YAML/JSON file path.
    Raises RubricValueError with every problem found."""
    if _NAME.match(ref) and bundled_rubric_path(ref).is_file():
        return _bundled(ref)
    try:
        return load_rubric(ref)
    except RubricError as exc:
        raise RubricValueError(f"rubric {ref!r} (a bundled name is one of {bundled_names()}):\n{exc}") from None


def _problem(p: Problem) -> str:
    fix = f" (fix: {p.fix})" if p.fix else ""
    return f"{p.field}: {p.message}{fix}" if p.field else f"{p.message}{fix}"


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
