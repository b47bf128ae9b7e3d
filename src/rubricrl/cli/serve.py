"""`rubricrl serve` (rubric rewards over HTTP) and `rubricrl llama-server` (a GGUF model behind
llama.cpp's OpenAI-compatible API)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rubricrl.cli.common import console, fail
from rubricrl.cli.options import DEFAULT_JUDGE, CachePath, NoCache, Port, judge_option, rubric_option


def serve(
    rubric: Annotated[Optional[str], rubric_option("Rubric file or bundled name for rows whose label carries "
                                                   "none (empathy, crisis_safety).")] = None,
    judge: Annotated[str, judge_option("Judge spec, as for `score` (e.g. `rules`, `exemplar+local`, "
                                       "`openai:URL?model=...`).")] = DEFAULT_JUDGE,
    host: Annotated[str, typer.Option(help="Interface to bind; any non-loopback address needs --token.")] = "127.0.0.1",
    port: Port = 8000,
    token: Annotated[Optional[str], typer.Option(envvar="RUBRICRL_SERVE_TOKEN", show_default=False,
                                                 help="Bearer token clients must send (env RUBRICRL_SERVE_TOKEN).")] = None,
    max_body: Annotated[int, typer.Option(min=1024, help="Largest request body in bytes (413).")] = 32 * 1024 * 1024,
    concurrency: Annotated[int, typer.Option(min=1, help="Requests judged at once.")] = 8,
    queue: Annotated[int, typer.Option(min=0, help="Requests waiting for a slot; beyond, 503 + Retry-After.")] = 1024,
    timeout: Annotated[float, typer.Option(min=0.001, help="Seconds per request, queueing included (504).")] = 120.0,
    read_timeout: Annotated[Optional[float], typer.Option(
        min=0.001, help="Seconds a client may take to send a request's headers and body (408); default "
                        "min(--timeout, 30).")] = None,
    error_policy: Annotated[str, typer.Option(help="A row with judge errors gets reward 0.0 (`zero`, flagged in "
                                                   "the logs) or fails the request with 502 (`raise`).")] = "zero",
    no_cache: NoCache = False,
    cache_path: CachePath = None,
    mode: Annotated[str, typer.Option(
        help="OpenRLHF rewards: each row's rubric score (`pointwise`) or its criterion-weighted win rate against "
             "the other rows of its prompt (`pairwise`, needs --group-size; /v1/score stays pointwise).")] = "pointwise",
    group_size: Annotated[Optional[int], typer.Option(min=2, help="Pairwise: rows per prompt to compare, gathered "
                                                                   "across requests (OpenRLHF's "
                                                                   "--n_samples_per_prompt).")] = None,
    pairwise_max_pairs: Annotated[Optional[int], typer.Option(min=1, help="Pairwise: at most this many pairs per "
                                                                          "group (default: every pair).")] = None,
):
    """Serve rubric rewards over HTTP: OpenRLHF's remote reward API (POST / and /get_reward), /v1/score,
    /health and /metrics (docs/scaling.md)."""
    from rubricrl.core.extras import MissingExtraError
    from rubricrl.serve.app import serve as run
    from rubricrl.serve.settings import settings_from_options

    try:
        settings = settings_from_options(rubric=rubric, judge=judge, host=host, port=port, token=token,
                                         max_body=max_body, concurrency=concurrency, queue=queue, timeout=timeout,
                                         read_timeout=read_timeout,
                                         error_policy=error_policy, cache=not no_cache,
                                         cache_path=str(cache_path) if cache_path else None, mode=mode,
                                         group_size=group_size, pairwise_max_pairs=pairwise_max_pairs)
        run(settings)
    except ValueError as exc:
        fail(str(exc))
    except MissingExtraError as exc:  # a judge kind from an extra that is not installed
        fail(f"--judge {judge}: {exc}")


def llama_server(
    model: Annotated[Optional[str], typer.Option(help="A .gguf file (default: the embedded SmolLM2-135M).")] = None,
    host: Annotated[str, typer.Option(help="Interface to bind; keep loopback unless you secure it.")] = "127.0.0.1",
    port: Port = 8080,
    parallel: Annotated[int, typer.Option(min=1, help="Concurrent sequences (llama.cpp slots).")] = 4,
    context: Annotated[int, typer.Option(min=256, help="Context tokens per slot.")] = 4096,
    threads: Annotated[int, typer.Option(min=1, help="CPU threads.")] = 2,
):
    """Serve a GGUF model with llama.cpp's OpenAI-compatible API until interrupted (judge it with
    `--judge openai:http://HOST:PORT/v1`)."""
    import time

    from rubricrl.llm.llama_server import LlamaServer
    from rubricrl.llm.models import ModelNotFoundError

    try:
        server = LlamaServer(model, host=host, port=port, parallel=parallel, context=context, threads=threads).start()
    except (ModelNotFoundError, RuntimeError) as exc:
        fail(str(exc))
    console.print(f"serving {server.model_path.name} at {server.url} (Ctrl-C to stop)", highlight=False)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
