"""Reward functions with TRL's contract: `f(prompts, completions, **columns) -> list[float | None]`.

Pass several to `GRPOTrainer(reward_funcs=[...])` and weigh them with `GRPOConfig.reward_weights`
(TRL composes them). `None` means "no reward for this completion" and TRL leaves it out.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict

from rubricrl.rubrics.checks import tagged_spans
from rubricrl.core.messages import Conversation, as_conversation
from rubricrl.judges.base import Judge, JudgeReport, JudgeRequest
from rubricrl.rubrics.loading import rubric_from_row
from rubricrl.rubrics.model import Rubric
from rubricrl.scoring.formulas import score_row
from rubricrl.core.verdicts import Status, Verdict

ErrorPolicy = Literal["mask", "zero", "raise"]
STRUCTURED_SPANS = ("understanding", "reasoning", "emotion", "response")


class JudgeFailure(RuntimeError):
    """Raised by a reward with `error_policy='raise'` when a judge returned error verdicts."""


def completion_text(completion: Any) -> str:
    """A completion as TRL passes it: a string, or a list of messages (the assistant's content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict)
                       and m.get("role", "assistant") == "assistant" and isinstance(m.get("content"), str))
    raise TypeError(f"completion must be a string or a list of messages, got {type(completion).__name__}")


class SampleRecord(TypedDict):
    """What a RubricReward call judged for one completion (a line of a run's samples.jsonl)."""

    prompt: str  # the last message of the conversation judged (without scaffold hints)
    completion: str
    reward: float | None
    note: str  # why the reward is not a plain score ("" when it is)
    verdicts: list[dict]  # Verdict.model_dump(mode="json") per criterion


def unique_requests(conversations: Sequence, texts: Sequence[str | None], rubrics: Sequence) \
        -> tuple[list[JudgeRequest], dict[tuple, int]]:
    """One judge request per distinct (conversation, text, rubric); `texts` None (nothing to judge) are
    left out. Returns the requests and (conversation, text, rubric hash) -> request index."""
    unique: dict[tuple, int] = {}
    requests: list[JudgeRequest] = []
    for conv, text, rubric in zip(conversations, texts, rubrics):
        key = (conv, text, rubric.content_hash())
        if text is not None and key not in unique:
            unique[key] = len(requests)
            requests.append(JudgeRequest(conv, text, rubric.criteria))
    return requests, unique


class RubricReward:
    """Judge each completion against its row's rubric (column `rubric`) or a shared rubric.

    Identical (conversation, completion, rubric) triples in one call are judged once. A row with
    any `error` verdict follows `error_policy`: `mask` returns None (TRL excludes it), `zero`
    returns 0.0, `raise` raises JudgeFailure; every case is counted and logged. With
    `judged_span="response"` only the `<response>` span is judged and a completion without
    exactly one such span gets the rubric's hard-rule gate value without a judge call.

    `last_records` holds one SampleRecord per completion of the last call; the trainer writes them
    to samples.jsonl (train/trainer.py `SampleSource`). Judge spend and defence counts of each call
    go to TRL's `log_metric`.
    """

    def __init__(self, judge: Judge, rubric: Rubric | None = None, *, error_policy: ErrorPolicy = "mask",
                 soft: bool = True, judged_span: str | None = None, name: str = "rubric",
                 rubrics: dict[str, Rubric] | None = None):
        if error_policy not in ("mask", "zero", "raise"):
            raise ValueError(f"error_policy must be mask, zero or raise, not {error_policy!r}")
        self.judge, self.rubric, self.error_policy = judge, rubric, error_policy
        self.rubrics = rubrics or {}  # column value (e.g. a content hash) -> rubric
        self.soft, self.judged_span = soft, judged_span
        self.__name__ = name
        self.totals: Counter = Counter()
        self.last_records: list[SampleRecord] = []  # what the last call judged (samples.jsonl, reports)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        rubrics = self._rubrics(columns.get("rubric"), len(prompts))
        conversations = [_conversation(p) for p in columns.get("original_prompt") or prompts]
        texts = [completion_text(c) for c in completions]
        judged = [self._judged_text(t) for t in texts]
        requests, unique = unique_requests(conversations, judged, rubrics)
        before = self.judge.report()
        answers = _run(self.judge.judge(requests)) if requests else []
        rewards: list[float | None] = []
        records: list[SampleRecord] = []
        for conv, text, raw_text, rubric in zip(conversations, judged, texts, rubrics):
            if text is None:
                reward, verdicts, note = rubric.hard_rule_gate, [], f"format: no single <{self.judged_span}> span"
                self.totals["format_gated"] += 1
            else:
                verdicts = answers[unique[(conv, text, rubric.content_hash())]]
                reward, note = self._reward(rubric, verdicts)
            rewards.append(reward)
            records.append(SampleRecord(prompt=conv[-1].content, completion=raw_text, reward=reward, note=note,
                                        verdicts=[v.model_dump(mode="json") for v in verdicts]))
        self.totals["completions"] += len(texts)
        self.totals["judged"] += len(requests)
        self.last_records = records
        log_metric = columns.get("log_metric")
        _log_metrics(log_metric, self.__name__, records, len(requests), len(texts))
        if log_metric is not None:
            log_judge_spend(log_metric, self.__name__, before, self.judge.report())
        return rewards

    def _rubrics(self, column: Sequence[Any] | None, n: int) -> list[Rubric]:
        out = []
        for i in range(n):
            value = column[i] if column is not None else None
            if isinstance(value, str) and value in self.rubrics:
                out.append(self.rubrics[value])
                continue
            rubric = rubric_from_row({"rubric": value}, "<reward batch>", i + 1) if value not in (None, "") else None
            rubric = rubric or self.rubric
            if rubric is None:
                raise ValueError(f"completion {i}: the row has no `rubric` column value and no shared rubric "
                                 "was given to RubricReward")
            out.append(rubric)
        return out

    def _judged_text(self, text: str) -> str | None:
        if self.judged_span is None:
            return text
        spans = tagged_spans(self.judged_span, text)
        return spans[0].strip() if len(spans) == 1 and spans[0].strip() else None

    def _reward(self, rubric: Rubric, verdicts: list[Verdict]) -> tuple[float | None, str]:
        errors = [v for v in verdicts if v.status is Status.ERROR]
        if errors:
            self.totals["rows_with_errors"] += 1
            self.totals["error_verdicts"] += len(errors)
            reasons = "; ".join(sorted({v.reason for v in errors}))[:300]
            if self.error_policy == "raise":
                raise JudgeFailure(f"{len(errors)} judge error(s): {reasons}")
            return (None if self.error_policy == "mask" else 0.0), f"judge error ({self.error_policy}): {reasons}"
        score = score_row(rubric, verdicts, soft=self.soft).score
        if score is None:
            self.totals["unscored"] += 1
            return None, "no criterion decided"
        return score, ""


