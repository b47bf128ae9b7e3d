"""Where bundled data lives: one helper, on importlib.resources, used by every module."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def data_path(*parts: str) -> Path:
    """Path of a file or folder under the package's `data/` (e.g. `data_path("rubrics", "empathy.yaml")`)."""
    return Path(str(files("rubricrl").joinpath("data", *parts)))
