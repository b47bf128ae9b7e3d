"""Utterance-level credit vs episode-level credit on the SAME rollouts: the advantages GRPO would
train on, and the share of groups with no reward spread. One process; prints its figures.

    python bench/credit.py [--rollouts bench/credit_rollouts.jsonl] [--personas 6] [--group-size 4]
                           [--max-turns 3] [--alpha 0.5] [--bootstrap 500]

Rollouts: read from --rollouts; the planned conversations it does not hold yet are generated
first and appended as each ends (a run cut short is continued by the next one). The generation
mirrors a training step (`rubricrl train` with a `dialogue:` section and its defaults):
the first --personas bundled personas, --group-size conversations per persona against identically
seeded simulated users (start emotion 30, B = 10, up to --max-turns supporter turns), the policy
sampled at temperature 0.7 with up to 64 new tokens per turn and the supporter system prompt. Policy
and user are the embedded SmolLM2-135M-Instruct on one in-process llama.cpp server (the policy gets
its own seed per conversation, so the G samples of a group differ as the trained policy's would).
The policy's token count of every turn is recorded (token weights below).

Credit, for the emotion reward in `final` (the default) and `step` mode, computed by
rubricrl.dialogue.credit on the same transcripts:
- episode: one reward per conversation, TRL's group advantages (r - mean) / (std + 1e-4); every
  turn (every token) of a conversation carries its advantage;
- turn: r_t = alpha R + (1 - alpha) a_t (a_t = the turn's emotion change mapped to [0, 1]), the
  turns of a group pooled (dialogue/credit.py).

Figures, per mode:
- zero-spread groups: share of groups whose rewards are all equal (no learning signal);
- Var(A) per turn / per token: variance of the scaled advantages over all policy turns (each turn
  once) and over all policy tokens (each turn weighted by its token count: what the token-level
  loss sees); raw: the same before the division by the std (reward units);
- within-conversation share: the part of Var(A) per turn that is between the turns of one
  conversation (0 for episode credit by construction);
- baseline noise: how much a turn's advantage depends on which other conversations its group
  happened to contain. For every conversation, its group is rebuilt --bootstrap times from itself
  plus G - 1 conversations drawn with replacement from the group; the variance of each turn's
  scaled advantage over those rebuilds, averaged over turns;
- sign flips: share of turns whose turn-credit advantage has the opposite sign of the episode one.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import statistics
import time
from pathlib import Path

from rubricrl.dialogue.credit import RewardView, group_advantages, turn_attribution, turn_rewards
from rubricrl.dialogue.persona import load_personas
from rubricrl.dialogue.rewards import emotion_reward
from rubricrl.dialogue.rollout import SUPPORTER_SYSTEM, PolicyReply, Slot, Transcript, plan, run_conversations
from rubricrl.dialogue.user import SimulatedUser, UserSettings

EPS = 1e-4
MAX_CHANGE = 10


def generate(path: Path, personas: int, group_size: int, max_turns: int) -> None:
    """Run the planned conversations that `path` does not hold yet, appending each as it ends
    (a run cut short keeps what it finished; the next run goes on from there)."""
    from rubricrl.llm.chat import make_chat_model

    slots = plan(load_personas("support_seekers").personas[:personas], group_size=group_size, seed=0)
    have = {json.loads(line)["transcript"]["trajectory_id"] for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()} if path.exists() else set()
    todo = [s for s in slots if s.trajectory_id not in have]
    if not todo:
        return
    model = make_chat_model("llamacpp?timeout=600")
    tokens: dict[str, list[int]] = {}

    async def policy(slot: Slot, messages: list[dict[str, str]]) -> PolicyReply:
        seed = int.from_bytes(hashlib.sha256(slot.trajectory_id.encode()).digest()[:4], "big") + len(messages)
        result = await model.chat([{"role": "system", "content": SUPPORTER_SYSTEM}] + messages, max_tokens=64,
                                  temperature=0.7, seed=seed)
        tokens.setdefault(slot.trajectory_id, []).append(result.completion_tokens)
        return PolicyReply(result.text, result.error)

    def save(t: Transcript) -> None:
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"transcript": t.model_dump(mode="json"),
                                  "policy_tokens": tokens.get(t.trajectory_id, [])[: t.supporter_turns]}) + "\n")

    user = SimulatedUser(model, UserSettings(start_emotion=30, max_change=MAX_CHANGE, max_turns=max_turns))
    start = time.perf_counter()
    asyncio.run(run_conversations(todo, policy, user, concurrency=4, on_done=save))
    print(f"generated {len(todo)} conversations in {time.perf_counter() - start:.0f} s -> {path}")


def load(path: Path, personas: int, group_size: int) -> tuple[list[Transcript], list[list[int]]]:
    """The planned conversations in plan order (groups consecutive, as TRL orders them)."""
    rows = {r["transcript"]["trajectory_id"]: r for r in
            (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())}
    slots = plan(load_personas("support_seekers").personas[:personas], group_size=group_size, seed=0)
    missing = [s.trajectory_id for s in slots if s.trajectory_id not in rows]
    if missing:
        raise SystemExit(f"{path} lacks {len(missing)} planned conversation(s); run again to generate them")
    ordered = [rows[s.trajectory_id] for s in slots]
    return [Transcript.model_validate(r["transcript"]) for r in ordered], [r["policy_tokens"] for r in ordered]


def per_turn_values(transcripts, mode: str, credit: str, alpha: float) -> list[list[float] | None]:
    episode = [emotion_reward(t, mode, max_change=MAX_CHANGE) for t in transcripts]
    if credit == "episode":
        return [None if r is None else [r] for r in episode]
    view = RewardView(1.0, episode, [turn_attribution(t, MAX_CHANGE) for t in transcripts])
    return turn_rewards([view], [t.supporter_turns for t in transcripts], alpha)


def per_turn(adv: list[list[float] | None], transcripts, credit: str) -> list[list[float] | None]:
    """Episode advantages spread over the conversation's turns (every turn carries it)."""
    if credit == "turn":
        return adv
    return [None if a is None else a * t.supporter_turns for a, t in zip(adv, transcripts)]