def log_judge_spend(log_metric: Callable[[str, float], None], name: str, before: JudgeReport,
                     after: JudgeReport) -> None:
    """The judge's spend in one call (model calls, tokens, cost); for a critic judge, the criteria it
    verified, left unverified and found failed, and `critic_saved`, unverified / (verified + unverified):
    the share of verifier verdicts (verifier calls in the per-criterion and logprob modes) it saved; for a
    judge with defences (the router), the defences that fired."""
    for key, start, now in zip(("judge_calls", "judge_tokens", "judge_cost"),
                               (before.stats.model_calls, before.stats.tokens, before.stats.cost),
                               (after.stats.model_calls, after.stats.tokens, after.stats.cost)):
        log_metric(f"{name}/{key}", float(now - start))
    s0, s1 = before.stats, after.stats
    if s1.verified or s1.unverified:  # a critic judge (judges/critic.py): what it sent to its verifier
        verified, unverified = s1.verified - s0.verified, s1.unverified - s0.unverified
        log_metric(f"{name}/judge_verified", float(verified))
        log_metric(f"{name}/judge_unverified", float(unverified))
        log_metric(f"{name}/critic_confirmed", float(s1.confirmed - s0.confirmed))
        # the verifier verdicts the critic saved, as a share: one verifier call each in the per-criterion modes
        log_metric(f"{name}/critic_saved", unverified / (verified + unverified) if verified + unverified else 0.0)
    d0, d1 = before.defences, after.defences
    if d0 is not None and d1 is not None:
        for key, start, now in zip(("defence_prechecked", "defence_neutralised", "defence_downgraded",
                                    "defence_gated"),
                                   (d0.prechecked, d0.neutralised, d0.downgraded, d0.gated),
                                   (d1.prechecked, d1.neutralised, d1.downgraded, d1.gated)):
            log_metric(f"{name}/{key}", float(now - start))
        for reason in sorted(set(d0.gate_reasons) | set(d1.gate_reasons)):
            log_metric(f"{name}/gated/{reason}", float(d1.gate_reasons.get(reason, 0) - d0.gate_reasons.get(reason, 0)))


def _log_metrics(log_metric: Callable[[str, float], None] | None, name: str, records: list[SampleRecord],
                 judged: int, total: int) -> None:
    if log_metric is None:
        return
    met: Counter = Counter()
    decided: Counter = Counter()
    errors = 0
    for record in records:
        for v in record["verdicts"]:
            if v["status"] in ("met", "unmet"):
                decided[v["criterion_id"]] += 1
                met[v["criterion_id"]] += v["status"] == "met"
            errors += v["status"] == "error"
    for cid in decided:
        log_metric(f"{name}/pass_rate/{cid}", met[cid] / decided[cid])
    log_metric(f"{name}/judge_errors", float(errors))
    log_metric(f"{name}/masked", float(sum(r["reward"] is None for r in records)))
    log_metric(f"{name}/unique_fraction", judged / total if total else 0.0)


class FormatReward:
    """1.0 when the completion holds each span exactly once, non-empty and in order, else 0.0
    (Kardia-R1 style `<understanding> <reasoning> <emotion> <response>`)."""

    def __init__(self, spans: Sequence[str] = STRUCTURED_SPANS, name: str = "format"):
        self.spans = tuple(spans)
        self.__name__ = name
        self._pattern = re.compile(r"\s*".join(rf"<{s}>(.+?)</{s}>" for s in self.spans), re.DOTALL)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
        out = []
        for c in completions:
            text = completion_text(c)
            ok = all(len(tagged_spans(s, text)) == 1 for s in self.spans)
            match = self._pattern.search(text) if ok else None
            out.append(1.0 if match and all(g.strip() for g in match.groups()) else 0.0)
        return out


class LengthPenalty:
    """0 up to `max_words`; beyond, minus the overflow as a share of `max_words` (capped at -1)."""

    def __init__(self, max_words: int = 120, name: str = "length"):
        if max_words <= 0:
            raise ValueError("max_words must be positive")
        self.max_words = max_words
        self.__name__ = name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
        out = []
        for c in completions:
            words = len(completion_text(c).split())
            out.append(-min(1.0, (words - self.max_words) / self.max_words) if words > self.max_words else 0.0)
        return out


def _conversation(prompt: Any) -> Conversation:
    return as_conversation(prompt if isinstance(prompt, (str, list, tuple)) else str(prompt))


def _run(coroutine):
    """Run a judge coroutine from TRL's synchronous reward call (or from a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise RuntimeError("RubricReward was called inside a running event loop; await `judge.judge` directly there")
