"""The HTML page of a comparison of two eval directories (`rubricrl compare A B --html FILE`): the
paired difference B - A with its CI, per tag, per criterion and the examples that changed most.
The comparison itself is `evaluation.compare`; the page is `templates/compare.html.j2`."""

from __future__ import annotations

from pathlib import Path

from rubricrl.evaluation.compare import Comparison, ci
from rubricrl.reports.render import render, write

__all__ = ["comparison_html", "write_comparison"]
MAX_CRITERIA = 200


def comparison_html(c: Comparison) -> str:
    """A self-contained HTML page of a comparison."""
    return render("compare.html.j2", c=c, criteria=c.criteria[:MAX_CRITERIA], ci=ci)


def write_comparison(c: Comparison, path: str | Path) -> Path:
    return write(path, comparison_html(c))
