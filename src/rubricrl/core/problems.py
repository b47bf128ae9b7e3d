"""Problems with inputs, located by file, line and field, with the fix; shared by every loader
(rubrics, rows, personas, taxonomies, label files)."""

from __future__ import annotations

from dataclasses import dataclass


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
