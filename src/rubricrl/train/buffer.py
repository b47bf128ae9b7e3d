"""Selective Sample Buffer (Skywork R1V2): when many GRPO groups have zero reward spread, their
advantages vanish and the step learns little; replay earlier samples with large |advantage| in
their place. Works on the batch dict TRL's GRPOTrainer builds, before the loss.
"""

from __future__ import annotations

from collections import deque

import torch

LEFT_PADDED = ("prompt_ids", "prompt_mask")
RIGHT_PADDED = ("completion_ids", "completion_mask", "old_per_token_logps", "ref_per_token_logps",
                "sampling_per_token_logps", "importance_sampling_ratio", "tool_mask")
PER_ROW = ("advantages",)
SCALARS = ("num_items_in_batch",)


class SelectiveSampleBuffer:
    def __init__(self, num_generations: int, *, capacity: int = 64, zero_spread_threshold: float = 0.5,
                 min_abs_advantage: float = 0.1, pad_token_id: int = 0):
        self.g = num_generations
        self.capacity, self.threshold, self.min_abs = capacity, zero_spread_threshold, min_abs_advantage
        self.pad_token_id = pad_token_id
        self.samples: deque[dict] = deque(maxlen=capacity)
        self.replayed_total = 0

    def process(self, batch: dict) -> tuple[dict, dict[str, float]]:
        """Return the batch (with replayed rows if triggered) and metrics to log."""
        unknown = set(batch) - set(LEFT_PADDED + RIGHT_PADDED + PER_ROW + SCALARS)
        adv = batch["advantages"]
        if unknown or adv.dim() != 1 or adv.numel() % self.g:
            return batch, {"buffer/unsupported_batch": 1.0}
        zero = adv.view(-1, self.g).abs().amax(dim=1) < 1e-8  # per group: all advantages ~0
        share = zero.float().mean().item()
        rows = _split_rows(batch)
        fresh = [r for r in rows if abs(float(r["advantages"])) >= self.min_abs]
        replace = [row for group, is_zero in enumerate(zero.tolist()) if is_zero
                   for row in range(group * self.g, (group + 1) * self.g)]
        replayed = 0
        if share > self.threshold and self.samples:
            ranked = sorted(self.samples, key=lambda r: -abs(float(r["advantages"])))
            for slot, sample in zip(replace, ranked):
                rows[slot] = sample
                replayed += 1
            self.replayed_total += replayed
        for sample in fresh:  # store after replaying, so a step never replays its own rows
            self.samples.append(sample)
        metrics = {"buffer/zero_spread_share": share, "buffer/replayed": float(replayed),
                   "buffer/size": float(len(self.samples))}
        if not replayed:
            return batch, metrics
        out = _join_rows(rows, self.pad_token_id)
        if "num_items_in_batch" in batch:  # keep the loss normaliser consistent with the new masks
            delta = out["completion_mask"].sum() - batch["completion_mask"].sum()
            out["num_items_in_batch"] = batch["num_items_in_batch"] + delta
        return out, metrics


def _split_rows(batch: dict) -> list[dict]:
    n = batch["advantages"].shape[0]
    keys = [k for k in batch if k not in SCALARS and batch[k] is not None]
    return [{k: batch[k][i].detach().clone() for k in keys} for i in range(n)]


def _join_rows(rows: list[dict], pad_token_id: int) -> dict:
    out: dict = {}
    for key in rows[0]:
        values = [r[key] for r in rows]
        if key in PER_ROW:
            out[key] = torch.stack(values)
            continue
        width = max(v.shape[0] for v in values)
        fill = pad_token_id if key == "prompt_ids" else 0
        padded = []
        for v in values:
            pad = v.new_full((width - v.shape[0], *v.shape[1:]), fill)
            padded.append(torch.cat([pad, v]) if key in LEFT_PADDED else torch.cat([v, pad]))
        out[key] = torch.stack(padded)
    return out