def variance(values: list[float], weights: list[float] | None = None) -> float:
    weights = weights or [1.0] * len(values)
    total = sum(weights)
    mean = sum(w * v for w, v in zip(weights, values)) / total
    return sum(w * (v - mean) ** 2 for w, v in zip(weights, values)) / total


def baseline_noise(values: list[list[float] | None], group_size: int, draws: int, seed: int = 0) -> float:
    """Mean over turns of Var_b[A_b(turn)], A_b against a group rebuilt from the turn's own
    conversation and G - 1 conversations drawn with replacement from its group."""
    rng = random.Random(seed)
    noise = []
    for g in range(0, len(values), group_size):
        group = [v for v in values[g:g + group_size] if v is not None]
        for own in group:
            samples: list[list[float]] = [[] for _ in own]
            for _ in range(draws):
                rebuilt = [own] + [rng.choice(group) for _ in range(group_size - 1)]
                adv, _ = group_advantages(rebuilt, group_size, "group")
                for k, a in enumerate(adv[0]):
                    samples[k].append(a)
            noise += [statistics.pvariance(s) for s in samples]
    return sum(noise) / len(noise)


def figures(transcripts, tokens, mode: str, credit: str, alpha: float, group_size: int, draws: int) -> dict:
    values = per_turn_values(transcripts, mode, credit, alpha)
    adv, zero = group_advantages(values, group_size, "group")
    raw, _ = group_advantages(values, group_size, "none")
    turns = per_turn(adv, transcripts, credit)
    raw_turns = per_turn(raw, transcripts, credit)
    flat = [a for r in turns if r for a in r]
    weights = [w for r, tok in zip(turns, tokens) if r for w in tok]
    if len(weights) != len(flat):
        raise SystemExit("the recorded policy token counts do not match the supporter turns")
    within = [a - sum(r) / len(r) for r in turns if r for a in r]
    return {"zero_spread": sum(zero) / len(zero), "groups": len(zero), "turns": len(flat),
            "var_turn": variance(flat), "var_token": variance(flat, weights),
            "var_raw": variance([a for r in raw_turns if r for a in r]),
            "within": sum(x * x for x in within) / len(within) / variance(flat) if variance(flat) else 0.0,
            "noise": baseline_noise(values, group_size, draws), "advantages": turns}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=Path, default=Path(__file__).parent / "credit_rollouts.jsonl")
    parser.add_argument("--personas", type=int, default=6)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--bootstrap", type=int, default=500)
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f}")
    generate(args.rollouts, args.personas, args.group_size, args.max_turns)
    transcripts, tokens = load(args.rollouts, args.personas, args.group_size)
    groups = len(transcripts) // args.group_size
    ends: dict[str, int] = {}
    for t in transcripts:
        ends[t.end_reason] = ends.get(t.end_reason, 0) + 1
    turns = [t.supporter_turns for t in transcripts if t.end_reason != "error"]
    print(f"rollouts {args.rollouts.name}: {len(transcripts)} conversations in {groups} groups of {args.group_size}, "
          f"{sum(turns)} scored supporter turns (mean {sum(turns) / max(len(turns), 1):.2f}), "
          f"end reasons {dict(sorted(ends.items()))}, {sum(map(sum, tokens))} policy tokens")
    changes = [d for t in transcripts if t.end_reason != "error" for d in t.changes]
    print(f"per-turn emotion changes: {dict(sorted((d, changes.count(d)) for d in set(changes)))}")
    print(f"alpha {args.alpha}, advantages scaled per group (TRL's default), {args.bootstrap} bootstrap rebuilds\n")
    header = (f"{'reward':7} {'credit':8} {'zero-spread groups':>18} {'Var(A)/turn':>12} {'Var(A)/token':>13} "
              f"{'raw Var/turn':>13} {'within conv':>12} {'baseline noise':>15} {'sign flips':>11}")
    print(header)
    print("-" * len(header))
    for mode in ("final", "step"):
        episode = figures(transcripts, tokens, mode, "episode", args.alpha, args.group_size, args.bootstrap)
        turn = figures(transcripts, tokens, mode, "turn", args.alpha, args.group_size, args.bootstrap)
        pairs = [(a, b) for ra, rb in zip(episode["advantages"], turn["advantages"]) if ra and rb
                 for a, b in zip(ra, rb)]
        flips = sum((a > 0 and b < 0) or (a < 0 and b > 0) for a, b in pairs) / len(pairs)
        for name, f in (("episode", episode), ("turn", turn)):
            print(f"{mode:7} {name:8} {f['zero_spread']:>12.1%} of {f['groups']:<3} {f['var_turn']:>12.3f} "
                  f"{f['var_token']:>13.3f} {f['var_raw']:>13.4f} {f['within']:>12.1%} {f['noise']:>15.3f} "
                  + (f"{flips:>11.1%}" if name == "turn" else f"{'':>11}"))


if __name__ == "__main__":
    main()
