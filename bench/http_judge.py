"""HTTP judge modes and concurrency against a loopback llama.cpp server (embedded model), one run.

    python -u bench/http_judge.py [--url URL] [--parallel 8] [--repeats 2]

Part 1, G=8 responses x K=8 criteria: verdicts/s and judge calls per scored response for
`per_criterion`, `batched`, `logprob` and `implicit` (concurrency 8, default criterion order).
Part 2, `logprob` mode at concurrency 1, 4, 8 and 16, criteria `spread` (all calls at once) and `chain`ed
(one response's calls in sequence, so llama.cpp's per-slot prompt cache reuses the shared prefix),
against a bare httpx client sending the same 64 requests at the same concurrency (no limits, retries or
parsing; same spread/chain order). The server's maximum is the best bare figure of the run.
Without --url a server is started in this process with --parallel slots. The verdict cache is off:
every verdict is a real call. Run it alone: llama.cpp slows down badly when the cores are shared.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx
from judge_throughput import CONVERSATION, CRITERIA, RESPONSES

from rubricrl.core.messages import as_conversation
from rubricrl.llm.endpoint import ChatEndpoint, EndpointConfig
from rubricrl.judges.base import JudgeRequest
from rubricrl.judges.http import HTTPJudge
from rubricrl.judges.http_prompts import yesno_messages
from rubricrl.llm.llama_server import LlamaServer
from rubricrl.rubrics.model import Criterion


def requests() -> list[JudgeRequest]:
    conversation = as_conversation(CONVERSATION)
    criteria = tuple(Criterion(id=f"c{k}", text=t, weight=-2 if "blames" in t else 1) for k, t in enumerate(CRITERIA))
    return [JudgeRequest(conversation, r, criteria) for r in RESPONSES]


def run_mode(url: str, mode: str, concurrency: int, repeats: int, order: str = "auto") -> dict:
    rates, calls, errors = [], 0, 0
    for _ in range(repeats):
        judge = HTTPJudge(ChatEndpoint(EndpointConfig(base_url=url, concurrency=concurrency, timeout=300)), mode,
                          order=order)
        batch = requests()
        start = time.perf_counter()
        answers = asyncio.run(judge.judge(batch))
        elapsed = time.perf_counter() - start
        verdicts = sum(len(a) for a in answers)
        rates.append(verdicts / elapsed)
        calls, errors = judge.stats.model_calls, judge.stats.errors
    return {"verdicts_per_s": statistics.median(rates), "calls_per_response": calls / len(RESPONSES), "errors": errors}


async def _bare(url: str, concurrency: int, chain: bool) -> float:
    """Verdicts/s of a bare httpx client: `concurrency` workers, each taking whole responses (chain)
    or single calls (spread) from a shared queue."""
    batch = requests()
    body = lambda r, c: {"messages": yesno_messages(r.conversation, r.response, c), "max_tokens": 1,  # noqa: E731
                         "logprobs": True, "top_logprobs": 20, "temperature": 0}
    jobs = [[body(r, c) for c in r.criteria] for r in batch] if chain else \
        [[body(r, c)] for r in batch for c in r.criteria]
    queue: asyncio.Queue = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=httpx.Limits(max_connections=concurrency),
                                 trust_env=False) as client:
        async def worker() -> None:
            while not queue.empty():
                for b in queue.get_nowait():
                    (await client.post("/chat/completions", json=b)).raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return sum(len(j) for j in jobs) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="an OpenAI-compatible base URL ending in /v1 (default: start llama.cpp here)")
    parser.add_argument("--parallel", type=int, default=8, help="llama.cpp slots when the server is started here")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    server = None if args.url else LlamaServer(parallel=args.parallel).start()
    url = args.url or server.url
    print(f"server {url} (parallel slots: {args.parallel if server else 'unknown'}); G={len(RESPONSES)} x K={len(CRITERIA)}")
    asyncio.run(_bare(url, 8, False))  # warm-up
    print("\nmode            verdicts/s   calls/response   errors")
    for mode in ("per_criterion", "batched", "logprob", "implicit"):
        r = run_mode(url, mode, 8, args.repeats)
        print(f"{mode:<15} {r['verdicts_per_s']:>10.1f}   {r['calls_per_response']:>14.1f}   {r['errors']:>6}")
    print("\nlogprob mode, verdicts/s    rubricrl   bare httpx   rubricrl/bare")
    rows, best = [], 0.0
    for concurrency in (1, 4, 8, 16):
        for order in ("spread", "chain"):
            ours = run_mode(url, "logprob", concurrency, args.repeats, order)["verdicts_per_s"]
            bare = statistics.median(asyncio.run(_bare(url, concurrency, order == "chain")) for _ in range(args.repeats))
            best = max(best, bare)
            rows.append((concurrency, order, ours, bare))
            print(f"concurrency {concurrency:<3} {order:<6} {ours:>10.1f} {bare:>12.1f} {ours / bare:>14.0%}")
    print(f"server maximum (best bare figure): {best:.1f} verdicts/s; "
          f"rubricrl's best: {max(r[2] for r in rows):.1f} ({max(r[2] for r in rows) / best:.0%} of it)")

if __name__ == "__main__":
    main()
