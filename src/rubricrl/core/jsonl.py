"""Reading and writing text files the one way rubricrl does it (stdlib only).

- User files are UTF-8, with or without a byte-order mark (`read_text`, `iter_jsonl`).
- JSONL is split on "\\n" only (a trailing "\\r" is dropped), never with `str.splitlines()`, which
  also splits on U+2028, U+0085 and the other Unicode line separators that may sit inside a value.
- A JSONL line is written with every such separator (and any lone surrogate) escaped as `\\uXXXX`
  (`dumps_line`), so that every tool, `splitlines()` included, sees exactly one record per line;
  NaN and infinities are refused (they are not JSON) unless the caller opts in.

Why: one U+2028 in a prompt used to make every later resume of an output file fail, and a BOM
written by a Windows editor made row 1 of a data file invalid.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# every character str.splitlines() splits on besides \n and \r (json.dumps escapes those, and the
# ones below U+0020); only U+0085, U+2028 and U+2029 can reach a dumped line raw
LINE_SEPARATORS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_RAW = re.compile("[\x85\u2028\u2029\ud800-\udfff]")
_BOM = b"\xef\xbb\xbf"


def read_text(path: str | Path) -> str:
    """A whole text file as UTF-8, a leading byte-order mark dropped."""
    return Path(path).read_text(encoding="utf-8-sig")


def escape_line_separators(text: str) -> str:
    """`text` (serialised JSON) with U+0085, U+2028, U+2029 and lone surrogates as \\uXXXX escapes.
    Those only occur inside JSON strings, where the escape means the same character."""
    return _RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dumps_line(obj: Any, *, allow_nan: bool = False) -> str:
    """`obj` as one JSON line (no newline at the end): non-ASCII text kept readable, every line
    separator escaped. Raises ValueError on NaN or infinity unless `allow_nan`."""
    return escape_line_separators(json.dumps(obj, ensure_ascii=False, allow_nan=allow_nan))


def iter_jsonl(path: str | Path, *, errors: str = "strict") -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line, numbered from 1 as an editor shows them. Lines
    end at "\\n" only; a "\\r" before it and a BOM at the start of the file are dropped. A line that
    is not UTF-8 raises ValueError naming the file and line (`errors="replace"`: decoded with U+FFFD)."""
    with open(path, "rb") as handle:
        for number, data in enumerate(handle, start=1):
            if number == 1 and data.startswith(_BOM):
                data = data[len(_BOM):]
            try:
                text = data.decode("utf-8", errors=errors)
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}:{number}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
            text = text.removesuffix("\n").removesuffix("\r")
            if text.strip():
                yield number, text


def iter_objects(path: str | Path, problems: list, shape: str) -> Iterator[tuple[int, dict]]:
    """(line number, row) for each JSON object line of a JSONL file; a line that is not valid JSON or not
    an object is recorded in `problems` (a located `Problem`, `shape` says what a row should be) and
    skipped, so the caller can report every bad line at once."""
    from rubricrl.core.problems import Problem

    for line, text in iter_jsonl(path):
        try:
            row = json.loads(text)
        except (ValueError, RecursionError) as exc:
            problems.append(Problem(str(path), line, "", f"malformed JSON: {exc}"))
            continue
        if not isinstance(row, dict):
            problems.append(Problem(str(path), line, "", "a row must be a JSON object", f"write {shape} per line"))
            continue
        yield line, row


def read_jsonl(path: str | Path) -> list[Any]:
    """Every value of a JSONL file; a malformed line raises ValueError naming the file and line."""
    values = []
    for number, text in iter_jsonl(path):
        try:
            values.append(json.loads(text))
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"{path}:{number}: malformed JSON: {exc}") from None
    return values


def append_lines(path: str | Path, objs: Iterable[Any], *, allow_nan: bool = False, fsync: bool = False) -> int:
    """Append one line per object to `path` (created if missing); returns how many were written."""
    count = 0
    with open(path, "a", encoding="utf-8", newline="") as handle:
        for obj in objs:
            handle.write(dumps_line(obj, allow_nan=allow_nan) + "\n")
            count += 1
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())
    return count


def write_jsonl(path: str | Path, objs: Iterable[Any], *, allow_nan: bool = False, atomic: bool = False) -> Path:
    """Replace `path` with one line per object. `atomic`: write a temporary file, fsync it and
    rename it over `path`, so a kill leaves the old file or the new one, never half of one."""
    return write_raw_lines(path, (dumps_line(obj, allow_nan=allow_nan) for obj in objs), atomic=atomic)


def write_raw_lines(path: str | Path, lines: Iterable[str], *, atomic: bool = False) -> Path:
    """Replace `path` with already serialised JSON lines (from `iter_jsonl`), one per line; a line
    separator left raw by an older writer is escaped on the way."""
    path = Path(path)
    target = path.with_name(path.name + ".tmp") if atomic else path
    with open(target, "w", encoding="utf-8", newline="") as handle:
        handle.writelines(escape_line_separators(line) + "\n" for line in lines)
        if atomic:
            handle.flush()
            os.fsync(handle.fileno())
    if atomic:
        os.replace(target, path)
    return path
