"""Tactic taxonomies as data: a name, a description and example turns per tactic (YAML)."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rubricrl.core.jsonl import read_text
from rubricrl.core.problems import Problem, RubricError
from rubricrl.core.resources import data_path

BUNDLED = data_path("taxonomies")


class Tactic(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)
    description: str = ""
    examples: tuple[str, ...] = ()


class Taxonomy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    tactics: tuple[Tactic, ...] = Field(min_length=2)

    @model_validator(mode="after")
    def _unique(self) -> Taxonomy:
        names = [t.name for t in self.tactics]
        if len(set(names)) != len(names):
            raise ValueError("tactic names must be unique")
        return self

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tactics]


def load_taxonomy(spec: str | Path = "esconv8") -> Taxonomy:
    """A bundled taxonomy (`esconv8`, `mint10`) or a YAML file."""
    path = Path(spec)
    if not path.is_file():
        path = BUNDLED / f"{spec}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in BUNDLED.glob("*.yaml"))
        raise FileNotFoundError(f"no taxonomy {spec!r}: not a file and not one of the bundled {names}")
    try:
        return Taxonomy.model_validate(yaml.safe_load(read_text(path)))
    except ValidationError as exc:
        raise RubricError([Problem(str(path), None, ".".join(str(p) for p in e["loc"]), e["msg"])
                           for e in exc.errors()]) from None
    except yaml.YAMLError as exc:
        raise RubricError([Problem(str(path), None, "", f"malformed YAML: {exc}")]) from None
