"""`rubricrl eval` killed with SIGKILL mid-run (a real subprocess) and re-run with the same command:
it finishes with every (row, sample) exactly once in generations.jsonl and results.jsonl, and the
same numbers as a run that was never interrupted. Also one end-to-end run of the real embedded
`local` policy."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chat_stub import ChatStub
from test_eval import HB_REPLIES, HEALTHBENCH, RULES_RUBRIC, read_jsonl, write_rows

pytestmark = pytest.mark.slow
PROMPTS = ["I lost my job and I am sorry for myself", "Tell me to calm down", "What should I do now?",
           "Hello there", "ERROR please"]
TIMEOUT = 300  # seconds; only a guard against a hung subprocess, not a speed assertion


def eval_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "rubricrl.cli", "eval", *map(str, args)]


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def kill_when(cmd: list[str], path: Path, at_least: int) -> int:
    """Start `cmd`, SIGKILL it as soon as `path` has `at_least` lines; return the line count then.
    Fails if the process ends by itself first (the kill must land mid-run)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + TIMEOUT
    try:
        while lines(path) < at_least:
            assert proc.poll() is None, f"eval ended before the kill: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "eval hung"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return lines(path)


def finish(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def assert_exactly_once(out: Path, expected_keys: set[str]) -> list[dict]:
    for name in ("generations.jsonl", "results.jsonl"):
        text = (out / name).read_text()
        assert text.endswith("\n")
        keys = [json.loads(line)["key"] for line in text.splitlines()]
        assert sorted(keys) == sorted(expected_keys), name  # none lost, none duplicated
    return read_jsonl(out / "results.jsonl")


def comparable(records: list[dict]) -> dict:
    return {r["key"]: (r["status"], r["score"], [v["status"] for v in r.get("verdicts", [])]) for r in records}


def test_sigkill_during_generation_then_resume(tmp_path):
    """Rule judge, stub policy (slowed so the kills land mid-generation), 12 rows x 2 samples."""
    stub = ChatStub({"ERROR please": "ERROR"}, policy_delay=0.03)
    try:
        rubric = tmp_path / "rubric.yaml"
        rubric.write_text(RULES_RUBRIC)
        data = write_rows(tmp_path / "rows.jsonl", [{"id": f"k{i}", "prompt": PROMPTS[i % 5]} for i in range(12)])
        expected = {f"k{i}#{s}" for i in range(12) for s in range(2)}
        common = ["--policy", stub.policy_spec(), "--data", data, "--rubric", rubric, "--judge", "rules",
                  "--samples", 2, "--concurrency", 2]
        out = tmp_path / "killed"
        cmd = eval_cmd(*common, "--out", out)
        assert kill_when(cmd, out / "generations.jsonl", 3) < 24
        assert kill_when(cmd, out / "generations.jsonl", 14) < 24
        assert not (out / "results.jsonl").exists()
        finish(cmd)
        records = assert_exactly_once(out, expected)
        finish(eval_cmd(*common, "--out", tmp_path / "clean"))
        assert comparable(records) == comparable(read_jsonl(tmp_path / "clean" / "results.jsonl"))
        summary, clean = (json.loads((d / "summary.json").read_text()) for d in (out, tmp_path / "clean"))
        assert summary["score"] == clean["score"] and summary["policy_errors"] == clean["policy_errors"] == 4
    finally:
        stub.close()


def test_sigkill_during_judging_then_resume(tmp_path):
    """HealthBench rows, stub grader slowed so the kills land mid-judging (one unit per batch)."""
    stub = ChatStub(HB_REPLIES, judge_delay=0.05)
    try:
        judge = stub.judge_spec().replace("stub-grader", f"stub-grader-{tmp_path.name}")  # no verdict-cache hits
        common = ["--policy", stub.policy_spec(), "--data", HEALTHBENCH, "--judge", judge, "--samples", 2,
                  "--batch-size", 1]
        out = tmp_path / "killed"
        cmd = eval_cmd(*common, "--out", out)
        assert kill_when(cmd, out / "results.jsonl", 2) < 10
        assert lines(out / "generations.jsonl") == 10
        assert kill_when(cmd, out / "results.jsonl", 5) < 10
        finish(cmd)
        expected = {f"hb-{i}#{s}" for i in range(1, 6) for s in range(2)}
        records = assert_exactly_once(out, expected)
        assert [r["key"] for r in records] == sorted(expected)  # data order, samples in order
        s = json.loads((out / "summary.json").read_text())
        assert s["score"]["mean"] == pytest.approx((1 + 0.5 + 10 / 15 - 1.25) / 4)
        assert s["policy_errors"] == 2 and s["judge_errors"] == 2 and json.loads((out / "run.json").read_text())[
            "judging_complete"] is True
    finally:
        stub.close()


def test_embedded_local_policy_end_to_end(tmp_path):
    """The real embedded policy (SmolLM2-135M through transformers) on 2 rows, judged by rules."""
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(RULES_RUBRIC)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "prompt": "I lost my job today."},
                                                {"id": "b", "prompt": "My cat died. Say something kind."}])
    out = tmp_path / "local"
    finish(eval_cmd("--policy", "local", "--data", data, "--out", out, "--rubric", rubric, "--judge", "rules",
                    "--max-tokens", 24))
    gens = read_jsonl(out / "generations.jsonl")
    assert {g["key"] for g in gens} == {"a#0", "b#0"}
    assert all(g["error"] is None and g["text"].strip() and g["policy"].startswith("local:") for g in gens)
    s = json.loads((out / "summary.json").read_text())
    assert s["status"]["scored"] == 2 and s["score"] is not None
    assert (out / "report.html").is_file()
