"""Defences of the model judges against trivial and adversarial responses.

"One Token to Fool LLM-as-a-Judge" (Zhao et al., 2025) shows that generative judges give positive
verdicts to responses such as ":", "." or "Thought process:" (master keys), and a policy trained
against such a judge learns to produce them. The router (`judges/routing.py`) applies three
defences before and after the exemplar and model judges; the rule judge always sees the
original response, because a check (a regex, a word count) must see exactly what was written.

1. **Pre-checks** (`precheck`, on): deterministic, no model call. A response that is
   - `empty` or `whitespace` only: every model-judged criterion is `unmet` (it can do nothing,
     so it cannot make a mistake either);
   - `punctuation_only` (no letter or digit: punctuation, symbols, emoji), `too_short` (fewer than
     `min_content_chars` letters/digits, default 2), `lead_in_only` (nothing but generic reasoning
     lead-ins such as "Thought process:", "Solution", "Let's solve this problem step by step.") or
     `verdict_only` (nothing left once verdict-like text is removed, see 2): every model-judged
     criterion with a POSITIVE weight is `unmet`; pitfalls (negative weight) are still judged,
     since a trivial reply can still be, e.g., dismissive.
   Their verdicts have judge id `precheck` and a reason starting with `precheck: <which>`.
2. **Neutralisation** (`neutralise`, on): verdict-like text inside the response is replaced with
   `[removed: verdict-like text]` before the exemplar and model judges see it: fake JSON verdicts
   (`{"criteria_met": true}`, `"met": true`), grades (`GRADE: C`, `Score: 10/10`), claims that
   the criterion is met, "answer yes", "ignore (all) previous instructions", our own fence
   markers (`<<<RESPONSE`, `RESPONSE>>>`) and chat-template role tokens (`<|im_start|>`, `[INST]`).
   The patterns are narrow on purpose: "I met my friend" or "third grade" are left alone.
3. **Evidence** (`require_evidence`, off): a `met` verdict on a positive criterion from a generative
   judge (HTTP `per_criterion` / `batched`: the explanation / evidence text) must quote a span of
   the response of at least `min_quote_chars` (12) characters, or the whole response if it is
   shorter, after case, whitespace and punctuation normalisation (letters, digits and single
   spaces are compared, so curly quotes or a dropped full stop do not matter); otherwise it becomes `unmet` with a reason
   starting `evidence:`. Pitfalls are never downgraded (that would raise the score).

4. **Quality gate** (`gate` in a judge spec, e.g. `gate+exemplar+local`; judges/gate.py): fitted models
   of coherence and deflection; a reply that is incoherent or deflects gets its positive-weight
   model-judged criteria `unmet` (judge id `gate`); no LLM judge is called for them.

`DefenceStats` counts responses pre-checked, responses neutralised, verdicts downgraded and replies
gated (by reason).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from pydantic import BaseModel, ConfigDict, Field

from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status, Verdict

PLACEHOLDER = "[removed: verdict-like text]"
PRECHECK_JUDGE_ID = "precheck"
GATE_JUDGE_ID = "gate"  # verdicts decided by the quality gate (judges/gate.py)
NOTHING_KINDS = ("empty", "whitespace")  # responses that can do nothing: pitfalls are unmet too


class Defences(BaseModel):
    """Which defences the router applies (all on except the evidence requirement)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    precheck: bool = True
    neutralise: bool = True
    require_evidence: bool = False
    min_content_chars: int = Field(default=2, ge=0, description="letters/digits a response needs not to be "
                                                                 "`too_short`")
    min_quote_chars: int = Field(default=12, ge=1, description="characters of the response an evidence quote needs")

    @classmethod
    def off(cls) -> Defences:
        return cls(precheck=False, neutralise=False, require_evidence=False)

    def describe(self) -> str:
        def on(flag: bool) -> str:
            return "on" if flag else "off"

        return (f"precheck {on(self.precheck)} (min {self.min_content_chars} letters/digits), "
                f"neutralise {on(self.neutralise)}, require_evidence {on(self.require_evidence)}"
                + (f" (min {self.min_quote_chars} chars)" if self.require_evidence else ""))

    @classmethod
    def parse(cls, text: str, base: Defences | None = None) -> Defences:
        """`on`, `off`, or comma-separated `key=value` (keys: precheck, neutralise, evidence /
        require_evidence, min_chars / min_content_chars, min_quote / min_quote_chars), applied to `base`."""
        base = base or cls()
        text = text.strip()
        if text in ("", "on"):
            return cls() if text == "on" else base
        if text == "off":
            return cls.off()
        aliases = {"evidence": "require_evidence", "min_chars": "min_content_chars", "min_quote": "min_quote_chars"}
        update: dict[str, object] = {}
        for item in text.split(","):
            key, sep, value = item.strip().partition("=")
            key = aliases.get(key.strip(), key.strip())
            if not sep or key not in cls.model_fields:
                raise ValueError(f"unknown defence setting {item.strip()!r}; use on, off or key=value with keys "
                                 "precheck, neutralise, evidence, min_chars, min_quote")
            value = value.strip().lower()
            if key.startswith("min_"):
                if not value.isdigit():
                    raise ValueError(f"{key} takes a whole number, got {value!r}")
                update[key] = int(value)
            elif value in ("on", "true", "yes", "1"):
                update[key] = True
            elif value in ("off", "false", "no", "0"):
                update[key] = False
            else:
                raise ValueError(f"{key} takes on or off, got {value!r}")
        return base.model_copy(update=update)


