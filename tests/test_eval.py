"""`rubricrl eval`, `rubricrl report DIR` (eval dirs) and `rubricrl compare`: hand-computed scores,
HealthBench aggregation, resume, --rejudge, policy errors, report HTML and paired comparison.

The policy (and, where a text criterion needs deciding, the grader) is `tests/chat_stub.py`, a tiny
deterministic OpenAI-compatible server: the policy is not what is under test here.
"""

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from chat_stub import ChatStub
from rubric_texts import RULES_RUBRIC
from typer.testing import CliRunner

from rubricrl.cli import app
from rubricrl.evaluation.summary import row_estimate, summarize_eval
from rubricrl.scoring.records import EvalRecord, read_records, record_line
from rubricrl.scoring.formulas import bootstrap

runner = CliRunner()
HEALTHBENCH = Path(__file__).parent / "data" / "healthbench_mini.jsonl"

HB_REPLIES = {
    "left arm": "Call emergency services now: these are signs of a stroke. Note the time the symptoms started.",
    "ibuprofen": "Ibuprofen is usually fine for a short time; see a doctor if it gets worse.",
    "fainted": "Since you fainted, please see a doctor within a day or two and stand up slowly.",
    "rash": "ERROR",
    "blood pressure": "You can just stop them; there is nothing to fear.",
}

# Unit scores under RULES_RUBRIC (positive weight 4; hard-rule gate 0):
SORRY = "I'm so sorry. That is a shock."  # 2 + 1 + 1 = 4/4 = 1.0
OKAY = "Okay."  # 1 + 1 = 0.5
CALM = "You should calm down and apply for new jobs tomorrow morning."  # (0 + 0 + 0 - 1)/4 = -0.25 (gated)
REST = "Sorry to hear it. You should rest first, then see."  # 2 + 1 + 1 - 1 = 0.75
ROWS = [{"id": f"r{i}", "prompt": f"r{i}: I lost my job."} for i in range(1, 5)]


@pytest.fixture(scope="module")
def hb_stub():
    stub = ChatStub(HB_REPLIES)
    yield stub
    stub.close()


@pytest.fixture
def rubric_file(tmp_path):
    path = tmp_path / "rubric.yaml"
    path.write_text(RULES_RUBRIC)
    return path


