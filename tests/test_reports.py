"""The HTML reports (rubricrl.reports): one Jinja2 environment that is strict (a missing variable
raises) and autoescaped (a prompt or a response is text, never markup) for every report kind, the
training report's held-out replies before and after training side by side, and the eval report's
coverage of the model-judged criteria. Every page is built from hand-made files and records: no
model, no judge, no server."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from jinja2 import StrictUndefined, UndefinedError

from rubricrl.core.verdicts import Status
from rubricrl.dialogue.rollout import Transcript, Turn
from rubricrl.dialogue.summary import summarize_simulation
from rubricrl.evaluation.compare import compare_dirs
from rubricrl.evaluation.run import GenerationSettings, JudgingSettings, RunFile
from rubricrl.judge_tools.agreement import agreement, read_labels
from rubricrl.reports import training
from rubricrl.reports.agreement import write_report as write_agreement_report
from rubricrl.reports.eval import write_eval_report
from rubricrl.scoring.records import EvalRecord, EvalVerdict, record_line
from rubricrl.scoring.summary import RULES_JUDGE_ID

PAYLOAD = "<script>alert(1)</script> & co"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co"
MODEL_JUDGE = "local:test"
SRC = Path(__file__).resolve().parents[1] / "src" / "rubricrl"


class _Page(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.tags: list[str] = []
        self.data: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.data.append(data)

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.data).split())


def assert_escaped(page: str) -> None:
    """The payload is shown as text: escaped in the source, never a tag; one <style>, no <script>."""
    assert ESCAPED in page
    parsed = _Page(page)
    assert "script" not in parsed.tags and parsed.tags.count("style") == 1
    assert PAYLOAD in parsed.text


# ---------------------------------------------------------------- hand-made files


def verdict(cid: str, status: str, *, judge: str = MODEL_JUDGE, p: float | None = None, text: str = "",
            evidence: str = "", reason: str = "", weight: float = 1.0) -> EvalVerdict:
    return EvalVerdict(criterion_id=cid, status=Status(status), p_met=p, evidence=evidence, reason=reason,
                       judge_id=judge, weight=weight, kind="principle", text=text or f"criterion {cid}")


def eval_record(row_id: str, line: int, verdicts: list[EvalVerdict], score: float, *, prompt: str = "a prompt",
                response: str = "a response") -> EvalRecord:
    decided = [v for v in verdicts if v.decided]
    return EvalRecord(key=f"{row_id}#0", id=row_id, line=line, status="scored", score=score, raw_score=score,
                      gated=False, failed_hard_rules=(), coverage=len(decided) / len(verdicts),
                      n_error=sum(v.status is Status.ERROR for v in verdicts),
                      n_skipped=sum(v.status is Status.SKIPPED for v in verdicts), tag_scores={"axis:x": score},
                      rubric_hash="h", rubric_source="file", verdicts=verdicts, sample=0, example_tags=("theme:y",),
                      prompt=prompt, response=response, judge="rules+local")


def eval_dir(path: Path, records: list[EvalRecord], policy: str = "stub") -> Path:
    path.mkdir(parents=True)
    run = RunFile(created="2026-01-01T00:00:00+00:00", data_path="rows.jsonl",
                  generation=GenerationSettings(policy=policy, data_sha256="0" * 64, samples=1, max_tokens=8,
                                                temperature=0.0, seed=0),
                  judging=JudgingSettings(judge="rules+local", rubric_path="rubric.yaml", rubric_hash="h"),
                  judging_complete=True)
    (path / "run.json").write_text(run.model_dump_json())
    (path / "results.jsonl").write_text("".join(record_line(r) + "\n" for r in records))
    return path


def coverage_records(model_statuses: list[list[str]], **text) -> list[EvalRecord]:
    """One unit per list: a rule verdict (met) and one model-judged verdict per status."""
    records = []
    for i, statuses in enumerate(model_statuses):
        verdicts = [verdict("rule", "met", judge=RULES_JUDGE_ID, p=1.0)]
        verdicts += [verdict(f"m{j}", s, p=0.8 if s == "met" else 0.3 if s == "unmet" else None,
                             reason="timeout: no answer" if s == "error" else "")
                     for j, s in enumerate(statuses)]
        records.append(eval_record(f"r{i}", i + 1, verdicts, 0.5 + 0.1 * i, **text))
    return records


def heldout_record(row_id: str, side: str, score: float | None, status: str, p: float) -> dict:
    """A line of eval_before.jsonl / eval_after.jsonl as train/evaluate.py writes it."""
    return {"id": row_id, "prompt": f"prompt of {row_id}", "completion": f"{side} reply to {row_id}", "score": score,
            "n_error": 0, "coverage": 1.0,
            "verdicts": [{"criterion_id": "warmth", "status": status, "p_met": p, "evidence": f"{side} evidence",
                          "reason": "", "judge_id": MODEL_JUDGE, "tokens": 0, "cached": False}]}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A training run directory written by hand: 9 held-out prompts (more than the old report's 8),
    the after file in another order, one id evaluated only before."""
    monkeypatch.setattr(training, "tactic_shares", lambda before, after: {"error": "not in this test",
                                                                          "taxonomy": "", "rows": []})
    path = tmp_path / "run"
    path.mkdir()
    write_jsonl(path / "metrics.jsonl", [{"step": 1, "loss": 0.1, "reward": 0.4, "frac_reward_zero_std": 0.5},
                                         {"step": 2, "loss": 0.1, "reward": 0.6, "frac_reward_zero_std": 0.25}])
    estimate = {"mean": 0.25, "std": 0.1, "ci_low": 0.1, "ci_high": 0.4, "n": 9}
    (path / "summary.json").write_text(json.dumps({
        "model": "tiny", "steps": 2, "seconds": 1.5, "reward_totals": {"completions": 8},
        "before": {"estimate": estimate, "errors": 0, "rows": 9},
        "after": {"estimate": {**estimate, "mean": 0.75}, "errors": 0, "rows": 8}}))
    ids = [f"h{i}" for i in range(1, 10)]
    write_jsonl(path / "eval_before.jsonl", [heldout_record(i, "before", 0.25, "unmet", 0.2) for i in ids])
    write_jsonl(path / "eval_after.jsonl", [heldout_record(i, "after", 0.75, "met", 0.9) for i in reversed(ids[:-1])])
    write_jsonl(path / "samples.jsonl", [{"step": 2, "prompt": "p", "completion": "c", "reward": 0.5, "note": "",
                                          "verdicts": []}])
    return path