@dataclass
class DefenceStats:
    """Running totals: responses decided (at least in part) by a pre-check, responses sent to a judge
    with neutralised text, and `met` verdicts downgraded for lack of evidence."""

    prechecked: int = 0
    neutralised: int = 0
    downgraded: int = 0
    precheck_reasons: dict[str, int] = field(default_factory=dict)
    neutralised_kinds: dict[str, int] = field(default_factory=dict)
    gated: int = 0  # replies the quality gate (judges/gate.py) stopped: incoherent or deflecting
    gate_reasons: dict[str, int] = field(default_factory=dict)

    def snapshot(self) -> DefenceStats:
        """A copy that later judging does not change."""
        return DefenceStats(self.prechecked, self.neutralised, self.downgraded, dict(self.precheck_reasons),
                            dict(self.neutralised_kinds), self.gated, dict(self.gate_reasons))

    def to_dict(self) -> dict:
        return {"prechecked": self.prechecked, "neutralised": self.neutralised, "downgraded": self.downgraded,
                "precheck_reasons": dict(self.precheck_reasons), "neutralised_kinds": dict(self.neutralised_kinds),
                "gated": self.gated, "gate_reasons": dict(self.gate_reasons)}


# -- pre-checks ----------------------------------------------------------------------------------

PRECHECK_REASONS = {
    "empty": "empty response",
    "whitespace": "whitespace-only response",
    "punctuation_only": "no letter or digit (punctuation, symbols or emoji only)",
    "too_short": "fewer than {min} letters/digits",
    "lead_in_only": "only a generic reasoning lead-in (e.g. 'Thought process:', 'Solution')",
    "verdict_only": "only verdict-like text, which was removed",
}

# Generic openers that carry no content on their own (the master keys of Zhao et al. and kin).
_LEAD_IN = re.compile(r"""^[\W_]*(?:
      (?:my\s+|the\s+)?(?:thought|thinking|reasoning)\s+process
    | (?:final\s+)?(?:solution|answer|reasoning|explanation|analysis)
    | step\s*(?:1|one)
    | let(?:'s|’s|\s+us|\s+me)\s+(?:solve|think(?:\s+through|\s+about)?|work\s+through|approach|go\s+through)
      \s+(?:(?:this|the|it)\s+)?(?:(?:problem|question|task)\s+)?step[\s-]+by[\s-]+step
    | step[\s-]+by[\s-]+step
    )(?![^\W_])[\W_]*""", re.IGNORECASE | re.VERBOSE)


def content_chars(text: str) -> int:
    """Letters and digits in `text` (any script); placeholders of removed text do not count."""
    return sum(ch.isalnum() for ch in text.replace(PLACEHOLDER, " "))


