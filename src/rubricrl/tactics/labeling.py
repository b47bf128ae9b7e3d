"""Files for tactic work: conversations in, labeled conversations out, and training examples.

Conversations JSONL: `{"id": ..., "messages": [{"role": "user"|"assistant", "content": ...}, ...]}`.
Labeled output adds to every assistant message `tactics` (a list) and `tactic_probs`.
Stickiness reads `tactics` (a list or one string) from assistant messages.
Fit data: JSONL of `{text, tactics: [...] | tactic: "...", context?, previous?}`, or a taxonomy
YAML whose examples are used.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from rubricrl.core.jsonl import iter_jsonl, write_jsonl
from rubricrl.core.problems import Problem, RubricError
from rubricrl.tactics.classifier import TacticClassifier, TurnExample
from rubricrl.tactics.metrics import Stickiness, stickiness
from rubricrl.tactics.novelty import supporter_turns
from rubricrl.tactics.taxonomy import load_taxonomy


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    for line, text in iter_jsonl(path):
        try:
            row = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise RubricError([Problem(str(path), line, "", f"malformed JSON: {exc}")]) from None
        if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
            raise RubricError([Problem(str(path), line, "messages", "each row needs a `messages` list",
                                       "write {\"id\": ..., \"messages\": [{role, content}, ...]}")])
        yield line, row


def label_conversations(src: Path, dst: Path, classifier: TacticClassifier, threshold: float = 0.5) -> int:
    rows = [row for _, row in read_jsonl(src)]

    def labeled() -> Iterator[dict]:
        for row in rows:
            turns = supporter_turns(row["messages"])
            probs = classifier.probabilities(turns)
            k = 0
            for message in row["messages"]:
                if message.get("role") == "assistant":
                    message["tactics"] = sorted(classifier.labels(probs[k], threshold))
                    message["tactic_probs"] = {t: round(float(p), 4) for t, p in zip(classifier.tactics, probs[k])}
                    k += 1
            yield row

    write_jsonl(dst, labeled())
    return len(rows)


def conversation_tactics(path: Path) -> list[list[set[str]]]:
    out = []
    for line, row in read_jsonl(path):
        turns = []
        for m in row["messages"]:
            if m.get("role") != "assistant":
                continue
            tactics = m.get("tactics")
            if isinstance(tactics, str):
                tactics = [tactics]
            if not isinstance(tactics, list) or not tactics:
                raise RubricError([Problem(str(path), line, "tactics", "an assistant message has no `tactics`",
                                           "label the file first with `rubricrl tactics classify`")])
            turns.append(set(tactics))
        out.append(turns)
    return out


def file_stickiness(path: Path) -> Stickiness:
    return stickiness(conversation_tactics(path))


def fit_examples(source: str | Path) -> tuple[list[TurnExample], list[str], str]:
    """Examples, tactic names and taxonomy name from a labeled JSONL file or a taxonomy."""
    path = Path(source)
    if path.suffix == ".jsonl":
        examples, names = [], []
        for line, text in iter_jsonl(path):
            try:
                row = json.loads(text)
            except (ValueError, RecursionError) as exc:
                raise RubricError([Problem(str(path), line, "", f"malformed JSON: {exc}")]) from None
            if not isinstance(row, dict):
                raise RubricError([Problem(str(path), line, "", "a row must be a JSON object")])
            tactics = row.get("tactics") or ([row["tactic"]] if row.get("tactic") else [])
            if not isinstance(row.get("text"), str) or not row["text"].strip() or not tactics:
                raise RubricError([Problem(str(path), line, "text/tactics", "needs non-empty `text` and "
                                           "`tactics` (list) or `tactic`")])
            examples.append(TurnExample(row["text"], frozenset(tactics), row.get("context", ""),
                                        row.get("previous", "")))
            names += [t for t in tactics if t not in names]
        return examples, names, path.stem
    taxonomy = load_taxonomy(source)
    examples = [TurnExample(e, frozenset([t.name])) for t in taxonomy.tactics for e in t.examples]
    return examples, taxonomy.names, taxonomy.name
