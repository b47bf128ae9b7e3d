"""How likely a reference language model finds a reply, given the prompt it answers.

Word salad sampled at temperature 1.0 ("Happy claymen think mistakenly...") is made of words a
language model would rarely pick in that order, so the per-token log-probabilities of such a reply
under a fixed reference model are low; a fluent reply's are high. The quality gate
(judges/gate.py) uses these figures as part of its coherence model.

The reference model is any causal LM spec `load_causal_lm` takes (default: the embedded
SmolLM2-135M-Instruct). It is a fixed model, never the policy being trained, so a policy cannot move
the yardstick it is measured by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rubricrl.core.extras import require

LOW_LOGPROB = -6.0  # a token the model gives less than ~0.25% probability


@dataclass(frozen=True)
class ReplyLikelihood:
    """Per-token log-probabilities of a reply, summarised. `tokens` is 0 for an empty reply (then
    every figure is 0.0)."""

    tokens: int
    mean: float  # mean log-probability per token
    p10: float  # 10th percentile: the reply's least likely stretch
    low_share: float  # share of tokens below LOW_LOGPROB

    def features(self) -> list[float]:
        return [self.mean, self.p10, self.low_share]


FEATURE_NAMES = ("lm_mean", "lm_p10", "lm_low_share")


def reply_likelihoods(prompts: Sequence[str], replies: Sequence[str], model: str | None = None,
                      batch_size: int = 8, max_tokens: int = 512) -> list[ReplyLikelihood]:
    """One `ReplyLikelihood` per (prompt, reply): the reply's tokens scored after the prompt as a user
    turn in the model's chat template. Replies longer than `max_tokens` tokens are scored on their
    first `max_tokens`."""
    require("torch", "transformers", extra="local", feature="reply likelihood features (quality gate)")
    import torch

    from rubricrl.llm.models import load_causal_lm

    if len(prompts) != len(replies):
        raise ValueError(f"{len(prompts)} prompts but {len(replies)} replies")
    lm, tok = load_causal_lm(model)
    device = next(lm.parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    encoded = []
    for prompt, reply in zip(prompts, replies):
        head = _prompt_text(tok, prompt)
        p_ids = tok(head, add_special_tokens=False)["input_ids"]
        r_ids = tok(reply, add_special_tokens=False)["input_ids"][:max_tokens] if reply.strip() else []
        encoded.append((p_ids, r_ids))
    out: list[ReplyLikelihood | None] = [None] * len(encoded)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]) + len(encoded[i][1]))
    for start in range(0, len(order), batch_size):
        chunk = [i for i in order[start:start + batch_size] if encoded[i][1]]
        for i in order[start:start + batch_size]:
            if not encoded[i][1]:
                out[i] = ReplyLikelihood(0, 0.0, 0.0, 0.0)
        if not chunk:
            continue
        width = max(len(encoded[i][0]) + len(encoded[i][1]) for i in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, i in enumerate(chunk):  # right padding: positions match an unpadded forward pass
            seq = encoded[i][0] + encoded[i][1]
            ids[row, :len(seq)] = torch.tensor(seq)
            mask[row, :len(seq)] = 1
        with torch.inference_mode():
            logits = lm(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
        logprobs = torch.log_softmax(logits, dim=-1)
        for row, i in enumerate(chunk):
            p_len, r_len = len(encoded[i][0]), len(encoded[i][1])
            target = torch.tensor(encoded[i][1], device=logprobs.device)
            values = logprobs[row, p_len - 1:p_len - 1 + r_len].gather(1, target[:, None])[:, 0].cpu().numpy()
            out[i] = summarise(values)
    return [x for x in out if x is not None]


def summarise(values: np.ndarray) -> ReplyLikelihood:
    values = np.asarray(values, dtype=np.float64)
    if not len(values):
        return ReplyLikelihood(0, 0.0, 0.0, 0.0)
    return ReplyLikelihood(len(values), float(values.mean()), float(np.percentile(values, 10)),
                           float((values < LOW_LOGPROB).mean()))


def _prompt_text(tok, prompt: str) -> str:
    if getattr(tok, "chat_template", None):
        return tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                       add_generation_prompt=True)
    return f"{prompt}\n"