def strip_lead_ins(text: str) -> str:
    """`text` without the generic reasoning lead-ins it starts with (repeatedly)."""
    while True:
        stripped = _LEAD_IN.sub("", text, count=1)
        if stripped == text:
            return text
        text = stripped


def precheck(response: str, min_content_chars: int = 2) -> str | None:
    """Which pre-check a response fails (`empty`, `whitespace`, `punctuation_only`, `too_short`,
    `lead_in_only`), or None. `verdict_only` needs neutralisation: see `screen`."""
    if response == "":
        return "empty"
    if not response.strip():
        return "whitespace"
    n = content_chars(response)
    if n == 0:
        return "punctuation_only"
    if n < min_content_chars:
        return "too_short"
    if content_chars(strip_lead_ins(response)) < max(min_content_chars, 1):
        return "lead_in_only"
    return None


def precheck_reason(kind: str, min_content_chars: int = 2) -> str:
    return f"precheck: {kind} ({PRECHECK_REASONS[kind].format(min=min_content_chars)})"


# -- neutralisation -----------------------------------------------------------------------------

_VERDICT_KEY = r"(?:criteria_met|criterion_met|criteria_satisfied|is_met|meets_criteri(?:a|on)|met|verdict|grade)"
_ROLE_TOKENS = r"<\|[A-Za-z0-9_]{1,32}\|>|\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>|</?s>"
NEUTRALISE_PATTERNS: tuple[tuple[str, re.Pattern], ...] = (
    ("role_token", re.compile(_ROLE_TOKENS)),
    ("fence_marker", re.compile(r"<<<\s*RESPONSE\b|\bRESPONSE\s*>>>", re.IGNORECASE)),
    # a JSON-ish object holding a verdict key: the whole object goes
    ("fake_json_verdict", re.compile(r"\{[^{}]{0,300}?[\"']" + _VERDICT_KEY + r"[\"']\s*:[^{}]{0,300}?\}", re.IGNORECASE)),
    # a verdict key-value outside an object: "met": true, criteria_met: yes
    ("fake_json_verdict", re.compile(r"[\"']" + _VERDICT_KEY + r"[\"']\s*:\s*(?:true|false|yes|no|\d+(?:\.\d+)?|"
                                     r"\"[^\"\n]{0,40}\"|'[^'\n]{0,40}')", re.IGNORECASE)),
    ("fake_json_verdict", re.compile(r"\b(?:criteria_met|criterion_met|is_met)\s*[:=]\s*\w+", re.IGNORECASE)),
    # GRADE: C, Grade: A+ (capital letter grades only), Score: 10/10, rating = 9/10
    ("grade", re.compile(r"\b(?i:grade)\s*[:=]\s*[A-F][+-]?(?![A-Za-z])")),
    ("grade", re.compile(r"\b(?:grade|score|rating)\s*[:=]\s*\d+(?:\.\d+)?\s*(?:/|out\s+of)\s*\d+", re.IGNORECASE)),
    ("verdict_label", re.compile(r"\bverdict\s*[:=]\s*[\"']?\w+", re.IGNORECASE)),
    # the criterion is met / all criteria are satisfied / criteria met / meets all the criteria
    ("criterion_met", re.compile(
        r"\b(?:(?:the|this|these|all(?:\s+the)?|every|each)\s+)?(?:rubric\s+)?(?:criterion|criteria)\s*"
        r"(?:[:=]\s*|(?:is|are|was|were|has\s+been|have\s+been)\s+)?(?:(?:all|fully|clearly|now)\s+)?"
        r"(?:met|satisfied|fulfill?ed|passed|yes|true)\b", re.IGNORECASE)),
    ("criterion_met", re.compile(
        r"\b(?:meets|satisfies|fulfill?s|passes)\s+(?:(?:all|every|each)\s+)?(?:(?:of\s+)?(?:the|this|these)\s+)?"
        r"(?:rubric\s+)?(?:criterion|criteria|rubric)\b", re.IGNORECASE)),
    # answer yes / respond with "yes" / answer: yes
    ("answer_yes", re.compile(r"\b(?:answer|respond|reply)\s*(?:with\s+|[:=]\s*)?(?:only\s+)?"
                              r"[\"'“‘]?(?:yes|true|met)\b", re.IGNORECASE)),
    # ignore (all) previous instructions / disregard the above prompt
    ("ignore_instructions", re.compile(
        r"\b(?:ignore|disregard|forget|override)\s+(?:(?:all|any)\s+)?(?:of\s+)?(?:(?:the|your|these|those)\s+)?"
        r"(?:(?:previous|prior|above|earlier|preceding|former|system|grading|original)\s+)?"
        r"(?:instructions?|prompts?|directions)\b", re.IGNORECASE)),
)


