"""Stickiness and overlap of tactics across consecutive supporter turns (MINT).

A conversation is the list of its supporter turns' tactic sets, in order. Stickiness is
P(a tactic appears at turn t+1 | it appeared at turn t), pooled over all consecutive pairs:
sum |A_t ∩ A_t+1| / sum |A_t|. With one label per turn it is the share of consecutive pairs
with the same tactic. Per tactic: pairs where it appears in both / pairs where it appears at t.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass
class Stickiness:
    overall: float | None
    per_tactic: dict[str, float] = field(default_factory=dict)
    jaccard: float | None = None  # mean Jaccard overlap of consecutive turns' tactic sets
    pairs: int = 0
    distribution: dict[str, float] = field(default_factory=dict)  # share of turns using each tactic


def consecutive_pairs(conversations: Iterable[Sequence[set[str]]]) -> list[tuple[set[str], set[str]]]:
    return [(set(turns[i]), set(turns[i + 1])) for turns in conversations for i in range(len(turns) - 1)]


def stickiness(conversations: Iterable[Sequence[set[str]]]) -> Stickiness:
    conversations = [list(c) for c in conversations]
    pairs = consecutive_pairs(conversations)
    at_t: Counter = Counter()
    kept: Counter = Counter()
    jaccards = []
    for a, b in pairs:
        for tactic in a:
            at_t[tactic] += 1
            kept[tactic] += tactic in b
        union = a | b
        if union:
            jaccards.append(len(a & b) / len(union))
    turns = [t for c in conversations for t in c]
    used = Counter(tactic for t in turns for tactic in t)
    total = sum(at_t.values())
    return Stickiness(
        overall=sum(kept.values()) / total if total else None,
        per_tactic={t: kept[t] / at_t[t] for t in sorted(at_t)},
        jaccard=sum(jaccards) / len(jaccards) if jaccards else None,
        pairs=len(pairs),
        distribution={t: used[t] / len(turns) for t in sorted(used)} if turns else {},
    )
