"""Simulated-user speed: llama.cpp vs transformers on the embedded model, and conversations per
minute for the default `rubricrl simulate` settings. One run, one process.

    python bench/rollout.py [--prompts 6] [--personas 4] [--max-turns 8] [--skip-conversations]

Part (a), tokens/s of the simulated user. The same persona prompts go to both backends in
alternation: for each of --prompts bundled personas, the user's hidden analysis (JSON, with the
schema the user passes; llama.cpp constrains to it, transformers cannot) and its next reply,
after the same supporter turn, with the same seeds. One call at a time, so both backends see the
same load; tokens are `ChatResult.completion_tokens` (the server's usage count for llama.cpp,
generated ids for transformers) over the wall time of the calls. The llama.cpp server is
started in this process (`llamacpp` spec, 4 slots, 2 threads); a last line fires the same
llama.cpp calls 4 at a time, as `simulate` does.

Part (b), conversations per minute with `rubricrl simulate`'s defaults: policy `local`
(transformers, embedded model, 160 new tokens per turn), user `llamacpp`, bundled personas,
max_turns 8, start emotion 40, concurrency 4, on the first --personas personas.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections import Counter

from rubricrl.chat import make_chat_model
from rubricrl.dialogue.persona import load_personas
from rubricrl.dialogue.rollout import chat_policy, plan, run_conversations
from rubricrl.dialogue.user import SimulatedUser, UserSettings
from rubricrl.endpoint import ChatResult

SUPPORTER_TURN = ("That sounds like a lot to carry on your own. What has been the hardest part of it for you "
                  "these last few days?")


class Metered:
    """A chat model wrapper that adds up calls, completion tokens and wall time."""

    def __init__(self, model):
        self.model, self.name = model, model.name
        self.calls = self.tokens = self.errors = 0
        self.seconds = 0.0

    async def chat(self, messages, **kwargs) -> ChatResult:
        start = time.perf_counter()
        result = await self.model.chat(messages, **kwargs)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.tokens += result.completion_tokens
        self.errors += result.error is not None
        return result

    def reset(self) -> None:
        self.calls = self.tokens = self.errors = 0
        self.seconds = 0.0


async def user_turns(user: SimulatedUser, personas, seed: int) -> tuple[int, int]:
    """One analysis and one reply per persona, sequentially; returns (analyses parsed, replies non-empty)."""
    parsed = replied = 0
    for i, p in enumerate(personas):
        history = [("user", p.first_message), ("supporter", SUPPORTER_TURN)]
        analysis = await user.analyse(p, history, 40.0, seed + i)
        parsed += not isinstance(analysis, str)
        reply = await user.reply(p, history, 40.0, False, seed + i)
        replied += reply is not None
    return parsed, replied


async def concurrent_user_turns(user: SimulatedUser, personas, seed: int, width: int) -> None:
    gate = asyncio.Semaphore(width)

    async def one(i, p):
        async with gate:
            history = [("user", p.first_message), ("supporter", SUPPORTER_TURN)]
            await user.analyse(p, history, 40.0, seed + i)
            await user.reply(p, history, 40.0, False, seed + i)

    await asyncio.gather(*(one(i, p) for i, p in enumerate(personas)))


def part_a(personas, llama: Metered, local: Metered, repeats: int) -> None:
    # analysis_retries=0: one call per analysis, so both backends answer exactly the same prompts
    settings = UserSettings(analysis_retries=0)
    users = {"llama.cpp": SimulatedUser(llama, settings), "transformers": SimulatedUser(local, settings)}
    quality = {name: Counter() for name in users}
    for name, user in users.items():  # warm-up (first-call overheads), not counted
        asyncio.run(user_turns(user, personas[:1], 999))
    llama.reset()
    local.reset()
    for r in range(repeats):
        for name, user in users.items():
            parsed, replied = asyncio.run(user_turns(user, personas, 100 * r))
            quality[name].update(parsed=parsed, replied=replied, asked=len(personas))
    rates = {}
    print(f"(a) simulated user, embedded SmolLM2-135M-Instruct, {repeats} x {len(personas)} personas x "
          "(1 analysis + 1 reply), one call at a time, temperature 0.7")
    for name, meter in (("llama.cpp", llama), ("transformers", local)):
        rates[name] = meter.tokens / meter.seconds if meter.seconds else float("nan")
        q = quality[name]
        print(f"    {name:<13} {meter.calls:3d} calls  {meter.tokens:5d} tokens  {meter.seconds:7.1f} s  "
              f"{rates[name]:6.1f} tokens/s  {meter.seconds / max(meter.calls, 1):5.2f} s/call  "
              f"analyses parsed {q['parsed']}/{q['asked']}  replies non-empty {q['replied']}/{q['asked']}  "
              f"errors {meter.errors}")
    print(f"    ratio llama.cpp / transformers: {rates['llama.cpp'] / rates['transformers']:.2f}x (target >= 2x)")
    llama.reset()
    start = time.perf_counter()
    asyncio.run(concurrent_user_turns(users["llama.cpp"], personas, 0, 4))
    wall = time.perf_counter() - start
    print(f"    llama.cpp, same calls 4 at a time: {llama.tokens} tokens in {wall:.1f} s = "
          f"{llama.tokens / wall:.1f} tokens/s")


def part_b(personas, policy_model, user_model: Metered, max_turns: int) -> None:
    settings = UserSettings(max_turns=max_turns)  # simulate's defaults: start 40, max_change 10
    slots = plan(personas, repeats=1, seed=0)
    policy = Metered(policy_model)
    user_model.reset()
    start = time.perf_counter()
    done = asyncio.run(run_conversations(slots, chat_policy(policy), SimulatedUser(user_model, settings),
                                         concurrency=4))
    wall = time.perf_counter() - start
    transcripts = [done[s.trajectory_id] for s in slots]
    turns = sum(t.supporter_turns for t in transcripts)
    print(f"(b) rubricrl simulate defaults (policy local, user llamacpp, max_turns {max_turns}, concurrency 4): "
          f"{len(transcripts)} personas ({', '.join(p.id for p in personas)})")
    print(f"    {len(transcripts)} conversations in {wall:.1f} s = {len(transcripts) / wall * 60:.2f} conversations/min; "
          f"{turns} supporter turns ({turns / len(transcripts):.1f} per conversation)")
    print(f"    end reasons {dict(Counter(t.end_reason for t in transcripts))}; final emotions "
          f"{[round(t.final_emotion) for t in transcripts]}")
    print(f"    policy (transformers): {policy.calls} calls, {policy.tokens} tokens, {policy.seconds:.1f} s in calls; "
          f"user (llama.cpp): {user_model.calls} calls, {user_model.tokens} tokens, {user_model.seconds:.1f} s in calls")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=6, help="personas for part (a)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of part (a)")
    parser.add_argument("--personas", type=int, default=4, help="conversations for part (b)")
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--skip-conversations", action="store_true")
    args = parser.parse_args()

    people = load_personas().personas
    print(f"machine: {os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f} "
          "(other jobs share these cores)")
    llama = Metered(make_chat_model("llamacpp"))
    local_model = make_chat_model("local")
    part_a(people[: args.prompts], llama, Metered(local_model), args.repeats)
    if not args.skip_conversations:
        part_b(people[: args.personas], local_model, llama, args.max_turns)
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
