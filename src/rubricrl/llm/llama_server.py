"""A llama.cpp server for a GGUF model on loopback, through the `xllamacpp` bindings.

It serves the OpenAI-compatible API (`/v1/chat/completions` with `logprobs`, JSON-schema
constrained output, `/health`) in this process for as long as the object lives, so the HTTP
judge and chat clients talk to a real server with no separate install. `rubricrl llama-server`
runs one in the foreground for scripts (CI starts it that way).

A `llamacpp[:FILE.gguf][?key=value&...]` spec (chat models and judges) is read by
`parse_llamacpp_spec`: `context` (tokens per slot, default 4096) and `parallel` (slots, default 4)
size the server, the other keys are endpoint settings. Its endpoint (`LlamaEndpoint`) counts each
prompt with the server's own chat template and tokenizer before sending it: a prompt that leaves no
room for `max_tokens` inside the context is a `too_long` error naming both numbers and the fix
(`?context=N`), never an answer cut short where the context ran out.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

import httpx

from rubricrl.core.extras import require
from rubricrl.llm.endpoint import ChatEndpoint, ChatResult, EndpointConfig, parse_endpoint_spec
from rubricrl.llm.models import EMBEDDED_ALIASES, ModelNotFoundError, embedded_gguf_path

SERVER_KEYS = {"context": 256, "parallel": 1}  # spec keys that size the server -> their smallest value
DEFAULT_CONTEXT = 4096
# llama.cpp's answer to a prompt longer than a slot's context (HTTP 400, exceed_context_size_error)
_SERVER_TOO_LONG = re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)")


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


def too_long_message(prompt_tokens: int, max_tokens: int, context: int) -> str:
    """The `too_long` error for a prompt that, with room for `max_tokens` answer tokens, does not fit
    in a slot's `context`: both numbers and the spec key that raises it."""
    needed = prompt_tokens + max_tokens
    suggest = max(2 * context, 1 << (needed - 1).bit_length())
    answer = f" + up to {max_tokens} answer tokens" if max_tokens else ""
    return (f"too_long: the prompt is {prompt_tokens} tokens{answer}, more than the llama.cpp context of {context} "
            f"tokens; raise the context with ?context=N in the llamacpp spec, e.g. llamacpp?context={suggest}")


class LlamaEndpoint(ChatEndpoint):
    """The endpoint of an in-process llama.cpp server with `context` tokens per slot. Before each call
    the prompt is rendered and counted by the server itself (`/apply-template`, `/tokenize`); a
    prompt of P tokens with P + max_tokens > context is refused as `too_long` without being sent (a
    reply would be cut where the context runs out, and the server refuses P >= context anyway). If
    counting fails the call goes ahead, and the server's own refusal gets the same message."""

    def __init__(self, config: EndpointConfig, *, context: int, root: str | None = None, server=None,
                 transport: httpx.AsyncBaseTransport | None = None):
        super().__init__(config, transport=transport)
        self.context = context
        self.root = root or config.base_url.removesuffix("/v1")
        self.server = server  # keeps the in-process server alive as long as the endpoint

    async def prompt_tokens(self, messages: list[dict[str, str]]) -> int | None:
        """Tokens the server will see for `messages` (chat template, generation prompt, special
        tokens), or None when the server does not say."""
        self._bind()
        try:
            rendered = await asyncio.wait_for(self._client.post(self.root + "/apply-template",
                                                                json={"messages": messages}), self.config.timeout)
            counted = await asyncio.wait_for(self._client.post(self.root + "/tokenize", json={
                "content": rendered.raise_for_status().json()["prompt"], "add_special": True, "parse_special": True}),
                self.config.timeout)
            tokens = counted.raise_for_status().json()["tokens"]
            return len(tokens) if isinstance(tokens, list) else None
        except (httpx.HTTPError, asyncio.TimeoutError, ValueError, KeyError, TypeError):
            return None

    async def complete(self, messages: list[dict[str, str]], *, max_tokens: int = 256, **options) -> ChatResult:
        tokens = await self.prompt_tokens(messages)
        if tokens is not None and tokens + max_tokens > self.context:
            self.stats.calls += 1
            self.count_error("too_long")
            return ChatResult(error=too_long_message(tokens, max_tokens, self.context))
        result = await super().complete(messages, max_tokens=max_tokens, **options)
        refused = _SERVER_TOO_LONG.search(result.error or "")
        if refused:
            result.error = too_long_message(int(refused.group(1)), 0, int(refused.group(2)))
        return result


@dataclass(frozen=True)
class LlamaSpec:
    """A `llamacpp[:FILE.gguf][?key=value&...]` spec read, before any server starts: the model, the
    server's size, the endpoint settings, and the keys neither knows (for the caller: a judge
    reads `mode` and `order` from them)."""

    model: str | None
    context: int
    parallel: int
    config: EndpointConfig
    extra: dict[str, str]

    def start(self) -> LlamaEndpoint:
        """Start the server and return its endpoint (`endpoint.server` is the running server)."""
        server = LlamaServer(self.model, context=self.context, parallel=self.parallel).start()
        config = self.config.model_copy(update={"base_url": server.url})
        return LlamaEndpoint(config, context=self.context, root=server.base, server=server)


def parse_llamacpp_spec(arg: str) -> LlamaSpec:
    """`[FILE.gguf][?context=8192&parallel=2&timeout=600&...]` (what follows `llamacpp` or `llamacpp:`)
    -> LlamaSpec; a bad value is a ValueError naming the key, the value and what it takes."""
    model, _, query = arg.partition("?")
    sizes = {"context": DEFAULT_CONTEXT, "parallel": 4}
    rest = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in SERVER_KEYS:
            rest.append((key, value))
            continue
        try:
            sizes[key] = int(value)
        except ValueError:
            sizes[key] = -1
        if sizes[key] < SERVER_KEYS[key]:
            raise ValueError(f"llamacpp spec: {key} must be a whole number >= {SERVER_KEYS[key]}, got {value!r}"
                             + (" (tokens per slot, e.g. ?context=8192)" if key == "context" else ""))
    placeholder = "http://127.0.0.1:0/v1" + (f"?{urlencode(rest)}" if rest else "")  # the server's URL once it runs
    try:
        config, extra = parse_endpoint_spec(placeholder)
    except ValueError as exc:
        shown = "llamacpp" + (f":{arg}" if model else arg)
        raise ValueError(str(exc).replace(f"endpoint {placeholder!r}", f"llamacpp spec {shown!r}")) from None
    return LlamaSpec(model or None, sizes["context"], sizes["parallel"], config, extra)
