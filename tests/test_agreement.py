"""Judge agreement with human labels: label files, metrics by hand, `rubricrl judge agree`."""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rubricrl.judge_tools.agreement import (
    agreement,
    binary_metrics,
    build_requests,
    group_metrics,
    judge_labels,
    read_labels,
    reliability_bins,
)
from rubricrl.cli import app
from rubricrl.judges import make_judge
from rubricrl.core.verdicts import Status, Verdict, error_verdict

runner = CliRunner()


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# 10 labels: 5 met, 5 unmet. The judge says met for 3 of the met ones (TP=3, FN=2) and for 1 unmet one (FP=1, TN=4).
Y = [True, True, True, True, True, False, False, False, False, False]
PRED = [True, True, True, False, False, True, False, False, False, False]
P = [0.9, 0.8, 0.7, 0.4, 0.2, 0.6, 0.4, 0.1, 0.1, 0.05]


def test_binary_metrics_by_hand():
    m = binary_metrics(Y, PRED, P)
    assert (m["tp"], m["fp"], m["fn"], m["tn"]) == (3, 1, 2, 4)
    assert m["precision_met"] == pytest.approx(0.75)  # 3 / (3 + 1)
    assert m["recall_met"] == pytest.approx(0.6)  # 3 / (3 + 2)
    assert m["f1_met"] == pytest.approx(6 / 9, abs=1e-6)  # 2TP / (2TP + FP + FN) = 6 / 9
    assert m["precision_unmet"] == pytest.approx(4 / 6, abs=1e-6)  # TN / (TN + FN)
    assert m["recall_unmet"] == pytest.approx(0.8)  # TN / (TN + FP)
    assert m["f1_unmet"] == pytest.approx(8 / 11, abs=1e-6)  # 2TN / (2TN + FN + FP) = 8 / 11
    assert m["balanced_f1"] == pytest.approx((6 / 9 + 8 / 11) / 2, abs=1e-6)  # 0.69697
    # kappa: observed agreement 7/10; chance = P(judge met) P(human met) + P(judge unmet) P(human unmet)
    #        = 0.4 * 0.5 + 0.6 * 0.5 = 0.5; kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
    assert m["kappa"] == pytest.approx(0.4)
    # AUC over 5 x 5 pairs: 0.9, 0.8, 0.7 beat all 5 unmet scores (15); 0.4 beats 0.1, 0.1, 0.05 and ties 0.4
    # (3.5); 0.2 beats 0.1, 0.1, 0.05 (3). (15 + 3.5 + 3) / 25 = 0.86
    assert m["auc"] == pytest.approx(0.86)
    assert m["auc_n"] == 10


def test_binary_metrics_edge_cases():
    empty = binary_metrics([], [], [])
    assert empty["n_decided"] == 0 and empty["balanced_f1"] is None and empty["kappa"] is None
    one_class = binary_metrics([True, True, True], [True, False, True], [0.9, 0.2, 0.7])
    assert one_class["auc"] is None  # one class only
    assert one_class["recall_met"] == pytest.approx(2 / 3)
    assert one_class["f1_unmet"] == 0.0  # no true unmet item: undefined -> 0 (documented)
    no_p = binary_metrics([True, False], [True, False], [None, None])
    assert no_p["auc"] is None and no_p["auc_n"] == 0 and no_p["kappa"] == pytest.approx(1.0)


def label_rows() -> list[dict]:
    rows = []
    for i, (y, pred, p) in enumerate(zip(Y, PRED, P)):
        rows.append({"id": f"r{i}", "prompt": f"conversation {i % 3}", "response": f"reply {i}",
                     "criterion": "The reply is kind.", "label": "met" if y else "unmet", "tags": ["kindness"],
                     "_pred": pred, "_p": p})
    return rows


class ScriptedJudge:
    """Answers from a table {(response, criterion text): (status, p_met)}."""

    judge_id = "scripted"

    def __init__(self, table):
        from rubricrl.judges.base import JudgeStats

        self.table, self.stats, self.calls = table, JudgeStats(), []

    async def judge(self, requests):
        self.calls.append(len(requests))
        out = []
        for r in requests:
            row = []
            for c in r.criteria:
                status, p = self.table[(r.response, c.text)]
                row.append(error_verdict(c.id, self.judge_id, "timeout: scripted") if status == "error" else
                           Verdict(criterion_id=c.id, status=Status(status), p_met=p, judge_id=self.judge_id))
            out.append(row)
        return out


