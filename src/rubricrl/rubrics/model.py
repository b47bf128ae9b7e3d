"""Rubrics as data: weighted criteria, optional declarative checks, a stable content hash.

A rubric never executes code: a check is a small declarative spec (regex, contains, length,
JSON validity, a required tagged span) evaluated by `rubricrl.rubrics.checks`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Sequence
from typing import Annotated, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo,
                      field_validator, model_validator)

CRITERION_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$"

_STRICT = ConfigDict(extra="forbid", frozen=True)


def _finite(value: float, info: ValidationInfo) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{info.field_name} must be a finite number")
    return float(value)


Number = Annotated[float, Field(strict=True), AfterValidator(_finite)]  # "3", NaN and inf are rejected


class RegexCheck(BaseModel):
    """Met when `pattern` occurs between `min_count` and `max_count` times (inclusive)."""

    model_config = _STRICT
    type: Literal["regex"]
    pattern: str
    ignore_case: bool = False
    min_count: int = Field(default=1, ge=0)
    max_count: int | None = Field(default=None, ge=0)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except (re.error, OverflowError, RecursionError) as exc:
            raise ValueError(f"invalid regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _bounds(self) -> RegexCheck:
        if self.max_count is not None and self.max_count < self.min_count:
            raise ValueError("max_count must be >= min_count")
        return self


class ContainsCheck(BaseModel):
    """`contains`: met when any phrase occurs; `not_contains`: met when none occurs."""

    model_config = _STRICT
    type: Literal["contains", "not_contains"]
    any_of: tuple[Annotated[str, Field(min_length=1)], ...] = Field(min_length=1)
    ignore_case: bool = True


class LengthCheck(BaseModel):
    """Met when the response length in `unit` lies within [min, max]."""

    model_config = _STRICT
    type: Literal["length"]
    unit: Literal["chars", "words"] = "words"
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _has_bound(self) -> LengthCheck:
        if self.min is None and self.max is None:
            raise ValueError("a length check needs `min`, `max` or both")
        if self.min is not None and self.max is not None and self.max < self.min:
            raise ValueError("max must be >= min")
        return self


class JsonValidCheck(BaseModel):
    """Met when the whole response parses as JSON."""

    model_config = _STRICT
    type: Literal["json_valid"]


class TaggedSpanCheck(BaseModel):
    """Met when the response holds exactly one non-empty `<tag>...</tag>` span."""

    model_config = _STRICT
    type: Literal["tagged_span"]
    tag: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_\-]*$")


Check = Annotated[
    Union[RegexCheck, ContainsCheck, LengthCheck, JsonValidCheck, TaggedSpanCheck],
    Field(discriminator="type"),
]


class Examples(BaseModel):
    """Labeled example replies for the exemplar judge (`rubricrl judge fit`)."""

    model_config = _STRICT
    met: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    unmet: tuple[Annotated[str, Field(min_length=1)], ...] = ()


class Criterion(BaseModel):
    """One weighted item of a rubric. A negative weight is a pitfall: meeting it costs points."""

    model_config = _STRICT
    id: str = Field(pattern=CRITERION_ID, max_length=128)
    text: str = Field(min_length=1)
    weight: Number = 1.0
    kind: Literal["principle", "hard_rule"] = "principle"
    tags: tuple[str, ...] = ()
    check: Check | None = None
    examples: Examples | None = None
    judge: Literal["auto", "exemplar", "llm"] = "auto"  # which judge kind decides it (auto: see routing)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("criterion text is blank")
        return value.strip()

    def content_hash(self) -> str:
        """Hash of everything that decides a verdict (not the weight or tags)."""
        payload = {"text": self.text, "kind": self.kind,
                   "check": self.check.model_dump(mode="json") if self.check else None}
        return _sha256(payload)


class Rubric(BaseModel):
    """A list of criteria with unique ids and at least one positive weight."""

    model_config = _STRICT
    id: str | None = None
    description: str = ""
    criteria: tuple[Criterion, ...] = Field(min_length=1)
    hard_rule_gate: Number = 0.0
    _hash: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _coherent(self) -> Rubric:
        seen: set[str] = set()
        for index, criterion in enumerate(self.criteria):
            if criterion.id in seen:
                raise ValueError(f"duplicate criterion id {criterion.id!r} at criteria[{index}]; ids must be unique")
            seen.add(criterion.id)
        if not any(c.weight > 0 for c in self.criteria):
            raise ValueError("the rubric has no criterion with a positive weight, so no score can be "
                             "computed; give at least one criterion a weight > 0")
        problems = weight_sum_problems([c.weight for c in self.criteria])
        if problems:
            raise ValueError("; ".join(f"criteria[{i}].weight: {message}" for i, message, _ in problems) +
                             f" (fix: {WEIGHT_FIX})")
        return self

    @property
    def positive_weight(self) -> float:
        return sum(c.weight for c in self.criteria if c.weight > 0)

    def content_hash(self) -> str:
        """Stable hash of the rubric's content (order of criteria included)."""
        if self._hash is None:
            self._hash = _sha256(self.model_dump(mode="json", exclude={"id", "description"}))
        return self._hash

    def criterion(self, criterion_id: str) -> Criterion:
        for c in self.criteria:
            if c.id == criterion_id:
                return c
        raise KeyError(criterion_id)


WEIGHT_FIX = "use smaller weights of similar size (only their ratios matter), e.g. 1 to 10 and -1 to -10"


def weight_sum_problems(weights: Sequence[float]) -> list[tuple[int, str, str]]:
    """(index, message, fix) for weights whose sums would make a score non-finite (weights that are
    not finite numbers themselves are left to the criterion's own validation, and skipped here).

    The score (scoring.points_score) adds the weights of met criteria in rubric order and divides
    by the positive weights of decided criteria. Floating-point addition is monotonic, so every
    such partial sum lies between the negative total and the positive total summed in the same
    order, and every divisor is at least the smallest positive weight. So when both totals and
    (negative total / smallest positive weight) are finite, every score, tag score and soft score
    is finite too: those are the three checks, each located at the weight that breaks it."""
    problems = []
    positive = negative = 0.0
    smallest: float | None = None  # the smallest positive weight
    last_negative = -1
    overflowed_positive = overflowed_negative = False
    for index, weight in enumerate(weights):
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            continue
        try:
            weight = float(weight)
        except OverflowError:  # an integer too large for a float: the criterion reports it
            continue
        if weight > 0 and math.isfinite(weight):
            positive += weight
            smallest = min(smallest, weight) if smallest else weight
            if positive == math.inf and not overflowed_positive:
                overflowed_positive = True
                problems.append((index, f"the positive weights add up to more than {_MAX:.4g} here, so the "
                                        "score's divisor is not a finite number", WEIGHT_FIX))
        elif weight < 0 and math.isfinite(weight):
            negative += weight
            last_negative = index
            if negative == -math.inf and not overflowed_negative:
                overflowed_negative = True
                problems.append((index, f"the negative weights add up to less than {-_MAX:.4g} here, so a "
                                        "score is not a finite number", WEIGHT_FIX))
    if problems or not smallest or negative == 0:
        return problems
    if not math.isfinite(negative / smallest):
        problems.append((last_negative, f"the negative weights (total {negative:.4g}) are too large next to the "
                                        f"smallest positive weight ({smallest:.4g}): a score "
                                        f"could be {negative:.4g} / {smallest:.4g}, which is not a finite number",
                         WEIGHT_FIX))
    return problems


_MAX = sys.float_info.max


def _sha256(payload: object) -> str:
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