# ---------------------------------------------------------------- (a) the environment


def test_the_environment_is_strict_and_autoescaped():
    from rubricrl.reports import render as render_module

    assert render_module.ENV.undefined is StrictUndefined and render_module.ENV.autoescape is True
    with pytest.raises(UndefinedError):
        render_module.render("compare.html.j2")
    with pytest.raises(UndefinedError, match="examples"):  # every variable but one
        render_module.render("simulation.html.j2", title="t", rows=[], trajectories=None, per_persona={})
    with pytest.raises(UndefinedError):
        render_module.ENV.from_string("{{ nope }}").render()
    assert "&lt;b&gt;" in render_module.ENV.from_string("{{ x }}").render(x="<b>")


def test_reports_build_no_html_by_hand():
    """Every page comes from a template: no hand escaping, no markup strings, no private plot helper,
    and matplotlib is set up in one place (reports/figures.py)."""
    modules = sorted((SRC / "reports").glob("*.py")) + [SRC / "dialogue" / "summary.py",
                                                        SRC / "evaluation" / "compare.py"]
    for path in modules:
        source = path.read_text(encoding="utf-8")
        for banned in ("html.escape", "escape(", "&lt;", "<table", "<tr", "<td", "<h2", "import html\n"):
            assert banned not in source, f"{path.relative_to(SRC)}: {banned}"
        assert not re.search(r"\b_png\b", source), f"{path.relative_to(SRC)}: a private _png helper"
        if path.name != "figures.py":
            assert "matplotlib.pyplot" not in source and "matplotlib.use" not in source, path
    templates = sorted((SRC / "reports" / "templates").glob("*.html.j2"))
    assert {t.name for t in templates} >= {"base.html.j2", "training.html.j2", "eval.html.j2", "compare.html.j2",
                                           "agreement.html.j2", "simulation.html.j2"}
    css = [t.name for t in templates if "<style>" in t.read_text(encoding="utf-8")]
    assert css == ["base.html.j2"]