def test_judge_labels_metrics_exclude_errors(tmp_path):
    rows = label_rows()
    table = {(r["response"], r["criterion"]): ("met" if r["_pred"] else "unmet", r["_p"]) for r in rows}
    extra = [{"prompt": "x", "response": f"failing {k}", "criterion": "The reply is kind.", "label": k == 0}
             for k in range(2)]
    table.update({(e["response"], e["criterion"]): ("error", None) for e in extra})
    labels, problems = read_labels(write_jsonl(tmp_path / "l.jsonl", rows + extra))
    assert not problems and len(labels) == 12
    judge = ScriptedJudge(table)
    seen = []
    verdicts = judge_labels(judge, labels, batch_size=2, on_labels=seen.append)
    assert sum(seen) == 12 and all(n <= 2 for n in judge.calls)
    m = group_metrics(labels, verdicts)
    assert m["n_labels"] == 12 and m["n_errors"] == 2 and m["n_decided"] == 10
    assert m["error_reasons"] == {"timeout": 2}
    assert m["precision_met"] == pytest.approx(0.75) and m["kappa"] == pytest.approx(0.4)  # errors never count
    result = agreement(labels, verdicts, judge_id=judge.judge_id)
    assert list(result["by_tag"]) == ["kindness"] and result["by_tag"]["kindness"]["n_labels"] == 10
    [crit] = result["by_criterion"].values()
    assert crit["text"] == "The reply is kind." and crit["n_errors"] == 2


def test_requests_grouped_by_item_and_conversation(tmp_path):
    rows = [{"prompt": "A", "response": "r1", "criterion": "c one", "label": True},
            {"prompt": "B", "response": "r2", "criterion": "c one", "label": True},
            {"prompt": "A", "response": "r1", "criterion": "c two", "label": False},
            {"prompt": "A", "response": "r3", "criterion": "c one", "label": False},
            {"prompt": "A", "response": "r1", "criterion": "c one", "label": False}]  # a second annotator
    labels, _ = read_labels(write_jsonl(tmp_path / "l.jsonl", rows))
    requests, where = build_requests(labels)
    assert [(r.conversation[0].content, r.response, len(r.criteria)) for r in requests] == [
        ("A", "r1", 2), ("A", "r3", 1), ("B", "r2", 1)]  # conversation A's requests are adjacent
    assert where[0] == where[4]  # the same criterion on the same item is judged once


def test_bad_label_lines_are_reported_and_the_rest_used(tmp_path):
    good = {"prompt": "hi", "response": "hello", "criterion": "Greets.", "label": True}
    path = write_jsonl(tmp_path / "labels.jsonl", [
        good,
        "{not json",
        {"prompt": "hi", "criterion": "Greets.", "label": True},
        {"prompt": "hi", "response": "yo", "criterion": "Greets.", "label": "maybe"},
        {"prompt": "hi", "response": "yo", "criterion": {"text": "Greets.", "wieght": 2}, "label": False},
        {"prompt": "hi", "response": "yo", "criterion": "Greets.", "label": 1},
        {"prompt": [{"role": "wizard", "content": "x"}], "response": "yo", "criterion": "Greets.", "label": True},
        {"prompt": "hi", "response": "yo", "criterion": "Greets.", "label": True, "tags": "safety"},
        {"id": "dup", "prompt": "hi", "response": "a", "criterion": "Greets.", "label": True},
        {"id": "dup", "prompt": "hi", "response": "b", "criterion": "Greets.", "label": True},
        {"prompt": [{"role": "user", "content": "hey"}], "response": "hi!", "label": "UNMET",
         "criterion": {"id": "greets", "text": "Greets.", "check": {"type": "contains", "any_of": ["hello"]}}},
    ])
    labels, problems = read_labels(path)
    assert [lab.line for lab in labels] == [1, 9, 11]
    assert labels[2].label is False and labels[2].criterion.check is not None and labels[2].criterion.id == "greets"
    found = {(p.line, p.field) for p in problems}
    assert found == {(2, ""), (3, "response"), (4, "label"), (5, "criterion.wieght"), (6, "label"), (7, "prompt"),
                     (8, "tags"), (10, "id")}
    assert all(p.fix for p in problems)
    assert "labels.jsonl:3: response: missing (fix: add `response`" in str(problems[1])


def test_reliability_bins():
    from rubricrl.judge_tools.agreement import Label
    from rubricrl.core.messages import as_conversation
    from rubricrl.rubrics.model import Criterion

    c = Criterion(id="c", text="x")
    labels = [Label(str(i), i, as_conversation("p"), "r", c, y) for i, y in enumerate([True, False, True, True])]
    verdicts = [Verdict(criterion_id="c", status=Status.MET, p_met=p, judge_id="j") for p in (0.05, 0.08, 0.95, 1.0)]
    bins = reliability_bins(labels, verdicts)
    assert len(bins) == 10 and bins[0]["n"] == 2 and bins[0]["met_rate"] == 0.5
    assert bins[0]["mean_p"] == pytest.approx(0.065) and bins[9]["n"] == 2 and bins[9]["met_rate"] == 1.0
    assert bins[5]["n"] == 0 and bins[5]["mean_p"] is None


SORRY = {"id": "sorry", "text": "Says sorry.", "check": {"type": "contains", "any_of": ["sorry"]}, "tags": ["empathy"]}


