"""Reward server throughput and latency on loopback: `rubricrl serve` in a subprocess, N concurrent
httpx clients posting OpenRLHF-shaped requests (Qwen chat template), at 1, 8 and 32 clients.

    python bench/reward_server.py                                  # rules, then the embedded LLM judge
    python bench/reward_server.py --judges rules --requests 10     # a quick check

Per judge and client count: requests/s, rows/s, p50 and p99 request latency. A judge with a verdict
cache (the embedded LLM judge `local`) runs each level twice on a fresh cache file: `cold` (responses
never seen) then `warm` (the same requests again, all cache hits). The rule judge has no cache (`-`).
Before the first level one request with other responses is sent and not counted, so lazy model loading
is not measured as latency. (With `exemplar+local` and the bundled `empathy` rubric the exemplar models
decide every model-judged criterion, so no LLM call and no cache would be involved.) Every response is
checked: a non-200 or a wrong row count is an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from rubricrl.llm.llama_server import free_port

SEEKERS = [
    "I failed my driving test for the third time today and I feel like an idiot.",
    "We moved to a new city two months ago and the weekends feel endless.",
    "My mum has dementia and tonight she didn't recognise me.",
    "My best friend forgot my birthday and remembered everyone else's.",
]
REPLIES = [
    "That sounds really discouraging, especially after trying so hard. What happened on the test today?",
    "Calm down, it's not a big deal. Just practise more and you'll pass next time.",
    "Moving somewhere new can feel so lonely at first. How have the weekends been for you?",
    "I'm so sorry. That must have been painful to see. Do you want to talk about how you're feeling?",
]


def qwen_prompt(user: str) -> str:
    return ("<|im_start|>system\nYou are a supportive listener.<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def requests_for(tag: str, n: int, rows: int) -> list[dict]:
    """n OpenRLHF requests of `rows` rows; `tag` makes responses distinct from other passes (cold cache)."""
    out = []
    for i in range(n):
        prompts, queries = [], []
        for j in range(rows):
            k = i * rows + j
            prompt = qwen_prompt(SEEKERS[k % len(SEEKERS)])
            reply = f"{REPLIES[k % len(REPLIES)]} ({tag}-{k})"
            prompts.append(prompt)
            queries.append(prompt + reply + "<|im_end|>")
        out.append({"query": queries, "prompts": prompts, "labels": [""] * rows})
    return out


async def run_level(url: str, bodies: list[dict], clients: int, timeout: float) -> dict:
    """Send `bodies` from `clients` concurrent clients (each sends its share in turn)."""
    latencies: list[float] = []
    errors = 0
    rows = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits, trust_env=False) as http:
        async def client(share: list[dict]) -> None:
            nonlocal errors, rows
            for body in share:
                start = time.perf_counter()
                try:
                    r = await http.post("/", json=body)
                    ok = r.status_code == 200 and len(r.json()["rewards"]) == len(body["query"])
                except httpx.HTTPError:
                    ok = False
                latencies.append(time.perf_counter() - start)
                errors += not ok
                rows += len(body["query"]) if ok else 0

        start = time.perf_counter()
        await asyncio.gather(*(client(bodies[c::clients]) for c in range(clients)))
        wall = time.perf_counter() - start
    lat = np.asarray(latencies) * 1000
    return {"clients": clients, "requests": len(bodies), "errors": errors, "seconds": wall,
            "requests_per_s": len(bodies) / wall, "rows_per_s": rows / wall,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99))}


class Server:
    """`rubricrl serve` in a subprocess on a free loopback port, with its own verdict cache file."""

    def __init__(self, judge: str, rubric: str, cache_path: Path, concurrency: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "rubricrl.cli", "serve", "--judge", judge, "--rubric", rubric, "--port",
               str(self.port), "--cache-path", str(cache_path), "--concurrency", str(concurrency)]
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def wait(self, seconds: float = 600) -> None:
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"server exited:\n{self.log.read()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not become healthy")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def bench_judge(judge: str, args) -> list[dict]:
    cached = judge != "rules"
    results = []
    with tempfile.TemporaryDirectory(prefix="rubricrl-bench-") as tmp:
        server = Server(judge, args.rubric, Path(tmp) / "verdicts.sqlite", args.server_concurrency)
        try:
            started = time.perf_counter()
            server.wait()
            print(f"judge {judge}: server ready in {time.perf_counter() - started:.1f} s", flush=True)
            asyncio.run(run_level(server.url, requests_for("warmup", 1, args.rows), 1, args.timeout))  # loads models
            for clients in args.clients:
                bodies = requests_for(f"c{clients}", args.requests, args.rows)
                for cache in (("cold", "warm") if cached else ("-",)):
                    row = asyncio.run(run_level(server.url, bodies, clients, args.timeout))
                    row.update(judge=judge, cache=cache, rows=args.rows)
                    results.append(row)
                    print(f"  clients {clients:>3}  cache {cache:<4}  {row['requests']:>5} req  "
                          f"{row['requests_per_s']:8.1f} req/s  {row['rows_per_s']:8.1f} rows/s  "
                          f"p50 {row['p50_ms']:8.1f} ms  p99 {row['p99_ms']:8.1f} ms  errors {row['errors']}",
                          flush=True)
            metrics = httpx.get(server.url + "/metrics", timeout=10, trust_env=False).text
            hits = next((line.split()[-1] for line in metrics.splitlines()
                         if line.startswith("rubricrl_judge_cache_hits_total")), "0")
            print(f"  cache hits over the run: {hits}", flush=True)
        finally:
            server.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judges", default="rules,local", help="comma-separated judge specs")
    parser.add_argument("--clients", default="1,8,32", help="comma-separated client counts")
    parser.add_argument("--requests", type=int, default=64, help="requests per level (and cache pass)")
    parser.add_argument("--rows", type=int, default=8, help="rows per request (OpenRLHF sends 1 per rollout "
                                                            "in recent versions, whole micro-batches in older)")
    parser.add_argument("--rubric", default="empathy", help="server rubric: bundled name or file")
    parser.add_argument("--server-concurrency", type=int, default=8, help="rubricrl serve --concurrency")
    parser.add_argument("--timeout", type=float, default=600.0, help="client timeout per request, seconds")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",")]
    print(f"cpu cores: {os.cpu_count()}  rows/request: {args.rows}  requests/level: {args.requests}", flush=True)
    results = []
    for judge in [j.strip() for j in args.judges.split(",") if j.strip()]:
        results += bench_judge(judge, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