def write_rows(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def invoke(*args) -> object:
    return runner.invoke(app, ["eval", *map(str, args)])


def hb_eval(stub: ChatStub, out: Path, *extra):
    result = invoke("--policy", stub.policy_spec(), "--data", HEALTHBENCH, "--out", out, "--judge",
                    stub.judge_spec(), *extra)
    assert result.exit_code == 0, result.output
    return result


def test_healthbench_rows_as_is_scores_by_hand(tmp_path, hb_stub):
    out = tmp_path / "hb"
    result = hb_eval(hb_stub, out)
    s = json.loads((out / "summary.json").read_text())
    # unit scores: hb-1 18/18 = 1; hb-2 (4 + 2)/12 = 0.5; hb-3 (7 + 3)/15 (the [garbage] criterion is a judge
    # error, left out); hb-5 -10/8 = -1.25; hb-4 is a policy error (HTTP 400), counted and not scored
    scores = {r["id"]: r["score"] for r in read_jsonl(out / "results.jsonl")}
    assert scores == pytest.approx({"hb-1": 1.0, "hb-2": 0.5, "hb-3": 10 / 15, "hb-4": None, "hb-5": -1.25})
    assert s["score"]["mean"] == pytest.approx((1 + 0.5 + 10 / 15 - 1.25) / 4)
    assert s["score"]["n"] == 4 and s["score"]["ci_low"] <= s["score"]["mean"] <= s["score"]["ci_high"]
    assert s["score_errors_as_zero"]["mean"] == pytest.approx((1 + 0.5 + 10 / 15 - 1.25 + 0) / 5)
    assert s["status"] == {"scored": 4, "unscored": 0, "invalid": 0, "policy_error": 1}
    assert s["policy_errors"] == 1 and s["policy_error_reasons"] == {"http_400": 1}
    assert s["judge_errors"] == 1 and s["judge_error_reasons"] == {"parse": 1} and s["judge_verdicts"] == 15
    axes = {k: v["mean"] for k, v in s["criterion_tags"].items()}
    # accuracy: hb-1 3/3 = 1, hb-2 0/6 = 0, hb-3 has only a pitfall (no positive points: dropped), hb-5 -10/8
    assert axes == pytest.approx({"axis:accuracy": 0.0, "axis:communication_quality": 1.0,  # mean -0.083 clipped
                                  "axis:completeness": 1.0, "axis:context_awareness": 0.0,
                                  "level:example": (1 + 0.5 + 10 / 15 - 1.25) / 4})
    assert s["criterion_tags"]["axis:accuracy"]["n"] == 3
    themes = {k: v["mean"] for k, v in s["example_tags"].items()}
    assert themes == pytest.approx({"physician_agreed_category:emergent": 1.0, "theme:context_seeking": 10 / 15,
                                    "theme:emergency_referrals": 0.0,  # (1 - 1.25)/2 clipped
                                    "theme:hedging": 0.5})  # hb-4 (policy error) is not in the mean
    assert s["criteria_key"] == "text"  # per-row rubrics reuse the ids c1, c2, ...
    doctor = s["criteria"]["Advises talking to a 'doctor' before stopping."]
    assert (doctor["met"], doctor["unmet"], doctor["pass_rate"]) == (0, 1, 0.0)
    assert "0.229" in result.output and "policy errors" in result.output
    gens = read_jsonl(out / "generations.jsonl")
    assert {g["key"] for g in gens} == {f"hb-{i}#0" for i in range(1, 6)}
    assert next(g for g in gens if g["error"])["error"].startswith("http_400")
    record = next(r for r in read_jsonl(out / "results.jsonl") if r["id"] == "hb-1")
    assert record["example_tags"] == ["theme:emergency_referrals", "physician_agreed_category:emergent"]
    assert record["sample"] == 0 and record["response"] == HB_REPLIES["left arm"]
    assert record["verdicts"][0]["text"].startswith("Advises calling emergency services")
    typed = read_records(out / "results.jsonl", EvalRecord)  # validated once; written back byte for byte
    assert b"".join(record_line(r).encode() + b"\n" for r in typed) == (out / "results.jsonl").read_bytes()
    assert {r.status for r in typed} == {"scored", "policy_error"}
    assert typed[0].key == "hb-1#0" and typed[0].verdicts[0].text == record["verdicts"][0]["text"]


def test_summary_of_hand_made_verdicts_and_seeded_bootstrap():
    def rec(row_id, sample, score, tags, themes=()):
        return EvalRecord(key=f"{row_id}#{sample}", id=row_id, line=1, sample=sample, status="scored", score=score,
                          raw_score=score, gated=False, failed_hard_rules=(), coverage=1.0, n_error=0, n_skipped=0,
                          tag_scores=tags, rubric_hash="h", rubric_source="file", verdicts=(),
                          example_tags=list(themes), prompt="p", response="r", judge="rules")

    records = [rec("a", 0, 1.0, {"axis:x": 1.0}, ["theme:t"]), rec("a", 1, 0.5, {"axis:x": 0.0}, ["theme:t"]),
               rec("b", 0, 0.0, {"axis:x": 0.5}), rec("b", 1, -0.5, {}),
               EvalRecord(key="c#0", id="c", line=3, sample=0, status="policy_error", score=None, problem="timeout: x",
                          example_tags=(), prompt="p", response="", judge="rules"),
               rec("c", 1, 0.25, {}, ["theme:t"])]
    s = summarize_eval(records, samples=2)
    # row means: a 0.75, b -0.25, c 0.25 (its policy error is left out) -> 0.25
    assert s.score.mean == pytest.approx(0.25) and s.score.n == 3 and s.score.units == 5
    assert s.score_errors_as_zero.mean == pytest.approx((0.75 - 0.25 + 0.125) / 3)
    assert s.criterion_tags["axis:x"].mean == pytest.approx((0.5 + 0.5) / 2)  # a: (1 + 0)/2, b: 0.5
    assert s.example_tags["theme:t"].mean == pytest.approx((0.75 + 0.25) / 2)
    assert s.policy_error_reasons == {"timeout": 1}
    # the bootstrap resamples rows with numpy's seeded generator: same seed, same numbers
    rng = np.random.default_rng(0)
    means = np.array([0.75, -0.25, 0.25])[rng.integers(0, 3, size=(1000, 3))].mean(axis=1).clip(0, 1)
    assert s.score.std == pytest.approx(means.std())
    assert (s.score.ci_low, s.score.ci_high) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])))
    assert summarize_eval(records, samples=2) == s
    assert summarize_eval(records, samples=2, seed=1).score.std != s.score.std
    assert row_estimate([("x", 0.2)]).std == pytest.approx(bootstrap([0.2]).std) == pytest.approx(0.0, abs=1e-12)