def test_cli_agree_with_rules(tmp_path):
    rows = [{"id": f"a{i}", "prompt": "I lost my job.", "response": text, "criterion": SORRY, "label": label}
            for i, (text, label) in enumerate([("I'm so sorry.", True), ("Sorry to hear.", True), ("Okay.", False),
                                               ("That is hard.", True), ("Sorry, no.", False), ("Fine.", False)])]
    rows.append({"id": "m", "prompt": "I lost my job.", "response": "Okay.", "criterion": "Is warm.", "label": False})
    rows.append('{"id": "broken", ')
    labels = write_jsonl(tmp_path / "labels.jsonl", rows)
    out = tmp_path / "agree"
    result = runner.invoke(app, ["judge", "agree", "--judge", "rules", "--labels", str(labels), "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "agreement.json").read_text())
    overall = data["overall"]
    # rules: met for the 3 replies containing "sorry"; labels: TP 2, FP 1 ("Sorry, no."), FN 1, TN 2; "Is warm." skipped
    assert (overall["tp"], overall["fp"], overall["fn"], overall["tn"]) == (2, 1, 1, 2)
    assert overall["n_labels"] == 7 and overall["n_skipped"] == 1 and overall["n_errors"] == 0
    # AUC from the rule's p_met (1 or 0): met scores 1, 1, 0 vs unmet 0, 1, 0; each met 1 beats two 0s and ties
    # one 1 (2.5 each), the met 0 ties two 0s (1): (2.5 + 2.5 + 1) / 9 = 2/3
    assert overall["auc"] == pytest.approx(2 / 3, abs=1e-6)
    assert data["by_tag"]["empathy"]["n_labels"] == 6
    assert len(data["problems"]) == 1 and "labels.jsonl:8" in data["problems"][0]
    page = (out / "agreement.html").read_text()
    assert '<img alt="reliability diagram" src="data:image/png;base64,' in page and "Says sorry." in page
    assert len((out / "verdicts.jsonl").read_text().splitlines()) == 7
    assert "balanced F1" in result.output


def test_cli_agree_errors(tmp_path):
    empty = write_jsonl(tmp_path / "bad.jsonl", ["[1]"])
    result = runner.invoke(app, ["judge", "agree", "--judge", "rules", "--labels", str(empty)])
    assert result.exit_code == 2 and "no usable label" in result.output
    result = runner.invoke(app, ["judge", "agree", "--judge", "nonsense", "--labels",
                                 str(write_jsonl(tmp_path / "ok.jsonl", [{"prompt": "p", "response": "r",
                                                                          "criterion": "c", "label": True}]))])
    assert result.exit_code == 2 and "unknown judge spec" in result.output


def test_rules_judge_through_make_judge_metrics(tmp_path):
    labels, _ = read_labels(write_jsonl(tmp_path / "l.jsonl", [
        {"prompt": "p", "response": "so sorry", "criterion": SORRY, "label": True},
        {"prompt": "p", "response": "ok", "criterion": SORRY, "label": False}]))
    verdicts = judge_labels(make_judge("rules"), labels)
    assert [v.status for v in verdicts] == [Status.MET, Status.UNMET]


@pytest.fixture
def esconv_labels(tmp_path):
    """20 labels from ESConv dev: 5 positive and 5 negative turns for each of two strategies."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from esconv import DEFAULT_PATH, STRATEGY_CRITERIA, load_esconv

    if not DEFAULT_PATH.is_file():
        pytest.skip(f"ESConv dev split not found at {DEFAULT_PATH} (set ESCONV_TSV); it is not shipped")
    data = load_esconv()
    rows = []
    for strategy in ("Questions", "Providing Suggestions"):
        pos = [ex for ex in data if ex.target.strategy == strategy][:5]
        neg = [ex for ex in data if ex.target.strategy not in (strategy, None)][:5]
        rows += [{"prompt": ex.last_seeker or "(no message)", "response": ex.target.text,
                  "criterion": STRATEGY_CRITERIA[strategy], "label": ex in pos, "tags": [strategy]} for ex in pos + neg]
    return write_jsonl(tmp_path / "esconv_labels.jsonl", rows)


@pytest.mark.slow
def test_cli_agree_embedded_model_on_esconv(esconv_labels, tmp_path):
    out = tmp_path / "agree"
    result = runner.invoke(app, ["judge", "agree", "--judge", "local", "--labels", str(esconv_labels), "--out",
                                 str(out), "--cache-path", str(tmp_path / "cache.sqlite")])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "agreement.json").read_text())
    overall = data["overall"]
    assert overall["n_labels"] == 20 and overall["n_decided"] + overall["n_errors"] == 20
    assert overall["n_met_labels"] == 10 and len(data["by_criterion"]) == 2
    assert overall["auc"] is not None and 0.0 <= overall["auc"] <= 1.0
    assert sum(b["n"] for b in data["reliability"]) == overall["n_decided"]
    assert "data:image/png;base64," in (out / "agreement.html").read_text()