# ---------------------------------------------------------------- (b) autoescape in every report


def test_eval_report_escapes_prompts_and_responses(tmp_path):
    records = coverage_records([["met"], ["unmet"]], prompt=PAYLOAD, response=PAYLOAD)
    page = write_eval_report(eval_dir(tmp_path / "ev", records)).read_text()
    assert_escaped(page)
    assert page.count(ESCAPED) == 4  # prompt and response of both (worst) examples


def test_comparison_page_escapes_prompts_and_criteria(tmp_path):
    from rubricrl.reports.compare import comparison_html

    a = [eval_record("r1", 1, [verdict("c1", "unmet", text=PAYLOAD)], 0.0, prompt=PAYLOAD)]
    b = [eval_record("r1", 1, [verdict("c1", "met", text=PAYLOAD)], 1.0, prompt=PAYLOAD)]
    c = compare_dirs(eval_dir(tmp_path / "a", a), eval_dir(tmp_path / "b", b, policy=PAYLOAD))
    page = comparison_html(c)
    assert_escaped(page)
    assert "B - A = +1.000" in _Page(page).text and f"policy: A 'stub', B '{PAYLOAD}'" in _Page(page).text


def test_agreement_page_escapes_criteria_and_problems(tmp_path):
    labels_file = tmp_path / "labels.jsonl"
    write_jsonl(labels_file, [{"prompt": "p", "response": "r", "criterion": PAYLOAD, "label": True, "tags": [PAYLOAD]},
                              {"prompt": "p", "response": "r2", "criterion": PAYLOAD, "label": False}])
    labels, problems = read_labels(labels_file)
    from rubricrl.core.verdicts import Verdict

    verdicts = [Verdict(criterion_id="c", status=Status.MET, p_met=0.9, judge_id=PAYLOAD),
                Verdict(criterion_id="c", status=Status.UNMET, p_met=0.2, judge_id=PAYLOAD)]
    result = agreement(labels, verdicts, judge_id=PAYLOAD, labels_file=str(labels_file), problems=problems)
    page = write_agreement_report(result, tmp_path / "out" / "agreement.html").read_text()
    assert_escaped(page)
    assert '<img alt="reliability diagram" src="data:image/png;base64,' in page


def test_simulation_report_escapes_transcripts(tmp_path):
    from rubricrl.reports.simulation import write_simulation_report

    turns = [Turn(role="user", text=PAYLOAD, emotion=40), Turn(role="supporter", text=PAYLOAD),
             Turn(role="user", text="ok", emotion=50, change=10, raw_change=10, reasons=PAYLOAD)]
    t = Transcript(trajectory_id="t1", persona_id=PAYLOAD, group="g", seed=0, start_emotion=40, turns=turns,
                   final_emotion=50, end_reason="max_turns")
    page = write_simulation_report(tmp_path, [t], summarize_simulation([t])).read_text()
    assert_escaped(page)
    text = _Page(page).text
    assert "+10 -> 50" in text and "50.0 (95% CI 50.0-50.0, n=1)" in text and "data:image/png;base64," in page