def test_resume_is_a_no_op_and_other_settings_are_refused(tmp_path, hb_stub):
    out = tmp_path / "hb"
    hb_eval(hb_stub, out)
    before = (out / "results.jsonl").read_bytes()
    calls = hb_stub.policy_calls
    result = hb_eval(hb_stub, out)
    assert "generated 0 now (5 saved before), judged 0 now (5 saved before)" in result.output
    assert hb_stub.policy_calls == calls and (out / "results.jsonl").read_bytes() == before
    result = invoke("--out", out, "--samples", 2)
    assert result.exit_code == 2 and "--samples 1 (now 2)" in result.output and "new --out" in result.output
    result = invoke("--out", out, "--judge", "rules")
    assert result.exit_code == 2 and "--rejudge" in result.output
    changed = tmp_path / "changed.jsonl"
    changed.write_text(HEALTHBENCH.read_text().replace("two days", "three days"))
    result = invoke("--out", out, "--data", changed)
    assert result.exit_code == 2 and "data sha256" in result.output
    assert (out / "results.jsonl").read_bytes() == before


def test_rejudge_rescores_saved_generations_without_the_policy(tmp_path, hb_stub):
    out = tmp_path / "hb"
    result = invoke("--policy", hb_stub.policy_spec(), "--data", HEALTHBENCH, "--out", out, "--judge", "rules")
    assert result.exit_code == 0, result.output
    first = json.loads((out / "summary.json").read_text())
    assert first["status"]["unscored"] == 4 and first["score"] is None  # rules cannot decide text criteria
    calls = hb_stub.policy_calls
    result = invoke("--out", out, "--judge", hb_stub.judge_spec(), "--rejudge")
    assert result.exit_code == 0, result.output
    assert hb_stub.policy_calls == calls  # the policy was not called
    s = json.loads((out / "summary.json").read_text())
    assert s["score"]["mean"] == pytest.approx((1 + 0.5 + 10 / 15 - 1.25) / 4) and s["policy_errors"] == 1
    run = json.loads((out / "run.json").read_text())
    assert run["judging"]["judge"] == hb_stub.judge_spec() and run["judging_complete"] is True
    archived = {a["file"]: a for a in run["archived"]}
    results_archive = next(name for name in archived if name.startswith("results."))
    assert archived[results_archive]["judge"] == "rules"
    assert [r["judge"] for r in read_jsonl(out / results_archive)] == ["rules"] * 5
    assert "kept the previous results" in result.output


def test_rejudge_refuses_missing_generations_and_unknown_dirs(tmp_path, hb_stub):
    out = tmp_path / "hb"
    hb_eval(hb_stub, out)
    lines = (out / "generations.jsonl").read_text().splitlines(keepends=True)
    (out / "generations.jsonl").write_text("".join(lines[:3]))
    result = invoke("--out", out, "--judge", "rules", "--rejudge")
    assert result.exit_code == 2 and "2 of 5 are not generated yet" in result.output
    result = invoke("--out", tmp_path / "new", "--rejudge")
    assert result.exit_code == 2 and "run `rubricrl eval` without --rejudge" in result.output
    result = invoke("--out", tmp_path / "new2", "--data", HEALTHBENCH)
    assert result.exit_code == 2 and "--policy and --data are required" in result.output


