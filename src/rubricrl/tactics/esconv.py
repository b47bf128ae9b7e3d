"""ESConv's strategy files (`devWithStrategy_short.tsv` and its train/test siblings), read as they
are distributed.

One line per supporter utterance to predict, holding it and up to four turns before it. Segments
are joined by " EOS " (there are no tabs, despite the name); each is `<weight> <speaker> <turn>
<text>`, speaker 0 the seeker and 1 the supporter, turn numbers counting from 0 within a dialogue,
and a supporter's text starts with its strategy in brackets: `[Questions] How are you feeling?`.
The last segment is the line's target. Strategies are mapped onto a taxonomy's names through its
aliases (ESConv's "Questions" is esconv8's "Question").

- `esconv_examples`: one fit example per line: the target, the seeker's last message and the
  supporter's previous turn within the line.
- `esconv_conversations`: the dialogues rebuilt from the overlapping lines, in the conversations
  JSONL shape, each supporter message carrying its `gold_tactics`. A dialogue ends where the
  target's turn number stops rising or a turn's text differs from the same turn on earlier lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rubricrl.core.jsonl import iter_jsonl
from rubricrl.core.problems import Problem, RubricError
from rubricrl.tactics.classifier import TurnExample
from rubricrl.tactics.taxonomy import Taxonomy

ESCONV_FORMAT = ("ESConv TSV as distributed (devWithStrategy_short.tsv): one supporter turn per line, segments "
                 "\"<weight> <speaker 0|1> <turn> <text>\" joined by \" EOS \", supporter texts starting with "
                 "\"[Strategy]\"")
_SEGMENT = re.compile(r"(\d+(?:\.\d+)?) ([01]) (\d+)(?: (.*))?", re.S)
_STRATEGY = re.compile(r"\[([^\[\]]+)\]\s*(.*)", re.S)


@dataclass(frozen=True)
class Segment:
    supporter: bool
    turn: int
    text: str
    tactic: str | None  # the strategy as a taxonomy name; None for the seeker or an unlabeled turn


@dataclass(frozen=True)
class EsconvLine:
    line: int
    segments: tuple[Segment, ...]

    @property
    def target(self) -> Segment:
        return self.segments[-1]

    def last(self, supporter: bool) -> str:
        """The text of the last seeker (or supporter) turn before the target on this line, or ""."""
        return next((s.text for s in reversed(self.segments[:-1]) if s.supporter == supporter), "")


def split_segments(text: str) -> list[tuple[bool, int, str, str | None]] | None:
    """(supporter, turn, text, strategy as written) per segment, or None if `text` is not an ESConv line."""
    out = []
    for raw in text.split(" EOS "):
        match = _SEGMENT.fullmatch(raw.strip())
        if match is None:
            return None
        supporter, body = match.group(2) == "1", (match.group(4) or "").strip()
        labeled = _STRATEGY.fullmatch(body) if supporter else None
        strategy = labeled.group(1).strip() if labeled else None
        out.append((supporter, int(match.group(3)), labeled.group(2).strip() if labeled else body, strategy))
    return out


def looks_like_esconv(text: str) -> bool:
    return split_segments(text) is not None


def read_esconv(path: Path, taxonomy: Taxonomy, *, why: str = "") -> list[EsconvLine]:
    """Every line of an ESConv file, strategies mapped onto `taxonomy`. A line that is not in the
    format, a target that is not a supporter turn, or an unknown strategy is a RubricError naming
    the file and line (`why` says why the file was read as ESConv, for that message)."""
    lines = []
    for number, text in iter_jsonl(path, errors="replace"):
        parsed = split_segments(text)
        if parsed is None:
            raise RubricError([Problem(str(path), number, "", f"not an ESConv line{why}",
                                       f"expected {ESCONV_FORMAT}")])
        if not parsed[-1][0]:
            raise RubricError([Problem(str(path), number, "", "the last segment (the turn to label) is the "
                                       "seeker's (speaker 0); ESConv lines end with a supporter turn (speaker 1)")])
        segments = tuple(Segment(supporter, turn, body, taxonomy.canonical(strategy, str(path), number, "strategy")
                                 if strategy is not None else None) for supporter, turn, body, strategy in parsed)
        lines.append(EsconvLine(number, segments))
    return lines


def esconv_examples(lines: list[EsconvLine], path: Path) -> list[TurnExample]:
    """One labeled example per line; a target without a [Strategy] is a located error."""
    examples = []
    for ln in lines:
        if ln.target.tactic is None:
            raise RubricError([Problem(str(path), ln.line, "strategy", "the last segment (the turn to learn) has "
                                       "no [Strategy] label", "start the supporter's text with e.g. [Questions]")])
        examples.append(TurnExample(ln.target.text, frozenset([ln.target.tactic]), ln.last(False), ln.last(True)))
    return examples


def esconv_conversations(lines: list[EsconvLine]) -> list[dict]:
    """The dialogues, each `{"id": "line-N" (its first line), "messages": [...]}`; supporter messages
    carry `gold_tactics` (a list) when the file labels them."""
    dialogues: list[tuple[int, dict[int, Segment]]] = []
    last_target = -1
    for ln in lines:
        turns = dialogues[-1][1] if dialogues else None
        continues = (turns is not None and ln.target.turn > last_target
                     and all(turns.get(s.turn, s) == s for s in ln.segments))
        if not continues:
            dialogues.append((ln.line, {}))
        dialogues[-1][1].update({s.turn: s for s in ln.segments})
        last_target = ln.target.turn
    rows = []
    for first, turns in dialogues:
        messages = []
        for _, s in sorted(turns.items()):
            message: dict = {"role": "assistant" if s.supporter else "user", "content": s.text}
            if s.tactic is not None:
                message["gold_tactics"] = [s.tactic]
            messages.append(message)
        rows.append({"id": f"line-{first}", "messages": messages})
    return rows
