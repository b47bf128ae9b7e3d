"""Refuse an output path that is one of a command's inputs (or another of its outputs).

Writing results into the file being read destroys it (appending to `--data` while reading it, or
rewriting `--in` with its labels). The same file may be spelt differently: a relative path, `..`,
a symlink or a hard link; `same_file` sees through all of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

Named = tuple[str, "Path | str | None"]  # (what the user passed it as, e.g. "--data", the path)


def same_file(a: Path | str, b: Path | str) -> bool:
    """True when `a` and `b` name the same file: the same inode when both exist (hard links,
    case-insensitive file systems), else the same absolute path with every symlink resolved."""
    a, b = Path(a), Path(b)
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return Path(os.path.abspath(a)).resolve() == Path(os.path.abspath(b)).resolve()


def clash(outputs: Iterable[Named], inputs: Iterable[Named]) -> str | None:
    """A message naming the first output that is one of the inputs or an earlier output; None if
    there is none. Entries whose path is None are ignored."""
    outputs = [(name, Path(p)) for name, p in outputs if p is not None]
    inputs = [(name, Path(p)) for name, p in inputs if p is not None]
    for i, (name, path) in enumerate(outputs):
        for in_name, in_path in inputs:
            if same_file(path, in_path):
                return (f"{name} {path} is the same file as {in_name} {in_path}: writing it would destroy the "
                        f"input; choose another {name.split()[0]}. Nothing was written")
        for other_name, other_path in outputs[:i]:
            if same_file(path, other_path):
                return (f"{name} {path} is the same file as {other_name} {other_path}: one would overwrite the "
                        f"other; choose another {name.split()[0]}. Nothing was written")
    return None
