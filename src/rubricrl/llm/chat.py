"""Chat models behind one interface, for everything that generates text (rubric generators,
simulated users, evaluated policies): a local transformers model, a GGUF model through an
in-process llama.cpp server, or any OpenAI-compatible endpoint.

`make_chat_model(spec)`:
- `local` or `local:MODEL` (hub id, directory or .gguf; default the embedded SmolLM2-135M);
- `llamacpp` or `llamacpp:FILE.gguf`, optionally `?key=value&...`: `context` (tokens per slot,
  default 4096) and `parallel` (slots, default 4) size the server, other keys are endpoint settings;
  a prompt too long for the context is a `too_long` error (`rubricrl.llm.llama_server`);
- `openai:URL?model=NAME&...` (see `rubricrl.llm.endpoint.EndpointConfig` for the keys).
`await model.chat(messages, ...)` returns a `ChatResult`; failures are in `result.error`, never raised.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Protocol, runtime_checkable

from rubricrl.llm.endpoint import ChatEndpoint, ChatResult, parse_endpoint_spec


@runtime_checkable
class ChatModel(Protocol):
    name: str

    async def chat(self, messages: list[dict[str, str]], *, max_tokens: int = 256, temperature: float = 0.0,
                   seed: int | None = None, json_schema: dict | None = None) -> ChatResult: ...


class EndpointChat:
    """A chat model served over HTTP; `json_schema` constrains the output where the server can."""

    def __init__(self, endpoint: ChatEndpoint, name: str, server=None):
        self.endpoint, self.name, self.server = endpoint, name, server  # `server` keeps a llama.cpp server alive

    async def chat(self, messages, *, max_tokens=256, temperature=0.0, seed=None, json_schema=None) -> ChatResult:
        return await self.endpoint.complete(messages, max_tokens=max_tokens, temperature=temperature, seed=seed,
                                            json_schema=json_schema)


class TransformersChat:
    """A local transformers model; one generation at a time per model (it is CPU/GPU bound anyway).
    It cannot constrain output to a JSON schema: callers validate and retry."""

    def __init__(self, model: str | None = None):
        from rubricrl.llm.models import EMBEDDED, load_causal_lm

        self.model, self.tokenizer = load_causal_lm(model)
        self.name = f"local:{model or EMBEDDED}"
        self._lock = threading.Lock()

    async def chat(self, messages, *, max_tokens=256, temperature=0.0, seed=None, json_schema=None) -> ChatResult:
        return await asyncio.to_thread(self._generate, messages, max_tokens, temperature, seed)

    def _generate(self, messages, max_tokens, temperature, seed) -> ChatResult:
        import torch

        try:
            with self._lock, torch.inference_mode():
                if seed is not None:
                    torch.manual_seed(seed)
                ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                                         return_dict=True)["input_ids"].to(self.model.device)
                sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
                out = self.model.generate(ids, max_new_tokens=max_tokens, pad_token_id=self.tokenizer.eos_token_id,
                                          **sampling)
            new = out[0, ids.shape[1]:]
            ended = bool(len(new)) and int(new[-1]) == self.tokenizer.eos_token_id
            return ChatResult(text=self.tokenizer.decode(new, skip_special_tokens=True).strip(),
                              finish_reason="stop" if ended or len(new) < max_tokens else "length",
                              prompt_tokens=int(ids.shape[1]), completion_tokens=int(len(new)), attempts=1)
        except Exception as exc:  # noqa: BLE001 - a failed generation is reported, not raised
            return ChatResult(error=f"generation: {type(exc).__name__}: {exc}"[:300], attempts=1)


def make_chat_model(spec: str | None = None) -> ChatModel:
    spec = spec or "local"
    kind, _, arg = spec.partition(":")
    if "?" in kind:
        kind, query = kind.split("?", 1)
        arg = "?" + query
    if kind == "local":
        return TransformersChat(arg or None)
    if kind == "llamacpp":
        from pathlib import Path

        from rubricrl.llm.llama_server import parse_llamacpp_spec

        parsed = parse_llamacpp_spec(arg)
        _no_extra(parsed.extra, spec)
        endpoint = parsed.start()
        return EndpointChat(endpoint, f"llamacpp:{Path(endpoint.server.model_path).name}", endpoint.server)
    if kind == "openai":
        config, extra = parse_endpoint_spec(arg)
        _no_extra(extra, spec)
        return EndpointChat(ChatEndpoint(config), f"openai:{config.model}@{config.base_url}")
    raise ValueError(f"unknown chat model spec {spec!r}; use local[:MODEL], llamacpp[:FILE.gguf] or openai:URL")


def _no_extra(extra: dict, spec: str) -> None:
    if extra:
        raise ValueError(f"unknown key(s) {sorted(extra)} in chat model spec {spec!r}")
