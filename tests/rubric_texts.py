"""Rubric texts shared by the CLI tests (rule checks only: no model loads)."""

RULES_RUBRIC = """
id: rules-only
criteria:
  - id: sorry
    text: Says sorry.
    weight: 2
    check: {type: contains, any_of: [sorry]}
  - id: short
    text: At most 10 words.
    weight: 1
    check: {type: length, unit: words, max: 10}
  - id: no-calm-down
    text: Never says calm down.
    weight: 1
    kind: hard_rule
    check: {type: not_contains, any_of: [calm down]}
  - id: lecture
    text: Uses the word should.
    weight: -1
    check: {type: regex, pattern: "\\\\bshould\\\\b", ignore_case: true}
"""
