"""The one template environment of every HTML report: Jinja2 templates in `reports/templates/`,
autoescaped (a prompt or a response is text, never markup) and strict (a variable a template
needs but was not given is an error, not an empty string)."""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined

__all__ = ["ENV", "render", "write", "num", "plain"]


def num(value: object, spec: str = ".3f", missing: str = "-") -> str:
    """`value` formatted with `spec` (a format spec such as `.3f`, `+.1%`); `missing` for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return format(value, spec)


def plain(value: object) -> object:
    """An enum member as its value (`met`, not `Status.MET`); anything else unchanged."""
    return value.value if isinstance(value, Enum) else value


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("rubricrl.reports", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["num"] = num
    env.filters["plain"] = plain
    return env


ENV = _environment()


def render(template_name: str, **context: object) -> str:
    """The page `template_name` (e.g. `eval.html.j2`) rendered with `context`."""
    return ENV.get_template(template_name).render(**context)


def write(path: str | Path, html: str) -> Path:
    """Write a rendered page (UTF-8), creating its folder; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path
