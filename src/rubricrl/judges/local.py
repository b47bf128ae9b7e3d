"""Local judge: a transformers causal LM read as P(yes) / (P(yes) + P(no)) at the answer position.

Efficiency: the judge prompt is a token tree. The instructions + conversation (`prefix`) are
computed once per conversation and kept as a KV cache; each response is one packed row holding
the response tokens followed by all its criterion suffixes, with a block attention mask (a
suffix sees the prefix, the response and itself, never a sibling suffix) and position ids that
restart after the response. So G responses x K criteria cost one prefix pass plus G packed rows
instead of G*K full prompts, and give the same probabilities (tests/test_local_judge.py).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rubricrl.llm.models import EMBEDDED, load_causal_lm
from rubricrl.core.verdicts import Status, Verdict, error_verdict
from rubricrl.judges.base import JudgeRequest, JudgeStats, StatsJudge
from rubricrl.judges.pairwise import WINNERS, PairRequest, Preference
from rubricrl.judges.prompt import (PAIR_TEMPLATE_VERSION, TEMPLATE_VERSION, answer_token_ids, pair_token_ids,
                                    render_pair_pieces, render_pieces)


@dataclass(frozen=True)
class Probability:
    p_met: float  # P(yes) / (P(yes) + P(no))
    answer_mass: float  # P(yes) + P(no): how much the model put on a yes/no answer at all
    tokens: int  # this verdict's share of the tokens computed


@dataclass(frozen=True)
class PairProbability:
    p_a: float  # P(A), P(B), P(tie) normalised over the three answers
    p_b: float
    p_tie: float
    answer_mass: float  # P(A) + P(B) + P(tie) before normalising
    tokens: int


@dataclass
class _Pack:
    index: int  # position of the request in the batch
    response: list[int]
    suffixes: list[list[int]]

    @property
    def length(self) -> int:
        return len(self.response) + sum(len(s) for s in self.suffixes)


class LocalJudge(StatsJudge):
    """Yes/no judge on a local transformers model (default: the embedded SmolLM2-135M); `compare` is its
    pairwise mode (judges/pairwise.py): P(A), P(B), P(tie) at the answer position, the same token tree."""

    def __init__(self, model: str | None = None, *, threshold: float = 0.5, max_batch_tokens: int = 4096,
                 dtype: str = "float32"):
        self.model, self.tokenizer = load_causal_lm(model, dtype)
        self.model_name = model or EMBEDDED
        self.judge_id = f"local:{self.model_name}@{TEMPLATE_VERSION}" + (f",t={threshold:g}" if threshold != 0.5 else "")
        self.threshold = threshold
        self.max_batch_tokens = max_batch_tokens
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 2048) or 2048)
        self.yes_ids, self.no_ids = answer_token_ids(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.pair_judge_id = f"local:{self.model_name}@{PAIR_TEMPLATE_VERSION}"
        self._pair_ids = None  # A, B and tie answer token ids, looked up at the first comparison
        self.stats = JudgeStats()

    async def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        return await asyncio.to_thread(self.judge_sync, requests)

    def judge_sync(self, requests: Sequence[JudgeRequest]) -> list[list[Verdict]]:
        out: list[list[Verdict]] = [[] for _ in requests]
        judged: list[int] = []
        for i, req in enumerate(requests):
            if req.criteria and not req.response.strip():
                out[i] = [self._verdict(c.id, None, "precheck: empty response cannot meet a criterion")
                          for c in req.criteria]
            elif req.criteria:
                judged.append(i)
        found = by_conversation(requests, judged, self.probabilities,
                                lambda req, why: [error_verdict(c.id, self.judge_id, why) for c in req.criteria],
                                lambda req, probs: [self._verdict(c.id, p) for c, p in zip(req.criteria, probs)])
        for i, verdicts in found.items():
            out[i] = verdicts
        for verdicts in out:
            self.stats.count(verdicts)
        return out

    def _verdict(self, criterion_id: str, prob: Probability | None, precheck: str = "") -> Verdict:
        if prob is None:
            return Verdict(criterion_id=criterion_id, status=Status.UNMET, p_met=0.0, reason=precheck,
                           evidence=precheck, judge_id=self.judge_id)
        met = prob.p_met >= self.threshold
        return Verdict(criterion_id=criterion_id, status=Status.MET if met else Status.UNMET, p_met=prob.p_met,
                       evidence=f"P(yes)={prob.p_met:.3f}, yes/no mass {prob.answer_mass:.2f}",
                       judge_id=self.judge_id, tokens=prob.tokens)

    # -- probabilities -------------------------------------------------------------------------

    def probabilities(self, requests: Sequence[JudgeRequest], shared: bool = True) -> list[list[Probability] | str]:
        """Per request, one Probability per criterion (or an error string). All requests must share
        one conversation. `shared=False` runs the naive one-prompt-per-criterion computation."""

        def pieces(req: JudgeRequest):
            if len(req.response) > self.max_context * 16:  # far past any tokenisation of the context
                return f"too_long: response of {len(req.response)} chars exceeds the judge context"
            return render_pieces(self.tokenizer, req.conversation, req.response, [c.text for c in req.criteria])

        prefix, packs, out = self._packs(requests, pieces)
        if packs:
            compute = self._shared_prefix if shared else self._naive
            for pack, probs in zip(packs, compute(prefix, packs)):
                out[pack.index] = probs
        return out

    def _packs(self, requests: Sequence, pieces: Callable) -> tuple[list[int], list[_Pack], list]:
        """The shared prefix and one pack per request of one conversation, from `pieces(request)` (the rendered
        prompt pieces, or an error string); `out` holds the error strings of requests that cannot be packed
        (too long for the context) and None for the packed ones."""
        if len({r.conversation for r in requests}) > 1:
            raise ValueError("the requests of one token tree must share one conversation")
        prefix, packs, out = [], [], [None] * len(requests)
        for i, req in enumerate(requests):
            rendered = pieces(req)
            if isinstance(rendered, str):
                out[i] = rendered
                continue
            prefix = prefix or self._encode(rendered.head)
            pack = _Pack(i, self._encode(rendered.response_part), [self._encode(s) for s in rendered.criterion_parts])
            needed = len(prefix) + len(pack.response) + max(len(s) for s in pack.suffixes)
            if needed > self.max_context:
                out[i] = f"too_long: {needed} prompt tokens exceed the judge context of {self.max_context}"
                continue
            packs.append(pack)
        return prefix, packs, out

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _shared_prefix(self, prefix: list[int], packs: list[_Pack], read=None, make=Probability) -> list[list]:
        """Per pack, `make(*answer, tokens)` per suffix, `answer` read from the hidden state at its answer
        position by `read` (default: the yes/no reading)."""
        import torch

        read = read or self._read
        base = self.model.base_model
        with torch.inference_mode():
            device = self.model.device
            cache = base(input_ids=torch.tensor([prefix], device=device), use_cache=True).past_key_values
            self.stats.model_calls += 1
            self.stats.tokens += len(prefix)
            results: dict[int, list] = {}
            n_verdicts = sum(len(p.suffixes) for p in packs)
            for chunk in _chunks(packs, self.max_batch_tokens):
                ids, positions, mask, readout = (t.to(device) for t in _tree_batch(chunk, len(prefix), self.pad_id))
                chunk_cache = copy.deepcopy(cache)
                chunk_cache.batch_repeat_interleave(len(chunk))
                hidden = base(input_ids=ids, position_ids=positions, attention_mask=mask,
                              past_key_values=chunk_cache, use_cache=True).last_hidden_state
                self.stats.model_calls += 1
                self.stats.tokens += sum(p.length for p in chunk)
                probs = read(hidden[readout[:, 0], readout[:, 1]])
                k = 0
                for pack in chunk:
                    shared = len(prefix) / n_verdicts + len(pack.response) / len(pack.suffixes)
                    results[pack.index] = [make(*answer, round(shared + len(s)))
                                           for answer, s in zip(probs[k:k + len(pack.suffixes)], pack.suffixes)]
                    k += len(pack.suffixes)
        return [results[p.index] for p in packs]

    def _naive(self, prefix: list[int], packs: list[_Pack]) -> list[list[Probability]]:
        """Reference computation: every criterion as its own full prompt, right-padded batches."""
        import torch

        seqs = [(p.index, prefix + p.response + s) for p in packs for s in p.suffixes]
        flat: list[Probability] = []
        base = self.model.base_model
        with torch.inference_mode():
            for start, size in _row_chunks([len(s) for _, s in seqs], self.max_batch_tokens):
                batch = [s for _, s in seqs[start:start + size]]
                width = max(len(s) for s in batch)
                ids = torch.tensor([s + [self.pad_id] * (width - len(s)) for s in batch])
                attn = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in batch])
                device = self.model.device
                hidden = base(input_ids=ids.to(device), attention_mask=attn.to(device)).last_hidden_state
                self.stats.model_calls += 1
                self.stats.tokens += sum(len(s) for s in batch)
                last = torch.tensor([len(s) - 1 for s in batch], device=hidden.device)
                rows = torch.arange(len(batch), device=hidden.device)
                flat += [Probability(p, m, len(s)) for (p, m), s in zip(self._read(hidden[rows, last]), batch)]
        out, k = [], 0
        for p in packs:
            out.append(flat[k:k + len(p.suffixes)])
            k += len(p.suffixes)
        return out

    def _read(self, hidden) -> list[tuple[float, float]]:
        """(P(yes)/(P(yes)+P(no)), P(yes)+P(no)) from final hidden states at answer positions."""
        import torch

        logprobs = torch.log_softmax(self.model.get_output_embeddings()(hidden).float(), dim=-1)
        yes = torch.logsumexp(logprobs[:, self.yes_ids], dim=-1)
        no = torch.logsumexp(logprobs[:, self.no_ids], dim=-1)
        p_met = torch.sigmoid(yes - no)
        mass = yes.exp() + no.exp()
        return [(float(p), float(m)) for p, m in zip(p_met, mass)]

    # -- pairwise ------------------------------------------------------------------------------

    async def compare(self, requests: Sequence[PairRequest]) -> list[list[Preference]]:
        """One Preference per criterion of each request: the answer with the highest of P(A), P(B), P(tie)."""
        return await asyncio.to_thread(self.compare_sync, requests)

    def compare_sync(self, requests: Sequence[PairRequest]) -> list[list[Preference]]:
        found = by_conversation(
            requests, [i for i, req in enumerate(requests) if req.criteria], self.pair_probabilities,
            lambda req, why: [Preference(c.id, None, reason=why, judge_id=self.pair_judge_id) for c in req.criteria],
            lambda req, probs: [self._preference(c.id, p) for c, p in zip(req.criteria, probs)])
        return [found.get(i, []) for i in range(len(requests))]

    def _preference(self, criterion_id: str, p: PairProbability) -> Preference:
        winner = max(zip((p.p_a, p.p_b, p.p_tie), WINNERS), key=lambda x: x[0])[1]
        return Preference(criterion_id, winner, p.p_a, p.p_b, p.p_tie, judge_id=self.pair_judge_id, tokens=p.tokens,
                          reason=f"P(A)={p.p_a:.3f}, P(B)={p.p_b:.3f}, P(tie)={p.p_tie:.3f}, "
                                 f"answer mass {p.answer_mass:.2f}")

    def pair_probabilities(self, requests: Sequence[PairRequest]) -> list[list[PairProbability] | str]:
        """Per request, one PairProbability per criterion (or an error string); one conversation, one
        shared prefix pass, one packed row per request (both responses, then every criterion)."""
        if self._pair_ids is None:
            self._pair_ids = pair_token_ids(self.tokenizer)

        def pieces(req: PairRequest):
            if len(req.response_a) + len(req.response_b) > self.max_context * 16:
                return "too_long: the two responses exceed the judge context"
            return render_pair_pieces(self.tokenizer, req.conversation, req.response_a, req.response_b,
                                      [c.text for c in req.criteria])

        prefix, packs, out = self._packs(requests, pieces)
        if packs:
            for pack, probs in zip(packs, self._shared_prefix(prefix, packs, self._read_pair, PairProbability)):
                out[pack.index] = probs
        return out

    def _read_pair(self, hidden) -> list[tuple[float, float, float, float]]:
        """(P(A), P(B), P(tie)) normalised over the three, and their total before normalising."""
        import torch

        logprobs = torch.log_softmax(self.model.get_output_embeddings()(hidden).float(), dim=-1)
        answers = torch.stack([torch.logsumexp(logprobs[:, ids], dim=-1) for ids in self._pair_ids], dim=-1)
        probs = torch.softmax(answers, dim=-1)
        mass = answers.exp().sum(dim=-1)
        return [(float(p[0]), float(p[1]), float(p[2]), float(m)) for p, m in zip(probs, mass)]


def by_conversation(requests: Sequence, indices: Sequence[int], compute: Callable[[list], list],
                    failed: Callable[[Any, str], list], made: Callable[[Any, list], list]) -> dict[int, list]:
    """The requests at `indices` grouped by conversation (one shared prefix each) and computed a group at a
    time by `compute(group)`, which gives per request a list of probabilities or an error string (a group
    that raises gives its exception to every request of it). Returns, per index, `made(request, probs)` or
    `failed(request, reason)`. Used by the yes/no judge and the pairwise mode alike."""
    groups: dict[tuple, list[int]] = {}
    for i in indices:
        groups.setdefault(requests[i].conversation, []).append(i)
    out: dict[int, list] = {}
    for members in groups.values():
        group = [requests[i] for i in members]
        try:
            found = compute(group)
        except Exception as exc:  # noqa: BLE001 - any failure becomes error verdicts / undecided preferences
            found = [f"{type(exc).__name__}: {exc}"] * len(group)
        for i, req, probs in zip(members, group, found):
            out[i] = failed(req, probs) if isinstance(probs, str) else made(req, probs)
    return out


def _tree_batch(packs: list[_Pack], offset: int, pad_id: int):
    """Input ids, position ids, a (B, 1, L, offset + L) boolean attention mask and the
    (row, column) answer positions for a batch of packed response rows after a cached prefix."""
    import torch

    width = max(p.length for p in packs)
    ids = torch.full((len(packs), width), pad_id, dtype=torch.long)
    positions = torch.full((len(packs), width), offset, dtype=torch.long)
    segment = torch.full((len(packs), width), -1, dtype=torch.long)  # 0 response, k>0 suffix k, -1 pad
    readout = []
    for b, pack in enumerate(packs):
        r = len(pack.response)
        ids[b, :r] = torch.tensor(pack.response)
        positions[b, :r] = offset + torch.arange(r)
        segment[b, :r] = 0
        start = r
        for k, suffix in enumerate(pack.suffixes, start=1):
            end = start + len(suffix)
            ids[b, start:end] = torch.tensor(suffix)
            positions[b, start:end] = offset + r + torch.arange(len(suffix))
            segment[b, start:end] = k
            readout.append((b, end - 1))
            start = end
    seg_q, seg_k = segment[:, :, None], segment[:, None, :]
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    within = causal & (seg_k >= 0) & ((seg_k == 0) | (seg_k == seg_q)) & (seg_q >= 0)
    prefix = torch.ones(len(packs), width, offset, dtype=torch.bool)
    mask = torch.cat([prefix, within], dim=-1)[:, None, :, :]
    return ids, positions, mask, torch.tensor(readout)


def _chunks(packs: list[_Pack], budget: int) -> list[list[_Pack]]:
    """Sort packs by length and cut them into batches whose padded size stays within `budget`."""
    ordered = sorted(packs, key=lambda p: p.length)
    return [ordered[s:s + n] for s, n in _row_chunks([p.length for p in ordered], budget)]


def _row_chunks(lengths: list[int], budget: int) -> list[tuple[int, int]]:
    """(start, size) runs of consecutive rows whose count x max length stays within `budget`."""
    runs, start, width = [], 0, 0
    for i, n in enumerate(lengths):
        new_width = max(width, n)
        if i > start and new_width * (i - start + 1) > budget:
            runs.append((start, i - start))
            start, new_width = i, n
        width = new_width
    if lengths:
        runs.append((start, len(lengths) - start))
    return runs
