"""The on-policy gold set (bench/gold/) loads, is complete, and the bench's metrics are right by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("judge_on_policy", ROOT / "bench" / "judge_on_policy.py")
jop = importlib.util.module_from_spec(spec)
spec.loader.exec_module(jop)


def test_gold_set_loads_complete_and_blind():
    items, labels = jop.load_gold()
    assert len(items) >= 400 and len(labels) == len(items)
    assert {i["rubric"] for i in items} == {"empathy", "crisis_safety"}
    assert all(set(i) == {"id", "rubric", "prompt", "reply"} for i in items)  # nothing that tells the source
    sources = {s["id"]: s for s in jop.read_jsonl(jop.GOLD / "sources.jsonl")}
    assert set(sources) == {i["id"] for i in items}
    kinds = {(s["policy"], s["decoding"]) for s in sources.values()}
    assert kinds == {("base", "greedy"), ("base", "sampled"), ("trained", "greedy"), ("trained", "sampled")}
    reread = jop.read_jsonl(jop.GOLD / "reread.jsonl")
    assert len(reread) * 10 >= len(items)


def test_missing_or_wrong_labels_are_refused(tmp_path):
    items = [{"id": "g1", "rubric": "empathy", "prompt": "p", "reply": "r"}]
    (tmp_path / "items.jsonl").write_text(json.dumps(items[0]) + "\n")
    (tmp_path / "labels.jsonl").write_text(json.dumps({"id": "g1", "labels": {"coherent": True}}) + "\n")
    with pytest.raises(SystemExit, match="must be exactly"):
        jop.load_gold(tmp_path)
    (tmp_path / "labels.jsonl").write_text("")
    with pytest.raises(SystemExit, match="g1 has no labels"):
        jop.load_gold(tmp_path)


def test_auc_and_kappa_by_hand():
    # positives 0.9, 0.4; negatives 0.4, 0.1: pairs (0.9>0.4) (0.9>0.1) (0.4=0.4 half) (0.4>0.1) = 3.5 / 4
    assert jop.auc([0.9, 0.4, 0.4, 0.1], [True, True, False, False]) == pytest.approx(0.875)
    assert jop.auc([0.5, 0.6], [True, True]) is None
    # a = TTFF, b = TFFF: observed 3/4; expected 0.5*0.25 + 0.5*0.75 = 0.5; kappa = 0.25 / 0.5
    assert jop.kappa([True, True, False, False], [True, False, False, False]) == pytest.approx(0.5)
