"""A llama.cpp server for a GGUF model on loopback, through the `xllamacpp` bindings.

It serves the OpenAI-compatible API (`/v1/chat/completions` with `logprobs`, JSON-schema
constrained output, `/health`) in this process for as long as the object lives, so the HTTP
judge and chat clients talk to a real server with no separate install. `rubricrl llama-server`
runs one in the foreground for scripts (CI starts it that way).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx

from rubricrl.core.extras import require
from rubricrl.llm.models import EMBEDDED_ALIASES, ModelNotFoundError, embedded_gguf_path


def gguf_path(spec: str | None) -> Path:
    """The GGUF file for a spec: the embedded model by default, else a path to a `.gguf` file."""
    if spec is None or spec in EMBEDDED_ALIASES:
        return embedded_gguf_path()
    path = Path(spec).expanduser()
    if path.suffix != ".gguf" or not path.is_file():
        raise ModelNotFoundError(f"llama.cpp needs a .gguf file; {spec!r} is not one "
                                 "(give a path to a .gguf file, or serve other models with vLLM and use `openai:URL`)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """Start with `LlamaServer(model).start()` (or `with LlamaServer() as server:`); `url` ends in /v1."""

    def __init__(self, model: str | None = None, *, host: str = "127.0.0.1", port: int | None = None,
                 parallel: int = 4, context: int = 4096, threads: int = 2, verbose: bool = False):
        require("xllamacpp", extra="llamacpp", feature="llama.cpp server")
        self.model_path = gguf_path(model)
        self.host, self.port = host, port or free_port()
        self.parallel, self.context, self.threads, self.verbose = parallel, context, threads, verbose
        self._server = None

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/v1"

    def start(self, wait: float = 60.0) -> LlamaServer:
        import xllamacpp

        params = xllamacpp.CommonParams()
        params.model.path = str(self.model_path)
        params.hostnames = [self.host]
        params.port = self.port
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.threads
        params.n_parallel = self.parallel
        params.n_ctx = self.context * self.parallel  # llama.cpp splits the context across slots
        if not self.verbose:
            params.verbosity = -1
        self._server = xllamacpp.Server(params)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base + "/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"llama.cpp server for {self.model_path} did not become healthy on {self.base} in {wait:.0f}s")

    def stop(self) -> None:
        self._server = None  # the server shuts down when the bindings object is released

    def __enter__(self) -> LlamaServer:
        return self.start() if self._server is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
