"""HTTP judge modes and concurrency against a loopback llama.cpp server (embedded model), one run.

    python bench/http_judge.py [--url URL] [--parallel 8] [--repeats 2]

Part 1, G=8 responses x K=8 criteria: verdicts/s and judge calls per scored response for
`per_criterion`, `batched`, `logprob` and `implicit` (concurrency 8).
Part 2, `logprob` mode: verdicts/s through rubricrl's client at concurrency 1, 4 and 16, against
the server's own ceiling: the same 64 requests fired at once with a bare httpx client (no limits,
no retries, no parsing). Without --url a server is started in this process with --parallel slots.
The verdict cache is off: every verdict is a real call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx
from judge_throughput import CONVERSATION, CRITERIA, RESPONSES

from rubricrl.conversation import as_conversation
from rubricrl.endpoint import ChatEndpoint, EndpointConfig
from rubricrl.judges.base import JudgeRequest
from rubricrl.judges.http import HTTPJudge
from rubricrl.judges.http_prompts import yesno_messages
from rubricrl.llama_server import LlamaServer
from rubricrl.rubric import Criterion


def requests() -> list[JudgeRequest]:
    conversation = as_conversation(CONVERSATION)
    criteria = tuple(Criterion(id=f"c{k}", text=t, weight=-2 if "blames" in t else 1) for k, t in enumerate(CRITERIA))
    return [JudgeRequest(conversation, r, criteria) for r in RESPONSES]


def run_mode(url: str, mode: str, concurrency: int, repeats: int) -> dict:
    rates, calls, errors = [], 0, 0
    for _ in range(repeats):
        judge = HTTPJudge(ChatEndpoint(EndpointConfig(base_url=url, concurrency=concurrency, timeout=300)), mode)
        batch = requests()
        start = time.perf_counter()
        answers = asyncio.run(judge.judge(batch))
        elapsed = time.perf_counter() - start
        verdicts = sum(len(a) for a in answers)
        rates.append(verdicts / elapsed)
        calls, errors = judge.stats.model_calls, judge.stats.errors
    return {"verdicts_per_s": statistics.median(rates), "calls_per_response": calls / len(RESPONSES), "errors": errors}


async def _bare(url: str) -> float:
    batch = requests()
    bodies = [{"messages": yesno_messages(r.conversation, r.response, c), "max_tokens": 1, "logprobs": True,
               "top_logprobs": 20, "temperature": 0} for r in batch for c in r.criteria]
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=httpx.Limits(max_connections=len(bodies)),
                                 trust_env=False) as client:
        start = time.perf_counter()
        answers = await asyncio.gather(*(client.post("/chat/completions", json=b) for b in bodies))
        elapsed = time.perf_counter() - start
    assert all(a.status_code == 200 for a in answers)
    return len(bodies) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="an OpenAI-compatible base URL ending in /v1 (default: start llama.cpp here)")
    parser.add_argument("--parallel", type=int, default=8, help="llama.cpp slots when the server is started here")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    server = None if args.url else LlamaServer(parallel=args.parallel).start()
    url = args.url or server.url
    print(f"server {url} (parallel slots: {args.parallel if server else 'unknown'}); G={len(RESPONSES)} x K={len(CRITERIA)}")
    asyncio.run(_bare(url))  # warm-up
    print("\nmode            verdicts/s   calls/response   errors")
    for mode in ("per_criterion", "batched", "logprob", "implicit"):
        r = run_mode(url, mode, 8, args.repeats)
        print(f"{mode:<15} {r['verdicts_per_s']:>10.1f}   {r['calls_per_response']:>14.1f}   {r['errors']:>6}")
    print("\nlogprob mode    verdicts/s   share of server ceiling")
    ceiling = statistics.median(asyncio.run(_bare(url)) for _ in range(args.repeats))
    for concurrency in (1, 4, 16):
        r = run_mode(url, "logprob", concurrency, args.repeats)
        print(f"concurrency {concurrency:<3} {r['verdicts_per_s']:>10.1f}   {r['verdicts_per_s'] / ceiling:>8.0%}")
    print(f"server ceiling  {ceiling:>10.1f}   (64 bare requests at once)")


if __name__ == "__main__":
    main()