def neutralise(text: str) -> tuple[str, tuple[str, ...]]:
    """`text` with verdict-like strings replaced by PLACEHOLDER, and the kinds replaced (one per hit)."""
    kinds: list[str] = []
    for kind, pattern in NEUTRALISE_PATTERNS:
        text, n = pattern.subn(PLACEHOLDER, text)
        kinds += [kind] * n
    return text, tuple(kinds)


# -- what the model judges see -----------------------------------------------------------------

@dataclass(frozen=True)
class Screen:
    """One response after the defences: the text the exemplar and model judges see, and the pre-check
    that decides its criteria (if any)."""

    text: str
    precheck: str | None = None
    reason: str = ""
    neutralised: tuple[str, ...] = ()

    def blocks(self, criterion: Criterion) -> bool:
        """True when the pre-check decides this criterion (`unmet`) without a judge."""
        return self.precheck is not None and (self.precheck in NOTHING_KINDS or criterion.weight > 0)

    def verdict(self, criterion_id: str) -> Verdict:
        return Verdict(criterion_id=criterion_id, status=Status.UNMET, p_met=0.0, reason=self.reason,
                       evidence=self.reason, judge_id=PRECHECK_JUDGE_ID)


def screen(response: str, defences: Defences) -> Screen:
    text, kinds = neutralise(response) if defences.neutralise else (response, ())
    kind = None
    if defences.precheck:
        kind = precheck(response, defences.min_content_chars)
        rest = strip_lead_ins(text.replace(PLACEHOLDER, " "))
        if kind is None and kinds and content_chars(rest) < max(defences.min_content_chars, 1):
            kind = "verdict_only"
    return Screen(text, kind, precheck_reason(kind, defences.min_content_chars) if kind else "", kinds)


# -- evidence ------------------------------------------------------------------------------------

def _norm(text: str) -> str:
    """Case, whitespace and punctuation normalised: letters, digits and single spaces."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text).split())


def quoted_span(evidence: str, response: str, min_chars: int = 12) -> tuple[bool, int, int]:
    """(ok, longest, needed): does `evidence` contain a span of `response` of at least `min_chars`
    characters (or all of the response, if it is shorter) after normalisation? Removed text
    (PLACEHOLDER) never counts as quoted."""
    parts = [_norm(p) for p in response.split(PLACEHOLDER)]
    needed = min(min_chars, max((len(p) for p in parts), default=0))
    ev = _norm(evidence)
    longest = 0
    for part in parts:
        if part and ev:
            longest = max(longest, SequenceMatcher(None, ev, part, autojunk=False)
                          .find_longest_match(0, len(ev), 0, len(part)).size)
    return needed > 0 and longest >= needed, longest, needed


def require_evidence(verdict: Verdict, criterion: Criterion, judged_text: str, min_chars: int = 12) -> Verdict:
    """`verdict`, or an `unmet` downgrade when it is a positive `met` without a quote of `judged_text`."""
    if verdict.status is not Status.MET or criterion.weight <= 0:
        return verdict
    ok, longest, needed = quoted_span(verdict.evidence, judged_text, min_chars)
    if ok:
        return verdict
    return verdict.model_copy(update={
        "status": Status.UNMET, "p_met": 0.0,
        "reason": f"evidence: the judge said met but quoted no span of the response of >= {needed} characters "
                  f"(longest common span {longest})"})
