"""verl integration: compute_score called the way verl's reward managers call it (naive and
reward-loop: keyword arguments per sample; batch: lists plus reward_kwargs), loaded the way
`custom_reward_function` loads it (a file path, reward_kwargs merged over the call's), with
parquet rows from examples/verl/prepare_data.py. Rules-only rubrics: numbers by hand."""

import asyncio
import importlib.util
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import rubricrl.integrations.verl as rv
from rubricrl.rewards import JudgeFailure
from rubricrl.core.verdicts import error_verdict
from rubricrl.judges.base import JudgeStats, StatsJudge

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = {"id": "rules-only", "criteria": [
    {"id": "thanks", "text": "Thanks the person.", "weight": 2, "check": {"type": "contains", "any_of": ["thank"]}},
    {"id": "short", "text": "At most 6 words.", "weight": 1, "check": {"type": "length", "unit": "words", "max": 6}},
    {"id": "rude", "text": "Is rude.", "weight": -1, "check": {"type": "contains", "any_of": ["whatever"]}},
]}
# positive weight 3. "Thank you for telling me." -> 2 + 1 = 1.0; "whatever" -> short 1 - rude 1 = 0.0;
# "Thank you so much, that was really brave of you." (10 words) -> 2/3
CASES = [("Thank you for telling me.", 1.0), ("whatever", 0.0), ("Thank you so much, that was really brave of you.", 2 / 3)]
KEYS = {"score", "rubric_scored", "rubric_points", "rubric_coverage", "rubric_judge_errors", "rubric_skipped",
        "rubric_gated", "rubric_verified", "rubric_unverified", "rubric_confirmed", "rubric_pairs"}
ZEROS = {"rubric_verified": 0.0, "rubric_unverified": 0.0, "rubric_confirmed": 0.0, "rubric_pairs": 0.0}
MESSAGES = [{"role": "user", "content": "I finally told my family."}]


@pytest.fixture(autouse=True)
def rules_judge(monkeypatch):
    monkeypatch.setenv(rv.JUDGE_ENV, "rules")
    monkeypatch.delenv(rv.RUBRIC_ENV, raising=False)
    monkeypatch.delenv(rv.POLICY_ENV, raising=False)


def naive_call(compute_score, data_source, response, ground_truth, extra_info):
    """What verl's naive manager does per sample: it adds num_turns and rollout_reward_scores to
    extra_info, then calls with these four keyword arguments."""
    extra_info = dict(extra_info or {})
    extra_info["num_turns"] = None
    extra_info["rollout_reward_scores"] = {}
    return compute_score(data_source=data_source, solution_str=response, ground_truth=ground_truth,
                         extra_info=extra_info)