def test_training_report_escapes_prompts_and_replies(run_dir):
    for name in ("eval_before.jsonl", "eval_after.jsonl"):
        rows = [json.loads(line) for line in (run_dir / name).read_text().splitlines()]
        write_jsonl(run_dir / name, [{**r, "prompt": PAYLOAD, "completion": PAYLOAD} for r in rows])
    write_jsonl(run_dir / "samples.jsonl", [{"step": 2, "prompt": PAYLOAD, "completion": PAYLOAD, "reward": 0.5,
                                             "note": PAYLOAD, "verdicts": []}])
    page = training.write_report(run_dir).read_text()
    assert_escaped(page)
    assert _Page(page).tags.count("img") == 4


# ---------------------------------------------------------------- (c) held-out replies before and after


def heldout_blocks(page: str) -> dict[str, str]:
    """The held-out section's block per id (its <h3> names the id)."""
    section = re.search(r'<section id="heldout">(.*?)</section>', page, flags=re.DOTALL)
    assert section, "no held-out section"
    blocks = section.group(1).split('<div class="heldout"')[1:]
    return {re.search(r"<h3>(.*?):", b).group(1): b for b in blocks}


def test_training_report_shows_each_heldout_reply_before_and_after(run_dir):
    page = training.write_report(run_dir).read_text()
    blocks = heldout_blocks(page)
    assert list(blocks) == [f"h{i}" for i in range(1, 10)]  # every id, in the held-out order
    for row_id, block in blocks.items():
        text = _Page(block.split(">", 1)[1]).text
        assert f"prompt of {row_id}" in text
        assert re.search(rf"<h3>{row_id}: before score 0.250, after (score 0.750|not evaluated)</h3>", block)
        before = text.index(f"before reply to {row_id}")
        assert "unmet p=0.20" in text and "before evidence" in text and "score 0.250" in text
        if row_id == "h9":  # evaluated only before training
            assert "after not evaluated" in text and "after reply" not in text
            continue
        after = text.index(f"after reply to {row_id}")  # matched by id, not by line
        assert before < after
        assert "met p=0.90" in text and "after evidence" in text and "score 0.750" in text
        row = _Page(re.search(r"<tr><td>warmth</td>.*?</tr>", block).group(0)).text
        assert row == "warmth unmet p=0.20 before evidence met p=0.90 after evidence"


# ---------------------------------------------------------------- (d) model-judged coverage in the eval headline


def headline(page: str) -> tuple[str, list[str]]:
    """The text of the eval report's headline and the texts of its warnings."""
    block = re.search(r'<div id="headline">(.*?)</div>', page, flags=re.DOTALL).group(1)
    warnings = re.findall(r'<p class="warning">(.*?)</p>', block, flags=re.DOTALL)
    return _Page(block).text, [_Page(w).text for w in warnings]


def test_eval_headline_shows_model_judged_coverage(tmp_path):
    # 3 units x 2 model-judged criteria = 6 verdicts: 4 decided, 2 judge errors (rule verdicts not counted)
    records = coverage_records([["met", "error"], ["unmet", "met"], ["error", "met"]])
    page = write_eval_report(eval_dir(tmp_path / "partial", records)).read_text()
    text, warnings = headline(page)
    assert "model-judged verdicts: 4 of 6 decided (2 errors); judge error rate 33.3%" in text
    assert len(warnings) == 1 and "only 4 of 6 model-judged verdicts were decided (2 judge errors, 0 skipped)" in \
        warnings[0]

    page = write_eval_report(eval_dir(tmp_path / "full", coverage_records([["met", "unmet"]]))).read_text()
    text, warnings = headline(page)
    assert "model-judged verdicts: 2 of 2 decided; judge error rate 0.0%" in text and warnings == []

    page = write_eval_report(eval_dir(tmp_path / "none", coverage_records([["skipped"], ["skipped"]]))).read_text()
    text, warnings = headline(page)
    assert "model-judged verdicts: 0 of 2 decided (2 skipped)" in text
    assert len(warnings) == 1 and "rule criteria alone" in warnings[0]

    page = write_eval_report(eval_dir(tmp_path / "rules", coverage_records([[], []]))).read_text()
    text, warnings = headline(page)
    assert "model-judged verdicts: none" in text and warnings == []
