"""Reader for the ESConv dev split with strategy labels (../shared/data/esconv/, CC BY-NC 4.0).
Used by benchmarks and tests only; the data is never shipped in the package."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# ../shared beside the checkout (as on the project's machines and in CI); override with ESCONV_TSV.
DEFAULT_PATH = Path(os.environ.get("ESCONV_TSV") or Path(__file__).resolve().parents[2] / "shared" / "data" / "esconv"
                    / "devWithStrategy_short.tsv")

# Each ESConv strategy read as a rubric criterion (the wording is ours).
STRATEGY_CRITERIA = {
    "Questions": "The reply asks the person a question.",
    "Self-disclosure": "The reply shares a personal experience of the supporter.",
    "Reflection of feelings": "The reply reflects the person's feelings back to them.",
    "Providing Suggestions": "The reply suggests something the person could do.",
    "Affirmation and Reassurance": "The reply reassures or affirms the person.",
    "Restatement or Paraphrasing": "The reply restates or paraphrases what the person said.",
    "Information": "The reply gives factual information.",
}


@dataclass(frozen=True)
class Turn:
    speaker: str  # "seeker" | "supporter"
    index: int
    text: str
    strategy: str | None


@dataclass(frozen=True)
class Example:
    context: tuple[Turn, ...]
    target: Turn

    @property
    def last_seeker(self) -> str:
        return next((t.text for t in reversed(self.context) if t.speaker == "seeker"), "")


def parse_line(line: str) -> Example:
    turns = []
    for segment in line.rstrip("\r\n").split(" EOS "):
        parts = segment.strip().split(" ", 3)
        parts += [""] * (4 - len(parts))
        speaker = "supporter" if parts[1] == "1" else "seeker"
        text, strategy = parts[3].strip(), None
        match = re.match(r"\[([^\]]+)\]\s*(.*)", text)
        if speaker == "supporter" and match:
            strategy, text = match.group(1), match.group(2).strip()
        turns.append(Turn(speaker, int(parts[2]) if parts[2].isdigit() else -1, text, strategy))
    return Example(tuple(turns[:-1]), turns[-1])


def load_esconv(path: Path = DEFAULT_PATH) -> list[Example]:
    with open(path, encoding="utf-8") as handle:
        return [parse_line(line) for line in handle if line.strip()]


# ESConv's labels as spelled in the data -> the bundled esconv8 taxonomy's names.
TO_ESCONV8 = {"Questions": "Question", "Other": "Others"}


def previous_supporter(example: Example) -> Turn | None:
    return next((t for t in reversed(example.context) if t.speaker == "supporter"), None)
