"""Simulated-user speed: llama.cpp vs transformers on the embedded model, and conversations per
minute for the default `rubricrl simulate` settings. One run, one process.

    python bench/rollout.py [--prompts 6] [--repeats 1] [--personas 4] [--max-turns 8] [--skip-conversations]

Part (a), tokens/s of the simulated user. The same persona prompts go to both backends,
interleaved call by call so that both meet the same machine load: for each of --prompts bundled
personas, the user's hidden analysis (with the JSON schema the user passes; llama.cpp constrains
to it, transformers cannot) and its next reply, after the same supporter turn, with the same
seeds, one call at a time. Tokens are `ChatResult.completion_tokens` (the server's usage count
for llama.cpp, generated ids for transformers); the rate is their sum over the summed call time,
and the median of per-call rates is printed too (robust to bursts of load from other jobs). The
llama.cpp server runs in this process (`llamacpp?timeout=600`: 4 slots, 2 threads, a long HTTP
timeout so that slow calls are measured rather than cut); a last line fires the same llama.cpp
calls 4 at a time, as `simulate` does. One warm-up call per backend is not counted.

Part (b), conversations per minute with `rubricrl simulate`'s defaults: policy `local`
(transformers, embedded model, 160 new tokens per turn), user `llamacpp`, bundled personas,
max_turns 8, start emotion 40, concurrency 4, on the first --personas personas.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
from collections import Counter

from rubricrl.llm.chat import make_chat_model
from rubricrl.dialogue.persona import load_personas
from rubricrl.dialogue.rollout import chat_policy, plan, run_conversations
from rubricrl.dialogue.summary import summarize_simulation
from rubricrl.dialogue.user import SimulatedUser, UserSettings
from rubricrl.llm.endpoint import ChatResult

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


class Backend:
    """One chat model playing the user, with per-call (tokens, seconds) and answer quality."""

    def __init__(self, name: str, model):
        self.name, self.model = name, model
        self.user = SimulatedUser(self, UserSettings(analysis_retries=0))  # one call per analysis: same prompts
        self.per_call: list[tuple[int, float]] = []
        self.errors = 0
        self.quality = Counter()

    async def chat(self, messages, **kwargs) -> ChatResult:
        start = time.perf_counter()
        result = await self.model.chat(messages, **kwargs)
        self.per_call.append((result.completion_tokens, time.perf_counter() - start))
        self.errors += result.error is not None
        return result

    async def turn(self, persona, seed: int) -> None:
        history = [("user", persona.first_message), ("supporter", SUPPORTER_TURN)]
        analysis = await self.user.analyse(persona, history, 40.0, seed)
        reply = await self.user.reply(persona, history, 40.0, False, seed)
        self.quality.update(asked=1, parsed=not isinstance(analysis, str), replied=reply is not None)

    def line(self) -> str:
        tokens = sum(t for t, _ in self.per_call)
        seconds = sum(s for _, s in self.per_call)
        rates = [t / s for t, s in self.per_call if s > 0]
        q = self.quality
        return (f"    {self.name:<13} {len(self.per_call):3d} calls  {tokens:5d} tokens  {seconds:7.1f} s  "
                f"{tokens / seconds:6.1f} tokens/s  (median per call {statistics.median(rates):6.1f})  "
                f"analyses parsed {q['parsed']}/{q['asked']}  replies non-empty {q['replied']}/{q['asked']}  "
                f"errors {self.errors}")

    def rate(self) -> tuple[float, float]:
        seconds = sum(s for _, s in self.per_call)
        return (sum(t for t, _ in self.per_call) / seconds,
                statistics.median(t / s for t, s in self.per_call if s > 0))


def part_a(personas, llama_model, local_model, repeats: int) -> None:
    llama, local = Backend("llama.cpp", llama_model), Backend("transformers", local_model)
    for backend in (llama, local):  # warm-up: first-call costs, not counted
        asyncio.run(backend.turn(personas[0], 999))
        backend.per_call.clear()
        backend.quality.clear()
        backend.errors = 0
    for r in range(repeats):
        for i, p in enumerate(personas):
            pair = (llama, local) if (i + r) % 2 == 0 else (local, llama)  # alternate who goes first
            for backend in pair:
                asyncio.run(backend.turn(p, 100 * r + i))
    print(f"(a) simulated user, embedded SmolLM2-135M-Instruct, {repeats} x {len(personas)} personas x "
          "(1 analysis + 1 reply) per backend, interleaved, one call at a time, temperature 0.7")
    print(llama.line())
    print(local.line())
    (lt, lm), (tt, tm) = llama.rate(), local.rate()
    print(f"    ratio llama.cpp / transformers: {lt / tt:.2f}x on summed time, {lm / tm:.2f}x on per-call medians "
          "(target >= 2x)")
    llama.per_call.clear()
    start = time.perf_counter()

    async def concurrent() -> None:
        gate = asyncio.Semaphore(4)

        async def one(i, p):
            async with gate:
                await llama.turn(p, 100 * repeats + i)

        await asyncio.gather(*(one(i, p) for i, p in enumerate(personas)))

    asyncio.run(concurrent())
    wall = time.perf_counter() - start
    tokens = sum(t for t, _ in llama.per_call)
    print(f"    llama.cpp, the same {len(personas)} personas 4 at a time: {tokens} tokens in {wall:.1f} s wall = "
          f"{tokens / wall:.1f} tokens/s")


def part_b(personas, policy_model, max_turns: int) -> None:
    settings = UserSettings(max_turns=max_turns)  # simulate's defaults: start 40, max_change 10
    slots = plan(personas, repeats=1, seed=0)
    policy, user_model = Metered(policy_model), Metered(make_chat_model("llamacpp"))  # simulate's default user
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
    summary = summarize_simulation(transcripts)
    print(f"    end reasons {summary.end_reasons}; errors {summary.errors} {summary.error_reasons or ''}; "
          f"final emotions {[round(t.final_emotion) for t in transcripts]}; empty supporter replies "
          f"{summary.empty_supporter_replies}")
    print(f"    policy (transformers): {policy.calls} calls, {policy.tokens} tokens, {policy.seconds:.1f} s in calls; "
          f"user (llama.cpp): {user_model.calls} calls, {user_model.tokens} tokens, {user_model.seconds:.1f} s in calls")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=6, help="personas for part (a)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of part (a)")
    parser.add_argument("--personas", type=int, default=4, help="conversations for part (b)")
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--skip-conversations", action="store_true")
    args = parser.parse_args()

    people = load_personas().personas
    print(f"machine: {os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f} "
          "(other jobs share these cores)")
    llama = make_chat_model("llamacpp?timeout=600")
    local_model = make_chat_model("local")
    part_a(people[: args.prompts], llama, local_model, args.repeats)
    del llama  # its server stops; part (b) starts `simulate`'s default one
    gc.collect()
    if not args.skip_conversations:
        part_b(people[: args.personas], local_model, args.max_turns)
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