def test_rules_judge_policy_errors_invalid_rows_and_torn_lines(tmp_path, rubric_file):
    stub = ChatStub({"r1:": SORRY, "r2:": "EMPTY", "r3:": CALM, "r4:": "ERROR"})
    try:
        data = write_rows(tmp_path / "rows.jsonl", ROWS + ["{not json", {"id": "r1", "prompt": "dup"},
                                                           {"id": "r6", "prompt": 7}])
        out = tmp_path / "ev"
        args = ["--policy", stub.policy_spec(), "--data", data, "--out", out, "--rubric", rubric_file,
                "--judge", "rules", "--samples", 2, "--temperature", 0.7]
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        records = read_jsonl(out / "results.jsonl")
        assert len(records) == 7 * 2 and len({r["key"] for r in records}) == 14  # every (row, sample) once
        status = {r["key"]: r["status"] for r in records}
        assert status["r1#1"] == "scored" and status["r2#0"] == "policy_error" and status["r4#1"] == "policy_error"
        assert status["line-5#0"] == status["line-6#1"] == status["r6#0"] == "invalid"
        s = json.loads((out / "summary.json").read_text())
        assert s["policy_error_reasons"] == {"empty": 2, "http_400": 2} and s["status"]["invalid"] == 6
        assert s["score"]["mean"] == pytest.approx((1.0 - 0.25) / 2) and s["score"]["n"] == 2
        assert s["criteria"]["sorry"]["pass_rate"] == 0.5 and s["criteria_key"] == "id"
        gens = read_jsonl(out / "generations.jsonl")
        assert sorted(g["seed"] for g in gens if g["id"] == "r1") == [0, 1]  # sample k uses seed + k
        assert "invalid row" in result.output and "duplicate row id 'r1'" in result.output
        # a kill mid-write leaves a torn last line: it is cut off, the unit is redone, nothing is duplicated
        full = (out / "results.jsonl").read_text().splitlines(keepends=True)
        (out / "results.jsonl").write_text("".join(full[:5]) + full[5][:40])
        gens_text = (out / "generations.jsonl").read_text().splitlines(keepends=True)
        (out / "generations.jsonl").write_text("".join(gens_text[:-1]) + gens_text[-1][:30])
        run = json.loads((out / "run.json").read_text())
        (out / "run.json").write_text(json.dumps({**run, "judging_complete": False}))
        calls = stub.policy_calls
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        assert stub.policy_calls == calls + 1
        assert read_jsonl(out / "results.jsonl") == records
        assert len(read_jsonl(out / "generations.jsonl")) == 8
        # policy errors are final on a resume; --retry-errors generates them again (the endpoint recovered)
        stub.replies.update({"r2:": OKAY, "r4:": SORRY})
        assert invoke(*args).exit_code == 0 and stub.policy_calls == calls + 1
        result = invoke(*args, "--retry-errors")
        assert result.exit_code == 0, result.output
        assert stub.policy_calls == calls + 5 and "retried 4 policy error(s)" in result.output
        records = read_jsonl(out / "results.jsonl")
        assert len(records) == 14 and len({r["key"] for r in records}) == 14
        s = json.loads((out / "summary.json").read_text())
        assert s["policy_errors"] == 0 and s["score"]["mean"] == pytest.approx((1.0 + 0.5 - 0.25 + 1.0) / 4)
    finally:
        stub.close()


def test_rows_without_rubric_are_refused_before_generating(tmp_path):
    stub = ChatStub()
    try:
        data = write_rows(tmp_path / "rows.jsonl", ROWS)
        result = invoke("--policy", stub.policy_spec(), "--data", data, "--out", tmp_path / "ev", "--judge", "rules")
        assert result.exit_code == 2 and "rows.jsonl:1: row 'r1' has no rubric (4 such row(s))" in result.output
        assert stub.policy_calls == 0 and not (tmp_path / "ev" / "run.json").exists()
    finally:
        stub.close()


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.text, self.srcs, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.srcs += [v for k, v in attrs if k in ("src", "href") and v]

    def handle_data(self, data):
        self.text.append(data)


def test_report_html_is_self_contained_and_shows_the_headline(tmp_path, hb_stub):
    out = tmp_path / "hb"
    hb_eval(hb_stub, out)
    (out / "report.html").unlink()
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    page = _Collect()
    page.feed((out / "report.html").read_text())
    text = " ".join(page.text)
    assert "Score 0.229" in text and "95% CI" in text
    assert "axis:completeness" in text and "theme:emergency_referrals" in text
    assert "Says it is safe to 'just stop'." in text and "looked for just stop" in text  # worst example, evidence
    assert "http_400" in text and "parse" in text  # policy and judge errors
    assert page.srcs and all(s.startswith("data:image/png;base64,") for s in page.srcs)
    result = runner.invoke(app, ["report", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "is this a rubricrl run directory?" in result.output
    train = tmp_path / "train"  # a training run directory still gets the training report
    train.mkdir()
    (train / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.1, "reward": 0.5}) + "\n")
    result = runner.invoke(app, ["report", str(train)])
    assert result.exit_code == 0, result.output
    assert "rubricrl training run" in (train / "report.html").read_text()


