"""Files for tactic work: conversations in, labeled conversations out, and training examples.

Conversations JSONL: `{"id": ..., "messages": [{"role": "user"|"assistant", "content": ...}, ...]}`.
Labeled output adds to every assistant message `tactics` (a list) and `tactic_probs`.
Stickiness reads `tactics` (a list or one string) from assistant messages.
Fit data: JSONL of `{text, tactics: [...] | tactic: "...", context?, previous?}`, or a taxonomy
YAML whose examples are used.
ESConv's TSV files (tactics/esconv.py) are read directly as conversations and as fit data. The
format is told by the extension (.jsonl/.json, .tsv/.csv, .yaml/.yml), else by the first line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from rubricrl.core.jsonl import iter_jsonl, read_text, write_jsonl
from rubricrl.core.problems import Problem, RubricError
from rubricrl.tactics.classifier import TacticClassifier, TurnExample
from rubricrl.tactics.esconv import (ESCONV_FORMAT, esconv_conversations, esconv_examples, looks_like_esconv,
                                     read_esconv)
from rubricrl.tactics.metrics import Stickiness, stickiness
from rubricrl.tactics.novelty import supporter_turns
from rubricrl.tactics.taxonomy import load_taxonomy

CONVERSATIONS_FORMAT = ("conversations JSONL (.jsonl): one {\"id\": ..., \"messages\": [{\"role\": \"user\"|\"assistant\", "
                        "\"content\": ...}, ...]} per line")
EXAMPLES_FORMAT = ("labeled turns JSONL (.jsonl): one {\"text\": ..., \"tactics\": [...] or \"tactic\": ..., "
                   "\"context\"?, \"previous\"?} per line")
TAXONOMY_FORMAT = "a taxonomy YAML (.yaml: name, tactics: [{name, description, examples}]) or a bundled name (esconv8, mint10)"
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".tsv": "esconv", ".csv": "esconv",
               ".yaml": "taxonomy", ".yml": "taxonomy"}


def _unsupported(path: Path, line: int | None, message: str, formats: list[str]) -> RubricError:
    return RubricError([Problem(str(path), line, "", message, "give " + "; or ".join(formats))])


def file_format(path: Path, formats: dict[str, str]) -> str:
    """Which of `formats` (kind -> description: jsonl, esconv, taxonomy) the file is in: by its
    extension, else by its first line (or, for a taxonomy, by parsing it). A file in none is a
    RubricError naming the file, the line and the expected formats."""
    kind = _EXTENSIONS.get(path.suffix.lower())
    if kind in formats:
        return kind
    if kind is not None:
        raise _unsupported(path, None, f"{path.suffix} files are not read here", list(formats.values()))
    first = next(iter_jsonl(path, errors="replace"), None)
    if first is None:
        raise _unsupported(path, None, "the file is empty", list(formats.values()))
    line, text = first
    if "esconv" in formats and looks_like_esconv(text):
        return "esconv"
    if "jsonl" in formats and text.lstrip().startswith("{"):
        return "jsonl"
    if "taxonomy" in formats:
        try:
            data = yaml.safe_load(read_text(path))
        except (yaml.YAMLError, ValueError):
            data = None
        if isinstance(data, dict) and "tactics" in data:
            return "taxonomy"
    raise _unsupported(path, line, "not in a format read here (judged by this first line, as the name has no "
                       "known extension)", list(formats.values()))


def read_jsonl(path: Path, formats: tuple[str, ...] = (CONVERSATIONS_FORMAT,)) -> Iterator[tuple[int, dict]]:
    for line, text in iter_jsonl(path):
        try:
            row = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise RubricError([Problem(str(path), line, "", f"malformed JSON: {exc}",
                                       "give " + "; or ".join(formats))]) from None
        if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
            raise RubricError([Problem(str(path), line, "messages", "each row needs a `messages` list",
                                       "write {\"id\": ..., \"messages\": [{role, content}, ...]}")])
        yield line, row


def read_conversations(path: Path) -> list[dict]:
    """Conversations from conversations JSONL or an ESConv TSV (dialogues rebuilt, gold labels kept)."""
    kind = file_format(path, {"jsonl": CONVERSATIONS_FORMAT, "esconv": ESCONV_FORMAT})
    if kind == "esconv":
        return esconv_conversations(read_esconv(path, load_taxonomy("esconv8"), why=_why(path)))
    return [row for _, row in read_jsonl(path, (CONVERSATIONS_FORMAT, ESCONV_FORMAT))]


def _why(path: Path) -> str:
    if _EXTENSIONS.get(path.suffix.lower()) == "esconv":
        return f" (read as ESConv because the name ends in {path.suffix})"
    return " (read as ESConv because the first line is one)"


def label_conversations(src: Path, dst: Path, classifier: TacticClassifier, threshold: float = 0.5,
                        progress: Callable[[int, int], None] | None = None) -> tuple[int, int]:
    """Label every assistant turn of `src` into `dst`; returns (conversations, turns)."""
    return label_rows(read_conversations(src), dst, classifier, threshold, progress)


def label_rows(rows: list[dict], dst: Path, classifier: TacticClassifier, threshold: float = 0.5,
               progress: Callable[[int, int], None] | None = None) -> tuple[int, int]:
    """Label every assistant turn of `rows` (conversations) into `dst`. All turns go to the
    classifier at once, so their embeddings are computed in batches; `progress(done, total)` is
    called as they are."""
    turns = [supporter_turns(row["messages"]) for row in rows]
    flat = [t for row_turns in turns for t in row_turns]
    probs = classifier.probabilities(flat, progress=progress)
    k = 0
    for row in rows:
        for message in row["messages"]:
            if message.get("role") == "assistant":
                message["tactics"] = sorted(classifier.labels(probs[k], threshold))
                message["tactic_probs"] = {t: round(float(p), 4) for t, p in zip(classifier.tactics, probs[k])}
                k += 1
    write_jsonl(dst, rows)
    return len(rows), len(flat)


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


def fit_examples(source: str | Path, taxonomy: str | None = None) -> tuple[list[TurnExample], list[str], str]:
    """Examples, tactic names and taxonomy name from labeled turns JSONL, an ESConv TSV or a
    taxonomy. Labels are mapped onto `taxonomy` (name or YAML; esconv8 for ESConv files) through
    its aliases, and an unknown label is an error; without one, JSONL labels are taken as written."""
    path = Path(source)
    if not path.is_file():
        found = load_taxonomy(source)
        return _taxonomy_examples(found)
    formats = {"jsonl": EXAMPLES_FORMAT, "esconv": ESCONV_FORMAT, "taxonomy": TAXONOMY_FORMAT}
    kind = file_format(path, formats)
    if kind == "taxonomy":
        return _taxonomy_examples(load_taxonomy(path))
    scheme = load_taxonomy(taxonomy or "esconv8") if taxonomy or kind == "esconv" else None
    if kind == "esconv":
        examples = esconv_examples(read_esconv(path, scheme, why=_why(path)), path)
        names = []
    else:
        examples, names = _jsonl_examples(path, scheme, formats)
    if not examples:
        raise RubricError([Problem(str(path), None, "", "no examples in the file")])
    if scheme is not None:  # the taxonomy's order; tactics without examples cannot be learned
        used = {t for e in examples for t in e.tactics}
        return examples, [n for n in scheme.names if n in used], scheme.name
    return examples, names, path.stem


def _taxonomy_examples(taxonomy) -> tuple[list[TurnExample], list[str], str]:
    examples = [TurnExample(e, frozenset([t.name])) for t in taxonomy.tactics for e in t.examples]
    return examples, taxonomy.names, taxonomy.name


def _jsonl_examples(path: Path, scheme, formats: dict[str, str]) -> tuple[list[TurnExample], list[str]]:
    """The examples and their tactic names in order of first appearance."""
    examples, names = [], []
    for line, text in iter_jsonl(path):
        try:
            row = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise RubricError([Problem(str(path), line, "", f"malformed JSON: {exc}",
                                       "give " + "; or ".join(formats.values()))]) from None
        if not isinstance(row, dict):
            raise RubricError([Problem(str(path), line, "", "a row must be a JSON object")])
        tactics = row.get("tactics") or ([row["tactic"]] if row.get("tactic") else [])
        if isinstance(tactics, str):
            tactics = [tactics]
        if (not isinstance(row.get("text"), str) or not row["text"].strip() or not isinstance(tactics, list)
                or not tactics or not all(isinstance(t, str) for t in tactics)):
            raise RubricError([Problem(str(path), line, "text/tactics", "needs non-empty `text` and "
                                       "`tactics` (list) or `tactic`")])
        if scheme is not None:
            tactics = [scheme.canonical(t, str(path), line) for t in tactics]
        examples.append(TurnExample(row["text"], frozenset(tactics), row.get("context", ""), row.get("previous", "")))
        names += [t for t in tactics if t not in names]
    return examples, names
