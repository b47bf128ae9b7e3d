"""Settings of the reward server, checked before it starts (a public address needs a token)."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rubricrl.rubrics.model import Rubric
from rubricrl.rewards.rows import ErrorPolicy

TOKEN_ENV = "RUBRICRL_SERVE_TOKEN"
MIN_TOKEN_CHARS = 16
DEFAULT_READ_TIMEOUT = 30.0  # seconds: a 32 MiB body at 1 MB/s, far more than a trainer on a cluster needs


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1); anything else can be reached
    from other machines (0.0.0.0 and :: listen on every interface)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: assume it resolves to a reachable interface


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rubric: Rubric | None = Field(default=None, description="rubric for rows whose label carries none")
    judge: str = Field(default="gate+exemplar+local", description="judge spec (rubricrl.judges.make_judge)")
    cache: bool = Field(default=True, description="use the SQLite verdict cache for model judges")
    cache_path: str | None = Field(default=None, description="verdict cache file (default: user cache dir)")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    token: str | None = Field(default=None, repr=False, description="bearer token; required off loopback")
    max_body: int = Field(default=32 * 1024 * 1024, ge=1024, description="largest request body in bytes (413)")
    concurrency: int = Field(default=8, ge=1, description="requests judged at once")
    queue: int = Field(default=1024, ge=0, description="requests waiting for a slot before 503")
    timeout: float = Field(default=120.0, gt=0, description="seconds per request, queueing included (504)")
    read_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False, description=(
        "seconds a client has to send a request's headers, and again its body (408, connection closed); "
        f"default: --timeout, at most {DEFAULT_READ_TIMEOUT:g}"))
    error_policy: ErrorPolicy = "zero"
    soft: bool = Field(default=True, description="score model verdicts by p_met (as RubricReward)")
    mode: Literal["pointwise", "pairwise"] = Field(default="pointwise", description=(
        "OpenRLHF rewards: each row's rubric score (pointwise), or its criterion-weighted win rate against the "
        "other rows of its prompt (pairwise; /v1/score stays pointwise)"))
    group_size: int | None = Field(default=None, ge=2, description=(
        "pairwise: rows per prompt to compare (OpenRLHF's --n_samples_per_prompt), gathered across requests"))
    pairwise_max_pairs: int | None = Field(default=None, ge=1, description="pairwise: at most this many pairs "
                                                                          "per group (default: every pair)")

    @property
    def read_seconds(self) -> float:
        """The read timeout in force: `read_timeout`, or `timeout` capped at DEFAULT_READ_TIMEOUT."""
        return self.read_timeout if self.read_timeout is not None else min(self.timeout, DEFAULT_READ_TIMEOUT)

    @model_validator(mode="after")
    def _pairwise(self) -> ServerSettings:
        if self.mode != "pairwise":
            if self.group_size is not None or self.pairwise_max_pairs is not None:
                raise ValueError("group_size and pairwise_max_pairs apply only with mode pairwise")
            return self
        if self.group_size is None:
            raise ValueError("mode pairwise needs group_size: the number of samples per prompt the trainer "
                             "generates (OpenRLHF's --n_samples_per_prompt); a prompt's rows are compared once that "
                             "many have arrived")
        from rubricrl.judges.pairwise import pairwise_spec_problem

        problem = pairwise_spec_problem(self.judge)
        if problem:
            raise ValueError(f"mode pairwise: {problem}")
        return self

    @model_validator(mode="after")
    def _secured(self) -> ServerSettings:
        if self.token is not None and len(self.token) < MIN_TOKEN_CHARS:
            raise ValueError(f"the token must have at least {MIN_TOKEN_CHARS} characters; make one with "
                             "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`")
        if self.token is None and not is_loopback(self.host):
            raise ValueError(f"host {self.host!r} is reachable from other machines, so a bearer token is required: "
                             f"pass --token or set {TOKEN_ENV} (or bind to 127.0.0.1)")
        return self


def settings_from_options(*, rubric: str | None = None, **options) -> ServerSettings:
    """Settings from command-line options (`rubric`: a bundled name or a file); ValueError says what to fix."""
    from pydantic import ValidationError

    from rubricrl.rubrics.values import load_named_rubric

    loaded = load_named_rubric(rubric) if rubric else None
    try:
        return ServerSettings(rubric=loaded, **options)
    except ValidationError as exc:
        raise ValueError("; ".join(f"--{'-'.join(str(p) for p in e['loc']).replace('_', '-')}: "
                                   f"{e['msg'].removeprefix('Value error, ')}" if e["loc"] else
                                   e["msg"].removeprefix("Value error, ") for e in exc.errors())) from None
