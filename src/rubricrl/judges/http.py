"""Judge through an OpenAI-compatible endpoint, in one of four modes:

- `per_criterion`: one call per criterion, JSON `{explanation, criteria_met}` (HealthBench grader semantics);
- `batched`: one call per response returning `{id, met, evidence}` for every criterion; items that are
  missing, duplicated or malformed are re-asked alone with a per-criterion call;
- `logprob`: the yes/no prompt with `max_tokens=1`, P(yes) read from `top_logprobs` (soft verdicts);
- `implicit`: Rubrics-as-Rewards holistic rating 1-10 against the whole rubric, normalised to [0, 1]
  and given as `p_met` to every positive criterion (pitfalls are folded into the rating and `skipped`).

In `per_criterion` and `logprob` modes the calls of one response differ only at the end (the criterion
comes last in the prompt). `order` decides how they are sent: `chain` sends them one after another, so a
server with a per-slot prompt cache (llama.cpp) computes the shared prefix once per response; `spread`
sends them all at once (best when there are fewer responses than concurrent calls, or with vLLM, whose
prefix cache is global); `auto` (default) chains when the batch has at least as many responses as the
endpoint's concurrency, else spreads. The verdicts are the same either way up to the server's float noise (a cached
prefix can shift P(yes) in the third decimal); only the speed differs.

A failed call (after the endpoint's bounded retries), an unparsable answer, a refusal or a length
stop is an `error` verdict whose reason starts with that cause; it is never a silent `unmet`.

`compare` is the pairwise mode (judges/pairwise.py): one call per pair and criterion. In `logprob` mode
the answer is one token and P(A), P(B), P(tie) are read from its top_logprobs; in the other modes it is
a JSON object `{explanation, better}` whose `better` must be exactly "A", "B" or "tie" (else the
preference is undecided with reason `parse: ...`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Literal

from rubricrl.llm.endpoint import ChatEndpoint, ChatResult, logprob_yes
from rubricrl.core.verdicts import Status, Verdict, error_verdict, skipped_verdict
from rubricrl.judges import http_prompts as prompts
from rubricrl.judges.base import EndpointUsage, JudgeReport, JudgeRequest, JudgeStats
from rubricrl.judges.pairwise import WINNERS, PairRequest, Preference

Mode = Literal["per_criterion", "batched", "logprob", "implicit"]
MODES = ("per_criterion", "batched", "logprob", "implicit")
Order = Literal["auto", "chain", "spread"]
ORDERS = ("auto", "chain", "spread")
GENERATIVE_MODES = ("per_criterion", "batched")  # modes whose `met` comes with a quotable explanation
ANSWER_TOKENS = {"per_criterion": 200, "batched": 120, "logprob": 1, "implicit": 200}  # batched: per criterion
PAIR_ANSWER_TOKENS = 200


class HTTPJudge:
    def __init__(self, endpoint: ChatEndpoint, mode: Mode = "per_criterion", *, label: str | None = None,
                 threshold: float = 0.5, max_tokens: int | None = None, order: Order = "auto"):
        if mode not in MODES:
            raise ValueError(f"unknown HTTP judge mode {mode!r}; use one of {', '.join(MODES)}")
        if order not in ORDERS:
            raise ValueError(f"unknown criterion order {order!r}; use one of {', '.join(ORDERS)}")
        self.endpoint, self.mode, self.threshold, self.order = endpoint, mode, threshold, order
        self.max_tokens = max_tokens
        name = label or (endpoint.config.model if endpoint.config.model != "default" else endpoint.config.base_url)
        self.judge_id = f"http:{name}/{mode}@{prompts.PROMPT_VERSION}" + (f",t={threshold:g}" if threshold != 0.5 else "")
        pair_mode = "pairwise-logprob" if mode == "logprob" else "pairwise-json"
        self.pair_judge_id = f"http:{name}/{pair_mode}@{prompts.PROMPT_VERSION}"
        self.stats = JudgeStats()
        self.reasks = 0  # batched items re-asked alone

    @property
    def explains(self) -> bool:
        """per_criterion and batched verdicts come with the model's explanation / evidence text."""
        return self.mode in GENERATIVE_MODES

    def report(self) -> JudgeReport:
        return JudgeReport(self.judge_id, self.stats.snapshot(), endpoints=(EndpointUsage.of(self.endpoint),))

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        before = self._usage()
        chain = self.order == "chain" or (self.order == "auto" and len(requests) >= self.endpoint.config.concurrency)
        # at most `concurrency` chains at once: more would interleave their calls in the endpoint's queue,
        # and the server's cache (llama.cpp keeps the last prompt of each slot) would lose the prefix
        chains = asyncio.Semaphore(self.endpoint.config.concurrency) if chain else None
        out = list(await asyncio.gather(*(self._one(req, chains) for req in requests)))
        self._count_usage(before)
        for verdicts in out:
            self.stats.count(verdicts)
        return out

    def _usage(self) -> tuple:
        s = self.endpoint.stats
        return s.calls, s.prompt_tokens + s.completion_tokens, s.retries, s.cost

    def _count_usage(self, before: tuple) -> None:
        calls, tokens, retries, cost = self._usage()
        self.stats.model_calls += calls - before[0]
        self.stats.tokens += tokens - before[1]
        self.stats.retries += retries - before[2]
        self.stats.cost += cost - before[3]

    async def compare(self, requests: Sequence[PairRequest]) -> list[list[Preference]]:
        """One Preference per criterion of each request (module doc), all calls sent at once."""
        before = self._usage()
        one = self._pair_logprob if self.mode == "logprob" else self._pair_json
        out = list(await asyncio.gather(*(asyncio.gather(*(one(req, c) for c in req.criteria)) for req in requests)))
        self._count_usage(before)
        return [list(row) for row in out]

    def _pair_failure(self, result: ChatResult, criterion_id: str, problem: str) -> Preference:
        if result.error:
            return Preference(criterion_id, None, reason=result.error, judge_id=self.pair_judge_id)
        reason = (f"length: the answer hit max_tokens before it was complete ({problem})"
                  if result.finish_reason == "length" else f"parse: {problem}; answer began {result.text[:80]!r}")
        self.endpoint.count_error(reason.split(":", 1)[0])
        return Preference(criterion_id, None, reason=reason, judge_id=self.pair_judge_id)

    async def _pair_json(self, req: PairRequest, criterion) -> Preference:
        messages = prompts.pair_messages(req.conversation, req.response_a, req.response_b, criterion)
        result = await self.endpoint.complete(messages, max_tokens=self.max_tokens or PAIR_ANSWER_TOKENS,
                                              json_schema=prompts.PAIR_SCHEMA)
        parsed = prompts.parse_pair(result.text) if result.ok else None
        if parsed is None:
            return self._pair_failure(result, criterion.id, 'no JSON object whose "better" is "A", "B" or "tie"')
        return Preference(criterion.id, parsed[0], reason=parsed[1], judge_id=self.pair_judge_id,
                          tokens=result.prompt_tokens + result.completion_tokens)

    async def _pair_logprob(self, req: PairRequest, criterion) -> Preference:
        messages = prompts.pair_token_messages(req.conversation, req.response_a, req.response_b, criterion)
        result = await self.endpoint.complete(messages, max_tokens=1, logprobs=20)
        if not result.ok:
            return Preference(criterion.id, None, reason=result.error, judge_id=self.pair_judge_id)
        probs = pair_logprobs(result.top_logprobs[0]) if result.top_logprobs else None
        if probs is None:
            reason = ("no_answer_token: none of A, B, tie among the top tokens" if result.has_logprobs else
                      "logprobs_unsupported: the server returned no top_logprobs; use mode=per_criterion")
            self.endpoint.count_error(reason.split(":", 1)[0])
            return Preference(criterion.id, None, reason=reason, judge_id=self.pair_judge_id)
        winner = max(zip(probs, WINNERS), key=lambda x: x[0])[1]
        return Preference(criterion.id, winner, *probs, judge_id=self.pair_judge_id,
                          reason="P(A)={:.3f}, P(B)={:.3f}, P(tie)={:.3f}".format(*probs),
                          tokens=result.prompt_tokens + result.completion_tokens)

    async def _one(self, req: JudgeRequest, chains: asyncio.Semaphore | None) -> list[Verdict]:
        if not req.criteria:
            return []
        if not req.response.strip():
            return [Verdict(criterion_id=c.id, status=Status.UNMET, p_met=0.0, judge_id=self.judge_id,
                            reason="precheck: empty response cannot meet a criterion") for c in req.criteria]
        if self.mode == "batched":
            return await self._batched(req)
        if self.mode == "implicit":
            return await self._implicit(req)
        single = self._logprob if self.mode == "logprob" else self._single
        if chains is not None:  # one after another: the server reuses this response's cached prompt prefix
            async with chains:
                return [await single(req, c) for c in req.criteria]
        return list(await asyncio.gather(*(single(req, c) for c in req.criteria)))

    def _tokens(self, n_criteria: int = 1) -> int:
        return self.max_tokens or ANSWER_TOKENS[self.mode] * (n_criteria if self.mode == "batched" else 1)

    def _failure(self, result: ChatResult, criterion_id: str, parse_problem: str) -> Verdict:
        """The error verdict for a call that failed or whose content could not be used."""
        if result.error:
            return error_verdict(criterion_id, self.judge_id, result.error)
        if result.finish_reason == "length":
            reason = f"length: the answer hit max_tokens before it was complete ({parse_problem})"
        else:
            reason = f"parse: {parse_problem}; answer began {result.text[:80]!r}"
        self.endpoint.count_error(reason.split(":", 1)[0])
        return error_verdict(criterion_id, self.judge_id, reason)

    def _decided(self, criterion_id: str, met: bool | None, p_met: float | None, evidence: str, tokens: int) -> Verdict:
        if met is None:
            met = p_met >= self.threshold
        return Verdict(criterion_id=criterion_id, status=Status.MET if met else Status.UNMET,
                       p_met=p_met if p_met is not None else float(met), evidence=evidence,
                       judge_id=self.judge_id, tokens=tokens)

    async def _single(self, req: JudgeRequest, criterion) -> Verdict:
        result = await self.endpoint.complete(prompts.single_messages(req.conversation, req.response, criterion),
                                              max_tokens=self._tokens(), json_schema=prompts.SINGLE_SCHEMA)
        parsed = prompts.parse_single(result.text) if result.ok else None
        if parsed is None:
            return self._failure(result, criterion.id, 'no JSON object with a boolean "criteria_met"')
        return self._decided(criterion.id, parsed[0], None, parsed[1], result.prompt_tokens + result.completion_tokens)

    async def _logprob(self, req: JudgeRequest, criterion) -> Verdict:
        result = await self.endpoint.complete(prompts.yesno_messages(req.conversation, req.response, criterion),
                                              max_tokens=1, logprobs=20)
        if not result.ok:
            return error_verdict(criterion.id, self.judge_id, result.error)
        if not result.has_logprobs:
            self.endpoint.count_error("logprobs_unsupported")
            return error_verdict(criterion.id, self.judge_id, "logprobs_unsupported: the server returned no "
                                 "top_logprobs; use mode=per_criterion or batched with this server")
        p = logprob_yes(result.top_logprobs[0]) if result.top_logprobs else None
        if p is None:
            self.endpoint.count_error("no_answer_token")
            return error_verdict(criterion.id, self.judge_id, f"no_answer_token: neither yes nor no among the top "
                                 f"tokens {list(result.top_logprobs[0])[:5] if result.top_logprobs else []}")
        return self._decided(criterion.id, None, p, f"P(yes)={p:.3f}", result.prompt_tokens + result.completion_tokens)

    async def _batched(self, req: JudgeRequest) -> list[Verdict]:
        ids = [c.id for c in req.criteria]
        result = await self.endpoint.complete(prompts.batch_messages(req.conversation, req.response, req.criteria),
                                              max_tokens=self._tokens(len(ids)), json_schema=prompts.batch_schema(ids))
        if not result.ok:  # the endpoint already retried; re-asking each criterion would multiply the load
            return [error_verdict(cid, self.judge_id, result.error) for cid in ids]
        answers = prompts.parse_batch(result.text, ids)
        share = (result.prompt_tokens + result.completion_tokens) // len(ids)
        missing = [c for c in req.criteria if c.id not in answers]
        self.reasks += len(missing)
        alone = dict(zip([c.id for c in missing], await asyncio.gather(*(self._single(req, c) for c in missing))))
        return [alone[c.id] if c.id in alone else self._decided(c.id, answers[c.id][0], None, answers[c.id][1], share)
                for c in req.criteria]

    async def _implicit(self, req: JudgeRequest) -> list[Verdict]:
        result = await self.endpoint.complete(prompts.rating_messages(req.conversation, req.response, req.criteria),
                                              max_tokens=self._tokens(), json_schema=prompts.RATING_SCHEMA)
        rating = prompts.parse_rating(result.text) if result.ok else None
        if rating is None:
            failure = self._failure(result, "", 'no JSON object with an integer "rating" from 1 to 10')
            return [failure.model_copy(update={"criterion_id": c.id}) for c in req.criteria]
        p = (rating - 1) / 9
        share = (result.prompt_tokens + result.completion_tokens) // len(req.criteria)
        return [self._decided(c.id, None, p, f"holistic rating {rating}/10", share) if c.weight > 0 else
                skipped_verdict(c.id, self.judge_id, f"implicit: folded into the holistic rating {rating}/10")
                for c in req.criteria]


def pair_logprobs(top: dict[str, float]) -> tuple[float, float, float] | None:
    """(P(A), P(B), P(tie)) normalised over the three, from one token's top logprobs (spaces ignored; A and
    B upper case only, tie in any case), or None when none of them is there."""
    mass = [0.0, 0.0, 0.0]
    for token, logprob in top.items():
        word = token.strip()
        index = 0 if word == "A" else 1 if word == "B" else 2 if word.lower() == "tie" else None
        if index is not None:
            mass[index] += math.exp(logprob)
    total = sum(mass)
    return tuple(m / total for m in mass) if total > 0 else None  # type: ignore[return-value]
