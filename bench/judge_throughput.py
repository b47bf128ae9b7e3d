"""Shared-prefix local judge vs the naive one-prompt-per-criterion computation, same run.

    python bench/judge_throughput.py [--model SPEC] [--groups 8] [--criteria 8] [--repeats 3]

Prints verdicts/s of both, their ratio, the largest probability difference, the model's raw
prefill tokens/s on this machine (batch 1, one long sequence) and the share of that ceiling the
shared-prefix judge reaches (forward tokens it computes per second / raw prefill tokens/s).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from rubricrl.core.messages import as_conversation
from rubricrl.judges.base import JudgeRequest
from rubricrl.judges.local import LocalJudge
from rubricrl.rubrics.model import Criterion

CONVERSATION = [
    {"role": "user", "content": "I moved to a new city for work three months ago and I still don't know anyone. "
                                "Weekends are the worst. I sit in my flat and scroll on my phone all day."},
]
CRITERIA = [
    "The reply names or validates the loneliness the person described.",
    "The reply refers to the move to a new city.",
    "The reply does not jump straight to a list of advice.",
    "The reply invites the person to say more.",
    "The reply asks at most two questions.",
    "The reply avoids dismissive phrases.",
    "The reply blames the person for their situation.",
    "The reply suggests one small, concrete step the person could take.",
]
RESPONSES = [
    "Three months in a new place without anyone to share the weekend with sounds really lonely. It makes sense that "
    "the weekends feel heaviest, since work gives the week some structure. What do the weekends usually look like?",
    "Moving somewhere new is hard. You should join a club, download a meetup app, and say yes to every invitation. "
    "Also try the gym, a language class and volunteering. You will make friends quickly if you put yourself out there.",
    "That sounds isolating. Scrolling all day can make the quiet feel even louder. I wonder whether there was a "
    "moment this week when you felt a bit less alone, even briefly? I'd like to hear more about how you're doing.",
    "Everyone feels like that at first, it's not a big deal. Just give it time and stop worrying so much.",
    "It sounds like you've been carrying this on your own for a while. Leaving everything familiar behind for a job "
    "is a big change, and three months is not long. How have you been feeling about the move overall?",
    "Have you tried talking to your colleagues? Maybe invite one of them for a coffee after work on Friday. Small "
    "steps like that can make a new city feel more like home over time.",
    "I'm sorry you're going through this. Weekends alone in a flat can feel endless. Would it help to talk about "
    "what you used to enjoy doing on weekends back home?",
    "Loneliness after a move is really common, and it doesn't mean anything is wrong with you. Is there anything "
    "you miss most from where you lived before?",
]


def prefill_tokens_per_second(judge: LocalJudge, length: int = 1024, repeats: int = 3) -> float:
    ids = torch.randint(100, 40000, (1, length))
    base = judge.model.base_model
    times = []
    with torch.inference_mode():
        base(input_ids=ids[:, :64])
        for _ in range(repeats):
            start = time.perf_counter()
            base(input_ids=ids)
            times.append(time.perf_counter() - start)
    return length / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="judge model spec (default: embedded SmolLM2-135M)")
    parser.add_argument("--groups", type=int, default=8, help="G responses to one conversation")
    parser.add_argument("--criteria", type=int, default=8, help="K criteria per response")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    judge = LocalJudge(args.model)
    conv = as_conversation(CONVERSATION)
    crits = tuple(Criterion(id=f"c{i}", text=CRITERIA[i % len(CRITERIA)] + ("" if i < len(CRITERIA) else f" ({i})"))
                  for i in range(args.criteria))
    reqs = [JudgeRequest(conv, RESPONSES[g % len(RESPONSES)] + ("" if g < len(RESPONSES) else f" ({g})"), crits)
            for g in range(args.groups)]
    n = args.groups * args.criteria
    judge.probabilities(reqs[:1], shared=True)  # warm-up
    timings: dict[bool, list[float]] = {True: [], False: []}
    tokens: dict[bool, int] = {}
    results = {}
    for _ in range(args.repeats):
        for shared in (True, False):  # interleaved, so drift in machine load hits both
            before = judge.stats.tokens
            start = time.perf_counter()
            results[shared] = judge.probabilities(reqs, shared=shared)
            timings[shared].append(time.perf_counter() - start)
            tokens[shared] = judge.stats.tokens - before
    shared_s, naive_s = statistics.median(timings[True]), statistics.median(timings[False])
    a = np.array([[p.p_met for p in row] for row in results[True]])
    b = np.array([[p.p_met for p in row] for row in results[False]])
    ceiling = prefill_tokens_per_second(judge)
    print(f"model: {judge.model_name}  torch threads: {torch.get_num_threads()}  G={args.groups} K={args.criteria}")
    print(f"shared-prefix: {n / shared_s:8.1f} verdicts/s  ({shared_s:.2f} s, {tokens[True]} forward tokens)")
    print(f"naive        : {n / naive_s:8.1f} verdicts/s  ({naive_s:.2f} s, {tokens[False]} forward tokens)")
    print(f"speed-up     : {naive_s / shared_s:.2f}x  (token ratio {tokens[False] / tokens[True]:.2f}x)")
    print(f"max |p_shared - p_naive| = {np.abs(a - b).max():.2e}")
    print(f"raw prefill  : {ceiling:8.0f} tokens/s (batch 1, 1024 tokens)")
    print(f"judge reaches: {tokens[True] / shared_s:8.0f} forward tokens/s = "
          f"{tokens[True] / shared_s / ceiling:.0%} of the prefill ceiling")


if __name__ == "__main__":
    main()