def custom_reward_fn(path: Path, name: str, reward_kwargs: dict):
    """Load a reward function from a file and bind reward_kwargs over the call's keyword arguments,
    as verl's custom_reward_function does."""
    spec = importlib.util.spec_from_file_location(f"custom_module_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    raw = getattr(module, name)

    def call(raw_fn, bound, *args, **kwargs):
        return raw_fn(*args, **{**kwargs, **bound})

    return partial(call, raw, dict(reward_kwargs))


def test_naive_manager_call_with_rubric_in_ground_truth():
    fn = custom_reward_fn(ROOT / "examples/verl/reward.py", "compute_score", {"judge": "rules"})
    results = [naive_call(fn, "rubricrl/rules-only", text, json.dumps(RUBRIC), {"prompt": MESSAGES})
               for text, _ in CASES]
    assert [r["score"] for r in results] == pytest.approx([v for _, v in CASES])
    assert all(set(r) == KEYS for r in results)
    assert all(isinstance(v, float) for r in results for v in r.values())
    assert [r["rubric_scored"] for r in results] == [1.0, 1.0, 1.0]
    assert [r["rubric_coverage"] for r in results] == [1.0, 1.0, 1.0]


def test_rubric_from_extra_info_when_ground_truth_is_a_reference_answer():
    out = naive_call(rv.compute_score, "ds", "Thank you for telling me.", "The answer is 42.",
                     {"prompt": MESSAGES, "rubric": RUBRIC})
    assert out["score"] == pytest.approx(1.0)
    # a rubric as a dict ground_truth and as a bundled name; numpy arrays as parquet readers give them
    as_numpy = {**RUBRIC, "criteria": np.array(RUBRIC["criteria"], dtype=object)}
    assert naive_call(rv.compute_score, "ds", "whatever", as_numpy,
                      {"prompt": np.array(MESSAGES, dtype=object)})["score"] == pytest.approx(0.0)
    # empathy with rules only: 4 words is under `concise`'s minimum of 5 -> few-questions 1 + ends-complete 1
    # + no-ai-disclaimer 2 + no-dismissive 2 of (1 + 1 + 1 + 2 + 2) = 6/7, the five model-judged criteria skipped
    empathy = naive_call(rv.compute_score, "ds", "Thank you for sharing.", "empathy", {"question": "I told them."})
    assert empathy["score"] == pytest.approx(6 / 7) and empathy["rubric_skipped"] == 5.0


def test_batch_manager_call(tmp_path):
    fn = custom_reward_fn(ROOT / "examples/verl/reward.py", "compute_score_batch", {})
    texts = [t for t, _ in CASES]
    extras = np.array([{"prompt": MESSAGES, "rubric": json.dumps(RUBRIC), "rollout_reward_scores": {}}
                       for _ in CASES], dtype=object)
    out = fn(data_sources=np.array(["ds"] * 3, dtype=object), solution_strs=texts,
             ground_truths=[json.dumps(RUBRIC), None, "ref"], extra_infos=extras,
             judge="rules", error_policy="zero")  # reward_model.reward_kwargs arrive as kwargs
    assert isinstance(out, list) and [r["score"] for r in out] == pytest.approx([v for _, v in CASES])
    # rows 2 and 3 carry no rubric: with none by default they cannot be scored
    with pytest.raises(ValueError, match="sample 1 .*no rubric"):
        fn(data_sources=["ds"] * 3, solution_strs=texts, ground_truths=[json.dumps(RUBRIC), None, "ref"],
           extra_infos=[{}, {}, {}])
    rubric_file = tmp_path / "rubric.json"  # a default rubric (reward_kwargs.rubric) for rows that carry none
    rubric_file.write_text(json.dumps(RUBRIC))
    out = fn(data_sources=["ds"] * 3, solution_strs=texts, ground_truths=[None, "", "ref"],
             extra_infos=[{}, None, {"prompt": "hi"}], rubric=str(rubric_file))
    assert [r["score"] for r in out] == pytest.approx([v for _, v in CASES])
    assert all(set(r) == KEYS for r in out)


def test_async_variant_and_calls_from_a_running_loop_and_threads():
    args = {"data_source": "ds", "ground_truth": json.dumps(RUBRIC), "extra_info": {"prompt": MESSAGES}}

    async def inside_a_loop():
        awaited = await rv.compute_score_async(solution_str=CASES[0][0], **args)
        blocking = rv.compute_score(solution_str=CASES[2][0], **args)  # sync call while a loop runs here
        return awaited, blocking

    awaited, blocking = asyncio.run(inside_a_loop())
    assert awaited["score"] == pytest.approx(1.0) and blocking["score"] == pytest.approx(2 / 3)
    with ThreadPoolExecutor(8) as pool:  # the reward loop runs sync reward functions in executor threads
        scores = list(pool.map(lambda i: rv.compute_score(solution_str=CASES[i % 3][0], **args)["score"], range(48)))
    assert scores == pytest.approx([CASES[i % 3][1] for i in range(48)])


def test_unscored_rows_and_judge_errors_follow_the_error_policy(monkeypatch):
    model_only = {"criteria": [{"id": "warm", "text": "Is warm."}]}
    out = rv.compute_score("ds", "hi", json.dumps(model_only), {"prompt": "x"})  # rules cannot decide it
    assert out == {"score": 0.0, "rubric_scored": 0.0, "rubric_points": 0.0, "rubric_coverage": 0.0,
                   "rubric_judge_errors": 0.0, "rubric_skipped": 1.0, "rubric_gated": 0.0, **ZEROS}

    class Failing(StatsJudge):
        judge_id = "failing"

        def __init__(self):
            self.stats = JudgeStats()

        async def judge(self, requests):
            return [[error_verdict(c.id, "failing", "http: timeout") for c in r.criteria] for r in requests]

    import rubricrl.judges

    monkeypatch.setattr(rubricrl.judges, "make_judge", lambda spec: Failing())
    zero = rv.compute_score("ds", "hi", json.dumps(RUBRIC), {"prompt": "x"}, judge="failing")
    assert zero["score"] == 0.0 and zero["rubric_scored"] == 0.0 and zero["rubric_judge_errors"] == 3.0
    with pytest.raises(JudgeFailure, match="1 of 1 samples not scored.*http: timeout"):
        rv.compute_score("ds", "hi", json.dumps(RUBRIC), {"prompt": "x"}, judge="failing", error_policy="raise")
    assert rv.totals()["judge_error"] >= 2


def test_bad_rubrics_name_the_sample_and_field():
    with pytest.raises(ValueError, match=r"sample 0 \(data_source 'ds'\) reward_model.ground_truth: not valid JSON"):
        rv.compute_score("ds", "hi", "{oops", {})
    bad = {"criteria": [{"id": "a", "text": "A.", "weight": "heavy"}]}
    with pytest.raises(ValueError, match=r"extra_info.rubric.*criteria\[0\].weight"):
        rv.compute_score("ds", "hi", "42", {"rubric": bad})
    with pytest.raises(ValueError, match="error_policy must be one of"):
        rv.compute_score("ds", "hi", json.dumps(RUBRIC), {}, error_policy="mask")


def test_errors_name_the_sample_by_its_data_keys_not_its_position(monkeypatch, caplog):
    """verl's reward loop calls compute_score once per sample, so the position in the call is always 0:
    errors name the sample by the extra_info keys that identify it in the data (prepare_data.py writes
    id, split and index; parquet gives numpy numbers), else by position."""
    extra = {"split": "train", "index": np.int64(41), "id": "row-41", "prompt": MESSAGES}
    with pytest.raises(ValueError, match=r"^sample id='row-41', split='train', index=41 \(data_source 'ds'\) "
                                         r"reward_model.ground_truth: not valid JSON"):
        naive_call(rv.compute_score, "ds", "hi", "{oops", extra)
    with pytest.raises(ValueError, match=r"^sample uid='u-7' \(data_source 'ds'\): no rubric"):
        rv.compute_score("ds", "hi", None, {"uid": "u-7", "index": None})  # a blank key is left out

    class Failing(StatsJudge):
        judge_id = "failing"

        def __init__(self):
            self.stats = JudgeStats()

        async def judge(self, requests):
            return [[error_verdict(c.id, "failing", "http: timeout") for c in r.criteria] for r in requests]

    import rubricrl.judges

    monkeypatch.setattr(rubricrl.judges, "make_judge", lambda spec: Failing())
    with pytest.raises(JudgeFailure, match=r"1 of 1 samples not scored \(error_policy raise\): "
                                           r"sample id='row-41', split='train', index=41: 3 judge error"):
        rv.compute_score("ds", "hi", json.dumps(RUBRIC), extra, judge="failing", error_policy="raise")
    with caplog.at_level("WARNING", logger="rubricrl.verl"):
        out = rv.compute_score("ds", "hi", json.dumps(RUBRIC), extra, judge="failing")
    assert out["rubric_scored"] == 0.0
    assert "sample id='row-41', split='train', index=41: 3 judge error" in caplog.text
    # a batch call: samples without identifying keys fall back to their position in the call
    with pytest.raises(ValueError, match=r"^sample 1 \(data_source 'ds'\): no rubric"):
        rv.compute_score_batch(["ds", "ds"], ["a", "b"], [json.dumps(RUBRIC), None], [extra, {"prompt": "x"}])
    with pytest.raises(ValueError, match=r"^sample index=7 \(data_source 'ds'\): no rubric"):
        rv.compute_score_batch(["ds", "ds"], ["a", "b"], [json.dumps(RUBRIC), None], [extra, {"index": 7}])


def test_parquet_rows_from_prepare_data_score_like_verl(tmp_path):
    sys.path.insert(0, str(ROOT / "examples" / "verl"))
    try:
        import prepare_data
    finally:
        sys.path.pop(0)
    data = tmp_path / "in.jsonl"
    rows = [{"id": "a", "prompt": "I told my family."},
            {"id": "b", "messages": MESSAGES, "rubric": RUBRIC},
            {"id": "c", "prompt": [{"role": "user", "content": "Guess what"}], "rubric": "empathy"}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert prepare_data.main(["--data", str(data), "--rubric", "empathy", "--out", str(tmp_path / "out"),
                              "--test-fraction", "0"]) == 0
    from datasets import load_dataset

    table = load_dataset("parquet", data_files=str(tmp_path / "out" / "train.parquet"))["train"]
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert [r["data_source"] for r in table] == ["rubricrl/empathy-v1", "rubricrl/rules-only", "rubricrl/empathy-v1"]
    row = table[1]
    assert row["extra_info"]["prompt"] == MESSAGES
    out = naive_call(rv.compute_score, row["data_source"], "Thank you for telling me.",
                     row["reward_model"]["ground_truth"], row["extra_info"])
    assert out["score"] == pytest.approx(1.0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "x", "rubric": {"criteria": []}}) + "\n")
    assert prepare_data.main(["--data", str(bad), "--out", str(tmp_path / "o2")]) == 2