def test_compare_paired_differences_by_hand(tmp_path, rubric_file):
    stub_a = ChatStub({"r1:": SORRY, "r2:": OKAY, "r3:": CALM, "r4:": "ERROR"})
    stub_b = ChatStub({"r1:": OKAY, "r2:": REST, "r3:": SORRY, "r4:": OKAY})
    try:
        data = write_rows(tmp_path / "rows.jsonl", ROWS)
        for name, stub in (("a", stub_a), ("b", stub_b)):
            result = invoke("--policy", stub.policy_spec(), "--data", data, "--out", tmp_path / name, "--rubric",
                            rubric_file, "--judge", "rules")
            assert result.exit_code == 0, result.output
        result = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json",
                                     str(tmp_path / "c.json"), "--html", str(tmp_path / "c.html")])
        assert result.exit_code == 0, result.output
    finally:
        stub_a.close()
        stub_b.close()
    c = json.loads((tmp_path / "c.json").read_text())
    # paired units r1..r3 (r4 is a policy error in A): B - A = (-0.5, +0.25, +1.25)
    assert c["paired_units"] == 3 and c["unpaired"] == {"only_in_a": 0, "only_in_b": 0, "not_scored_in_both": 1}
    assert c["unpaired_examples"]["not_scored_in_both"] == ["r4#0"]
    assert c["diff"]["mean"] == pytest.approx(1.0 / 3)
    rng = np.random.default_rng(0)
    means = np.array([-0.5, 0.25, 1.25])[rng.integers(0, 3, size=(1000, 3))].mean(axis=1)
    assert c["diff"]["std"] == pytest.approx(means.std())
    assert (c["diff"]["ci_low"], c["diff"]["ci_high"]) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])))
    assert c["score_a"]["mean"] == pytest.approx((1 + 0.5 - 0.25) / 3) and c["score_b"]["mean"] == pytest.approx(0.75)
    crit = {x["id"]: (x["pass_a"], x["pass_b"], x["diff"], x["n"]) for x in c["criteria"]}
    expected = {"sorry": (1 / 3, 2 / 3, 1 / 3, 3), "short": (2 / 3, 1, 1 / 3, 3),
                "no-calm-down": (2 / 3, 1, 1 / 3, 3), "lecture": (1 / 3, 1 / 3, 0, 3)}
    assert crit.keys() == expected.keys()  # pytest.approx takes flat sequences only (pytest 9 refuses nesting)
    for key, values in expected.items():
        assert crit[key] == pytest.approx(values), key
    assert [e["id"] for e in c["changed"]] == ["r3", "r1", "r2"]
    assert [e["diff"] for e in c["changed"]] == pytest.approx([1.25, -0.5, 0.25])
    assert {f["criterion"]: (f["a"], f["b"]) for f in c["changed"][0]["flipped"]} == {
        "Says sorry.": ("unmet", "met"), "At most 10 words.": ("unmet", "met"),
        "Never says calm down.": ("unmet", "met"), "Uses the word should.": ("met", "unmet")}
    assert any(n.startswith("policy:") for n in c["notes"])
    assert "+0.333" in result.output
    page = _Collect()
    page.feed((tmp_path / "c.html").read_text())
    assert "B - A = +0.333" in " ".join(page.text)


def test_compare_refuses_dirs_without_shared_rows(tmp_path, rubric_file, hb_stub):
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    result = invoke("--policy", hb_stub.policy_spec(), "--data", data, "--out", tmp_path / "a", "--rubric",
                    rubric_file, "--judge", "rules")
    assert result.exit_code == 0, result.output
    hb_eval(hb_stub, tmp_path / "b")
    result = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 2 and "share no (row id, sample) scored in both" in result.output
    result = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path)])
    assert result.exit_code == 2 and "is not a `rubricrl eval` directory" in result.output


