"""Tactic taxonomies as data: a name, aliases, a description and example turns per tactic (YAML).

Labels in data files are matched to a tactic by its name or one of its aliases, ignoring case and
repeated spaces (`Taxonomy.canonical`): ESConv's files say "Questions" and "Other" where esconv8
says "Question" and "Others"."""

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
    aliases: tuple[str, ...] = ()  # other spellings of the name in data files
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
        spellings = [_key(s) for t in self.tactics for s in dict.fromkeys((t.name, *t.aliases))]
        clashes = sorted({s for s in spellings if spellings.count(s) > 1})
        if clashes:
            raise ValueError(f"names and aliases must be unique ignoring case: {clashes}")
        return self

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tactics]

    def resolve(self, label: str) -> str | None:
        """The tactic name `label` stands for (its name or an alias, any case), or None."""
        key = _key(label)
        return next((t.name for t in self.tactics for s in (t.name, *t.aliases) if _key(s) == key), None)

    def canonical(self, label: str, source: str, line: int | None, field: str = "tactic") -> str:
        """`resolve(label)`, or a RubricError naming the label, where it is, and the known names."""
        name = self.resolve(label)
        if name is None:
            aliases = [f"{a!r} for {t.name!r}" for t in self.tactics for a in t.aliases]
            raise RubricError([Problem(
                source, line, field, f"unknown tactic {label!r}; the {self.name} tactics are "
                + ", ".join(repr(n) for n in self.names) + (f" (also accepted: {', '.join(aliases)})" if aliases else ""),
                "use one of those names, or give a taxonomy that has this tactic")])
        return name


def _key(label: str) -> str:
    return " ".join(label.split()).casefold()


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
