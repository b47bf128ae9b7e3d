"""Declarative checks: every check type through `checks.run_check`, and invalid specs rejected."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from rubricrl.rubrics.checks import CheckResult, run_check, tagged_spans
from rubricrl.core.problems import RubricError
from rubricrl.rubrics.loading import rubric_from_data
from rubricrl.rubrics.model import (
    Check,
    ContainsCheck,
    Criterion,
    JsonValidCheck,
    LengthCheck,
    RegexCheck,
    TaggedSpanCheck,
)

CHECK = TypeAdapter(Check)


def check(**spec):
    """Build a check through the discriminated union, exactly as a rubric file would."""
    return CHECK.validate_python(spec)


def met(spec: dict, response: str) -> bool:
    result = run_check(check(**spec), response)
    assert isinstance(result, CheckResult)
    assert isinstance(result.evidence, str) and result.evidence
    return result.met


# --------------------------------------------------------------------------- regex


@pytest.mark.parametrize(
    "response, expected",
    [
        ("no steps here", False),  # 0 matches < min 2
        ("step 1", False),  # 1 match < min 2
        ("step 1, step 2", True),  # 2 matches in [2, 3]
        ("step 1 step 2 step 3", True),  # 3 matches in [2, 3]
        ("step 1 step 2 step 3 step 4", False),  # 4 matches > max 3
    ],
)
def test_regex_min_and_max_count(response, expected):
    spec = {"type": "regex", "pattern": r"step \d", "min_count": 2, "max_count": 3}
    assert met(spec, response) is expected


def test_regex_default_is_at_least_one_match_and_case_sensitive():
    spec = {"type": "regex", "pattern": r"\bdoctor\b"}
    assert met(spec, "please see a doctor") is True
    assert met(spec, "please see a DOCTOR") is False  # ignore_case defaults to False
    assert met(spec, "doctorate") is False  # word boundary


def test_regex_ignore_case_including_unicode():
    spec = {"type": "regex", "pattern": "café", "ignore_case": True}
    assert met(spec, "Le CAFÉ est ouvert") is True
    assert met({**spec, "ignore_case": False}, "Le CAFÉ est ouvert") is False


def test_regex_max_zero_means_forbidden():
    spec = {"type": "regex", "pattern": r"\d+", "min_count": 0, "max_count": 0}
    assert met(spec, "no digits") is True  # 0 matches in [0, 0]
    assert met(spec, "there are 3 cats") is False  # 1 match > 0


def test_regex_on_empty_response():
    assert met({"type": "regex", "pattern": "x"}, "") is False  # 0 < 1
    assert met({"type": "regex", "pattern": "x", "min_count": 0}, "") is True  # 0 >= 0


def test_regex_evidence_reports_count_and_matches():
    result = run_check(check(type="regex", pattern=r"\d", max_count=5), "a1b2")
    assert result.met
    assert "2 match(es)" in result.evidence
    assert "'1'" in result.evidence and "'2'" in result.evidence


# --------------------------------------------------------------------------- contains / not_contains


def test_contains_any_of_ignores_case_by_default():
    spec = {"type": "contains", "any_of": ["see a doctor", "call 911"]}
    assert met(spec, "You should CALL 911 now.") is True
    assert met(spec, "Drink water.") is False


def test_contains_case_sensitive_when_asked():
    spec = {"type": "contains", "any_of": ["Doctor"], "ignore_case": False}
    assert met(spec, "see a Doctor") is True
    assert met(spec, "see a doctor") is False


def test_not_contains_is_met_when_no_phrase_occurs():
    spec = {"type": "not_contains", "any_of": ["guaranteed cure", "100% safe"]}
    assert met(spec, "This treatment may help.") is True
    assert met(spec, "A GUARANTEED CURE!") is False  # ignore_case default True
    result = run_check(check(**spec), "it is 100% safe")
    assert not result.met and "100% safe" in result.evidence


def test_not_contains_case_sensitive():
    spec = {"type": "not_contains", "any_of": ["BAD"], "ignore_case": False}
    assert met(spec, "bad idea") is True
    assert met(spec, "BAD idea") is False


def test_contains_on_empty_response():
    assert met({"type": "contains", "any_of": ["x"]}, "") is False
    assert met({"type": "not_contains", "any_of": ["x"]}, "") is True


def test_contains_unicode_ignore_case():
    assert met({"type": "contains", "any_of": ["ÉCOLE"]}, "à l'école") is True
    assert met({"type": "contains", "any_of": ["你好"]}, "他说你好。") is True
    assert met({"type": "contains", "any_of": ["ÉCOLE"], "ignore_case": False}, "à l'école") is False


# --------------------------------------------------------------------------- length


@pytest.mark.parametrize(
    "bounds, expected",
    [
        ({"min": 4}, True),  # 4 >= 4
        ({"min": 5}, False),  # 4 < 5
        ({"max": 4}, True),  # 4 <= 4
        ({"max": 3}, False),  # 4 > 3
        ({"min": 2, "max": 6}, True),
        ({"min": 4, "max": 4}, True),
    ],
)
def test_length_in_words(bounds, expected):
    response = "one two  three\n\tfour"  # runs of whitespace separate 4 words
    assert met({"type": "length", "unit": "words", **bounds}, response) is expected


def test_length_unit_defaults_to_words():
    # "a b c" is 3 words but 5 chars: max 3 only passes when counting words.
    assert met({"type": "length", "max": 3}, "a b c") is True
    assert met({"type": "length", "unit": "chars", "max": 3}, "a b c") is False


def test_length_in_chars_counts_code_points():
    assert met({"type": "length", "unit": "chars", "min": 5, "max": 5}, "héllo") is True  # 5 code points
    assert met({"type": "length", "unit": "chars", "max": 1}, "😀") is True  # 1 code point
    assert met({"type": "length", "unit": "chars", "min": 3}, "你好") is False  # 2 < 3


def test_length_unicode_words():
    assert met({"type": "length", "min": 2, "max": 2}, "你好 世界") is True  # 2 whitespace-separated words


def test_length_on_empty_response():
    assert met({"type": "length", "min": 1}, "") is False  # 0 words < 1
    assert met({"type": "length", "max": 0}, "") is True  # 0 <= 0
    assert met({"type": "length", "max": 0}, "   \n ") is True  # whitespace only: 0 words
    assert met({"type": "length", "unit": "chars", "max": 0}, "   ") is False  # 3 chars > 0


def test_length_evidence_reports_size():
    result = run_check(check(type="length", unit="words", min=1, max=2), "a b c")
    assert not result.met
    assert "3 words" in result.evidence


# --------------------------------------------------------------------------- json_valid


@pytest.mark.parametrize(
    "response, expected",
    [
        ('{"a": 1}', True),
        ("  [1, 2, 3]\n", True),  # surrounding whitespace is allowed
        ('"ünïcödé 😀"', True),
        ("42", True),
        ('{"a": 1', False),
        ("", False),  # empty response
        ("```json\n{}\n```", False),  # a fenced block is not JSON
        ("{'a': 1}", False),  # single quotes
        ('{"a": 1} trailing', False),
    ],
)
def test_json_valid(response, expected):
    assert met({"type": "json_valid"}, response) is expected


def test_json_valid_deeply_nested_response_is_unmet_not_a_crash():
    result = run_check(JsonValidCheck(type="json_valid"), "[" * 100_000)
    assert result.met is False


# --------------------------------------------------------------------------- tagged_span


@pytest.mark.parametrize(
    "response, expected",
    [
        ("The answer is <answer>42</answer>.", True),
        ("<answer>\nline one\nline two\n</answer>", True),  # spans may cover several lines
        ("<answer>ñandú 😀</answer>", True),
        ("The answer is 42.", False),  # no span
        ("<answer>1</answer> or <answer>2</answer>", False),  # two spans, need exactly one
        ("<answer></answer>", False),  # empty
        ("<answer>  \n\t </answer>", False),  # whitespace only counts as empty
        ("<answer>42", False),  # unclosed
        ("<Answer>42</Answer>", False),  # tags are case-sensitive
        ("", False),
    ],
)
def test_tagged_span_exactly_one_non_empty(response, expected):
    assert met({"type": "tagged_span", "tag": "answer"}, response) is expected


def test_tagged_span_evidence_and_helper():
    assert tagged_spans("a", "<a>x</a> <a>y</a>") == ["x", "y"]
    assert "2 <a> spans" in run_check(check(type="tagged_span", tag="a"), "<a>x</a> <a>y</a>").evidence
    assert "empty" in run_check(check(type="tagged_span", tag="a"), "<a> </a>").evidence


def test_tagged_span_tag_with_dash_is_literal():
    spec = {"type": "tagged_span", "tag": "final-answer"}
    assert met(spec, "<final-answer>B</final-answer>") is True
    assert met(spec, "<finalXanswer>B</finalXanswer>") is False


# --------------------------------------------------------------------------- dispatch


def test_run_check_rejects_an_unknown_object():
    with pytest.raises(TypeError):
        run_check(object(), "x")  # type: ignore[arg-type]


def test_checks_are_built_as_the_right_classes():
    assert isinstance(check(type="regex", pattern="a"), RegexCheck)
    assert isinstance(check(type="contains", any_of=["a"]), ContainsCheck)
    assert isinstance(check(type="not_contains", any_of=["a"]), ContainsCheck)
    assert isinstance(check(type="length", max=3), LengthCheck)
    assert isinstance(check(type="json_valid"), JsonValidCheck)
    assert isinstance(check(type="tagged_span", tag="a"), TaggedSpanCheck)


# --------------------------------------------------------------------------- invalid specs


@pytest.mark.parametrize(
    "spec, needle",
    [
        ({"type": "regex", "pattern": "(unclosed"}, "invalid regular expression"),
        ({"type": "regex", "pattern": "[a-"}, "invalid regular expression"),
        ({"type": "regex", "pattern": "a", "min_count": 3, "max_count": 2}, "max_count must be >= min_count"),
        ({"type": "regex", "pattern": "a", "min_count": -1}, "greater than or equal to 0"),
        ({"type": "length"}, "needs `min`, `max` or both"),
        ({"type": "length", "unit": "words", "min": 5, "max": 2}, "max must be >= min"),
        ({"type": "length", "unit": "lines", "max": 2}, "chars"),
        ({"type": "length", "min": -1}, "greater than or equal to 0"),
        ({"type": "contains", "any_of": []}, "at least 1"),
        ({"type": "tagged_span", "tag": "has space"}, "pattern"),
        ({"type": "tagged_span", "tag": "1abc"}, "pattern"),
        ({"type": "json_valid", "strict": True}, "Extra inputs"),
        ({"type": "python", "code": "print(1)"}, "does not match any of the expected tags"),
        ({"pattern": "a"}, "Unable to extract tag"),
    ],
)
def test_invalid_check_specs_are_rejected(spec, needle):
    with pytest.raises(ValidationError) as info:
        CHECK.validate_python(spec)
    assert needle in str(info.value)
    # The same spec inside a criterion is rejected too.
    with pytest.raises(ValidationError):
        Criterion(id="c1", text="t", check=spec)


@pytest.mark.parametrize(
    "spec, field, needle",
    [
        ({"type": "regex", "pattern": "(a"}, "criteria[0].check.pattern", "invalid regular expression"),
        ({"type": "regex", "pattern": "a", "min_count": 2, "max_count": 1}, "criteria[0].check",
         "max_count must be >= min_count"),
        ({"type": "length", "unit": "chars"}, "criteria[0].check", "needs `min`, `max` or both"),
        ({"type": "shell", "cmd": "ls"}, "criteria[0].check", "regex, contains, not_contains"),
    ],
)
def test_invalid_check_in_a_rubric_names_the_field(spec, field, needle):
    data = {"criteria": [{"id": "c1", "text": "t", "check": spec}, {"id": "c2", "text": "u"}]}
    with pytest.raises(RubricError) as info:
        rubric_from_data(data, source="r.yaml")
    fields = [p.field for p in info.value.problems]
    assert field in fields
    assert needle in str(info.value)


def test_regex_with_huge_repetition_count_is_a_rubric_error():
    data = {"criteria": [{"id": "c1", "text": "t", "check": {"type": "regex", "pattern": "a{99999999999}"}}]}
    with pytest.raises(RubricError) as info:
        rubric_from_data(data, source="r.yaml")
    assert "criteria[0].check.pattern" in str(info.value)