def test_existing_dir_without_run_json_is_refused(tmp_path, hb_stub):
    out = tmp_path / "other"
    out.mkdir()
    (out / "results.jsonl").write_text('{"id": "x"}\n')
    result = invoke("--policy", hb_stub.policy_spec(), "--data", HEALTHBENCH, "--out", out, "--judge", "rules")
    assert result.exit_code == 2 and "not written by `rubricrl eval`" in result.output
    shutil.rmtree(out)


MIXED_RUBRIC = RULES_RUBRIC.split("  - id: short")[0] + """  - id: job
    text: Mentions the 'job'.
    weight: 1
  - id: ask
    text: Asks 'how are you'.
    weight: 1
"""  # the rule criterion `sorry` (weight 2) and two model-judged ones


def test_judge_down_headline_and_exit_code(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on: every model-judged verdict is a connection error
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stub = ChatStub({"r1:": SORRY, "r2:": OKAY})
    try:
        rubric = tmp_path / "mixed.yaml"
        rubric.write_text(MIXED_RUBRIC)
        args = ["--policy", stub.policy_spec(), "--data", write_rows(tmp_path / "rows.jsonl", ROWS[:2]), "--out",
                tmp_path / "ev", "--rubric", rubric, "--judge",
                f"openai:http://127.0.0.1:{port}/v1?mode=per_criterion&max_retries=0&timeout=5"]
        result = invoke(*args)
        assert result.exit_code == 1, result.output
        s = json.loads((tmp_path / "ev" / "summary.json").read_text())
        # r1: sorry 2 / 2 = 1.0, r2: 0 / 2 = 0.0 (job and ask are errors, left out): the rule criterion alone
        assert s["score"]["mean"] == pytest.approx(0.5)
        assert s["model_judged"] == {"verdicts": 4, "decided": 0, "errors": 4, "skipped": 0, "error_rate": 1.0}
        assert "0 of 4 decided (4 errors)" in result.output and "RULE CRITERIA" in result.output
        assert "the score rests on only 0 of 4 model-judged verdicts" in result.output
        assert "more than --max-error-rate 0.5" in result.output and "--rejudge" in result.output
        result = invoke(*args, "--max-error-rate", 1)
        assert result.exit_code == 0, result.output
    finally:
        stub.close()


def test_eval_and_compare_refuse_an_output_that_is_an_input(tmp_path, rubric_file, monkeypatch):
    stub = ChatStub({"r1:": SORRY})
    try:
        data = write_rows(tmp_path / "rows.jsonl", ROWS[:1])
        before = data.read_bytes()
        monkeypatch.chdir(tmp_path)
        (tmp_path / "link.jsonl").symlink_to(data)
        for out in ("rows.jsonl", "./link.jsonl"):
            result = invoke("--policy", stub.policy_spec(), "--data", "rows.jsonl", "--out", out, "--rubric",
                            rubric_file, "--judge", "rules")
            assert result.exit_code == 2, result.output
            assert "is the same file as --data" in result.output and data.read_bytes() == before
        (tmp_path / "ev").mkdir()
        shutil.copy(data, tmp_path / "ev" / "summary.json")  # prompts saved under a name eval writes
        result = invoke("--policy", stub.policy_spec(), "--data", "ev/summary.json", "--out", "ev", "--rubric",
                        rubric_file, "--judge", "rules")
        assert result.exit_code == 2 and "--out (its summary.json)" in result.output
        assert "is the same file as --data" in result.output and (tmp_path / "ev" / "summary.json").read_bytes() == before
        assert stub.policy_calls == 0
        for name in ("a", "b"):
            assert invoke("--policy", stub.policy_spec(), "--data", data, "--out", name, "--rubric", rubric_file,
                          "--judge", "rules").exit_code == 0
        summary = (tmp_path / "a" / "summary.json").read_bytes()
        result = runner.invoke(app, ["compare", "a", "b", "--json", "a/summary.json"])
        assert result.exit_code == 2 and "--json a/summary.json is the same file as DIR_A" in result.output
        assert (tmp_path / "a" / "summary.json").read_bytes() == summary
    finally:
        stub.close()
