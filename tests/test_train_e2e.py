"""Real GRPO steps on the embedded model: parameters change, run files exist and parse, resume
continues with the same data order, the report renders in headless Chromium."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from rubricrl.llm.models import resolve
from rubricrl.train.config import load_config
from rubricrl.reports.training import write_report
from rubricrl.train.run import run_training

pytestmark = pytest.mark.slow

TINY = {
    "data": {"limit_train": 8, "limit_heldout": 3},
    "eval": {"max_new_tokens": 24},
    "grpo": {"max_steps": 2, "max_completion_length": 24, "per_device_train_batch_size": 4, "num_generations": 2,
             "save_steps": 1000, "learning_rate": 1e-4},
}
# A checkpoint of the 135M model with its optimizer state is about 1.6 GB: save_steps 1000 leaves only
# the one transformers' Trainer writes at the last step (the resume test also needs save_steps 1), and
# every run directory is removed when its test or module is done, so the suite fits on a small CI disk.


def tiny_config(tmp_path: Path, name: str, **sections) -> Path:
    data = json.loads(json.dumps(TINY))
    for key, value in sections.items():
        data.setdefault(key, {}).update(value) if isinstance(value, dict) else data.__setitem__(key, value)
    data["output_dir"] = str(tmp_path / name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    cfg = load_config(tiny_config(tmp, "run", buffer={"enabled": True}, scaffold={"enabled": True}))
    summary = run_training(cfg, log=lambda m: None)
    write_report(cfg.output_dir)  # as `rubricrl train` does after the run
    yield Path(cfg.output_dir), summary
    shutil.rmtree(tmp, ignore_errors=True)


def test_parameters_changed(trained_run):
    run_dir, _ = trained_run
    before = load_file(str(Path(resolve(None)) / "model.safetensors"))
    after = load_file(str(run_dir / "final" / "model.safetensors"))
    changed = [k for k in before if k in after and not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2


def test_run_files_exist_and_parse(trained_run):
    run_dir, summary = trained_run
    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "reward" in m]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert any(k.startswith("rubric/pass_rate/") for k in m)
        assert m["rubric/judge_errors"] == 0.0 and "frac_reward_zero_std" in m
        assert "buffer/zero_spread_share" in m and "scaffold/probability" in m
    assert metrics[0]["scaffold/probability"] > metrics[1]["scaffold/probability"]  # linear decay
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert len(samples) == 2 * 4 and {s["step"] for s in samples} == {1, 2}
    assert all(len(s["verdicts"]) == 10 for s in samples)  # the empathy rubric's 10 criteria
    assert all("rubric/defence_gated" in m for m in metrics)  # the quality gate is counted per step
    assert "Guidance for your reply" not in samples[0]["prompt"]  # the judge saw the original prompt
    assert summary["before"]["rows"] == 3 and summary["after"]["rows"] == 3
    assert len(read_jsonl(run_dir / "eval_after.jsonl")) == 3
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["steps"] == 2 and saved["reward_totals"]["completions"] == 8
    # the paired before/after change over the 3 held-out prompts, by hand from the two eval files
    before = {r["id"]: r["score"] for r in read_jsonl(run_dir / "eval_before.jsonl")}
    after = {r["id"]: r["score"] for r in read_jsonl(run_dir / "eval_after.jsonl")}
    change = saved["change"]
    assert change["n"] == 3 and saved["eval_judge"] == "gate:bundled:eval+exemplar:bundled:eval"
    assert change["difference"]["mean"] == pytest.approx(sum(after[k] - before[k] for k in before) / 3)
    assert change["difference"]["ci_low"] <= change["difference"]["mean"] <= change["difference"]["ci_high"]
    assert change["excludes_zero"] == (change["difference"]["ci_low"] > 0 or change["difference"]["ci_high"] < 0)


def test_report_is_valid_html_with_plots(trained_run):
    run_dir, _ = trained_run
    text = (run_dir / "report.html").read_text()
    parser = _Collect()
    parser.feed(text)
    assert parser.tags.count("img") == 4 and "table" in parser.tags
    assert "Held-out score, before and after" in text and "http" not in text.replace("https://", "")
    assert "after &minus; before, paired over 3 held-out prompts" in text
    assert "gate:bundled:eval+exemplar:bundled:eval" in text
    os.remove(run_dir / "report.html")
    result = subprocess.run([sys.executable, "-m", "rubricrl.cli", "report", str(run_dir)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (run_dir / "report.html").read_text().count("<img") == 4


def test_existing_run_dir_is_refused(trained_run):
    run_dir, _ = trained_run
    from rubricrl.train.run import RunDirError

    with pytest.raises(RunDirError, match="--resume"):
        run_training(load_config(None, [f"output_dir={run_dir}"]), log=lambda m: None)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_screenshot_is_not_blank(trained_run, tmp_path):
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (see .ci/run)")
        pytest.skip("chromium not installed (apt-get install chromium)")
    run_dir, _ = trained_run
    shot = tmp_path / "report.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,2000",
                    f"--screenshot={shot}", (run_dir / "report.html").as_uri()],
                   capture_output=True, timeout=120)
    assert shot.is_file()
    from PIL import Image

    pixels = Image.open(shot).convert("L")
    histogram = pixels.histogram()
    white_share = histogram[255] / sum(histogram)
    assert white_share < 0.97, "the screenshot is (almost) blank"
    assert sum(1 for count in histogram if count) > 20  # text and plots, not a flat colour


def test_resume_continues_with_the_same_data_order(tmp_path):
    reference = load_config(tiny_config(tmp_path, "reference", grpo={"max_steps": 3}))
    run_training(reference, log=lambda m: None)
    expected = [(s["step"], s["prompt"]) for s in read_jsonl(Path(reference.output_dir) / "samples.jsonl")]

    config = tiny_config(tmp_path, "killed", grpo={"max_steps": 3, "save_steps": 1, "save_total_limit": 1})
    run_dir = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "rubricrl.cli", "train", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    marker = run_dir / "checkpoints" / "checkpoint-1" / "trainer_state.json"
    deadline = time.time() + 600
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert marker.exists()
    assert not (run_dir / "summary.json").exists()  # it really was stopped mid-run

    result = subprocess.run([sys.executable, "-m", "rubricrl.cli", "train", "--resume", str(run_dir)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "resuming from the last checkpoint" in result.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 3
    resumed = {}
    for s in read_jsonl(run_dir / "samples.jsonl"):
        resumed.setdefault(s["step"], []).append(s["prompt"])
    for step in (1, 2, 3):
        assert sorted(resumed[step]) == sorted(p for st, p in expected if st == step)


def test_lora_run_trains_an_adapter(tmp_path):
    cfg = load_config(tiny_config(tmp_path, "lora", grpo={"max_steps": 1}, eval={"enabled": False},
                                  lora={"r": 4, "alpha": 8}))
    summary = run_training(cfg, log=lambda m: None)
    final = Path(cfg.output_dir) / "final"
    assert summary["steps"] == 1 and "before" not in summary
    adapter = load_file(str(final / "adapter_model.safetensors"))
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b)  # B starts at zero; a step moved it


def test_novelty_reward_wired_into_training(tmp_path):
    rows = []
    for i in range(8):
        rows.append({"id": f"h{i}", "prompt": [
            {"role": "user", "content": f"I had a rough week at work, number {i}."},
            {"role": "assistant", "content": "What happened this week?"},
            {"role": "user", "content": "My boss ignored my ideas again."}]})
    data = tmp_path / "history.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(tiny_config(tmp_path, "novelty", data={"train": str(data), "limit_heldout": None},
                                  eval={"enabled": False}, reward={"novelty_weight": 0.5, "judge": "rules"}))
    summary = run_training(cfg, log=lambda m: None)
    assert summary["steps"] == 2
    metrics = [m for m in read_jsonl(Path(cfg.output_dir) / "metrics.jsonl") if "reward" in m]
    assert all("rewards/novelty/mean" in m for m in metrics)
    for m in metrics:  # TRL's total is the weighted sum: rubric x 1.0 + novelty x 0.5
        assert m["reward"] == pytest.approx(m["rewards/rubric/mean"] + 0.5 * m["rewards/novelty/mean"], abs=1e-4)


def test_training_step_completes_with_a_failing_http_judge_under_mask(tmp_path, llama_url):
    """GRPO steps with the reward judged over HTTP through a proxy that fails some calls: the step
    completes, failed rows are masked (not zero), and the error count in the metrics matches the proxy."""
    from fault_proxy import FaultProxy

    with FaultProxy(llama_url[: -len("/v1")]) as proxy:
        proxy.set_plan(["500", "drop", "garbage", "refusal"] + ["ok"] * 6 + ["500"] * 4)
        spec = f"openai:{proxy.url}/v1?mode=logprob&max_retries=0&concurrency=1&breaker_failures=100"
        cfg = load_config(tiny_config(tmp_path, "http", eval={"enabled": False},
                                      reward={"judge": spec, "error_policy": "mask"}))
        summary = run_training(cfg, log=lambda m: None)
        faults = [f.kind for f in proxy.log]
    assert summary["steps"] == 2
    metrics = [m for m in read_jsonl(Path(cfg.output_dir) / "metrics.jsonl") if "rewards/rubric/mean" in m]
    assert len(metrics) == 2
    errors = sum(m["rubric/judge_errors"] for m in metrics)
    assert errors == sum(kind != "ok" for kind in faults) == 8  # every injected failure is one error verdict
    assert sum(m["rubric/masked"] for m in metrics) >= 1
    assert sum(m["rubric/judge_calls"] for m in metrics) == len(faults)
    samples = read_jsonl(Path(cfg.output_dir) / "samples.jsonl")
    masked = [s for s in samples if s["reward"] is None]
    assert masked and all(s["note"].startswith("judge error (mask)") for s in masked)


def test_pairwise_grpo_run_changes_parameters_and_logs_its_comparisons(tmp_path):
    """reward.mode pairwise end to end: the embedded policy, the empathy rubric's five model-judged principles
    compared over HTTP by a deterministic pairwise judge (tests/chat_stub.py: the reply with more words
    matches a criterion more, in both orders), rule checks pointwise."""
    from chat_stub import ChatStub

    stub = ChatStub()
    lines: list[str] = []
    try:
        spec = f"openai:{stub.url}?model=stub-grader&max_retries=0&mode=per_criterion"
        cfg = load_config(tiny_config(tmp_path, "pairwise", eval={"enabled": False},
                                      reward={"judge": spec, "mode": "pairwise"}))
        summary = run_training(cfg, log=lines.append)
    finally:
        stub.close()
    run_dir = Path(cfg.output_dir)
    assert summary["steps"] == 2
    before = load_file(str(Path(resolve(None)) / "model.safetensors"))
    after = load_file(str(run_dir / "final" / "model.safetensors"))
    assert len([k for k in before if k in after and not torch.equal(before[k], after[k])]) > len(before) // 2
    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "rewards/rubric/mean" in m]
    assert len(metrics) == 2
    for m in metrics:
        # 4 completions per step, 2 per prompt: 2 groups of 2, one pair each
        assert m["rubric/pairwise_pairs"] == 2.0
        # both orders of each principle asked for a pair the judge compares: at most 2 x 5 per judged pair
        assert m["rubric/pairwise_comparisons"] % 2 == 0
        assert m["rubric/pairwise_comparisons"] <= 10 * m["rubric/pairwise_judged_pairs"]
        assert m["rubric/pairwise_disagreements"] == 0.0  # the stub answers the same in both orders
    comparisons = sum(m["rubric/pairwise_comparisons"] for m in metrics)
    assert comparisons > 0 and stub.pair_calls == comparisons  # one HTTP call per comparison
    assert summary["reward_totals"]["pairwise_comparisons"] == comparisons
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert len(samples) == 8 and all(s["note"].startswith("pairwise: ") for s in samples if s["reward"] is not None)
    # in each group of two, every decided criterion's weight goes to one side or half to each: r_a + r_b = 1
    for step in (1, 2):
        rewards = [s["reward"] for s in samples if s["step"] == step]
        for a, b in ((0, 1), (2, 3)):
            if rewards[a] is not None and rewards[b] is not None and not any(
                    "hard rule failed" in samples[(step - 1) * 4 + k]["note"] for k in (a, b)):
                assert rewards[a] + rewards[b] == pytest.approx(1.0)
    step_lines = [line for line in lines if line.startswith("step ")]
    assert len(step_lines) == 2 and all(" pairs 2 comparisons " in line for line in step_lines)
