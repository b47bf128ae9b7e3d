"""Evaluate a declarative check against a response: pure functions, no model, no code from data."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from rubricrl.rubrics.model import Check, ContainsCheck, JsonValidCheck, LengthCheck, RegexCheck, TaggedSpanCheck

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class CheckResult:
    met: bool
    evidence: str


def run_check(check: Check, response: str) -> CheckResult:
    """Return whether `response` satisfies `check`, with a short human-readable reason."""
    if isinstance(check, RegexCheck):
        return _regex(check, response)
    if isinstance(check, ContainsCheck):
        return _contains(check, response)
    if isinstance(check, LengthCheck):
        return _length(check, response)
    if isinstance(check, JsonValidCheck):
        return _json_valid(response)
    if isinstance(check, TaggedSpanCheck):
        return _tagged_span(check, response)
    raise TypeError(f"unknown check type {type(check).__name__}")


def _regex(check: RegexCheck, response: str) -> CheckResult:
    flags = re.IGNORECASE if check.ignore_case else 0
    matches = [m.group(0) for m in re.finditer(check.pattern, response, flags)]
    count = len(matches)
    met = count >= check.min_count and (check.max_count is None or count <= check.max_count)
    bound = f">= {check.min_count}" if check.max_count is None else f"in [{check.min_count}, {check.max_count}]"
    shown = ", ".join(repr(m[:40]) for m in matches[:3])
    return CheckResult(met, f"{count} match(es) of /{check.pattern}/ (need {bound})" + (f": {shown}" if shown else ""))


def _contains(check: ContainsCheck, response: str) -> CheckResult:
    haystack = response.lower() if check.ignore_case else response
    found = [p for p in check.any_of if (p.lower() if check.ignore_case else p) in haystack]
    if check.type == "contains":
        return CheckResult(bool(found), f"found {found[0]!r}" if found else "none of the phrases occurs")
    return CheckResult(not found, f"contains forbidden {found[0]!r}" if found else "no forbidden phrase occurs")


def _length(check: LengthCheck, response: str) -> CheckResult:
    size = len(response) if check.unit == "chars" else len(_WORD.findall(response))
    low_ok = check.min is None or size >= check.min
    high_ok = check.max is None or size <= check.max
    bounds = f"[{check.min if check.min is not None else 0}, {check.max if check.max is not None else 'inf'}]"
    return CheckResult(low_ok and high_ok, f"{size} {check.unit} (allowed {bounds})")


def _json_valid(response: str) -> CheckResult:
    try:
        json.loads(response)
    except ValueError as exc:
        return CheckResult(False, f"not valid JSON: {exc}")
    except RecursionError:
        return CheckResult(False, "not accepted as JSON: nested too deeply to parse")
    return CheckResult(True, "valid JSON")


def tagged_spans(tag: str, response: str) -> list[str]:
    """All `<tag>...</tag>` contents in `response`, in order."""
    return re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", response, flags=re.DOTALL)


def _tagged_span(check: TaggedSpanCheck, response: str) -> CheckResult:
    spans = tagged_spans(check.tag, response)
    if len(spans) != 1:
        return CheckResult(False, f"{len(spans)} <{check.tag}> spans (need exactly 1)")
    if not spans[0].strip():
        return CheckResult(False, f"<{check.tag}> span is empty")
    return CheckResult(True, f"one <{check.tag}> span of {len(spans[0].strip())} chars")
