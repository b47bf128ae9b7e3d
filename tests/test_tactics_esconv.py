"""Tactic files: ESConv's TSV read as distributed (fit examples and rebuilt dialogues), label aliases,
located errors for unknown labels and unsupported files, and classify embedding all turns in batches."""

import json
import math
import re
import shutil
import sys
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rubricrl.cli import app
from rubricrl.core.problems import RubricError
from rubricrl.tactics.esconv import ESCONV_FORMAT
from rubricrl.tactics.labeling import (CONVERSATIONS_FORMAT, EXAMPLES_FORMAT, TAXONOMY_FORMAT, fit_examples,
                                       label_conversations, read_conversations)
from rubricrl.tactics.taxonomy import Taxonomy, load_taxonomy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from esconv import DEFAULT_PATH as ESCONV  # noqa: E402  (../shared beside the checkout, or $ESCONV_TSV)

MINI = Path(__file__).parent / "data" / "esconv_mini.tsv"  # hand-written, ESConv's format (CRLF, " EOS ")
KNOWN = ("the esconv8 tactics are 'Question', 'Restatement or Paraphrasing', 'Reflection of feelings', "
         "'Self-disclosure', 'Affirmation and Reassurance', 'Providing Suggestions', 'Information', 'Others' "
         "(also accepted: 'Questions' for 'Question', 'Other' for 'Others')")


def test_esconv_tsv_read_as_fit_examples():
    examples, names, taxonomy = fit_examples(MINI)
    assert taxonomy == "esconv8" and names == load_taxonomy("esconv8").names  # all 8 used, taxonomy order
    assert len(examples) == 8  # one per line: the line's last segment
    first, reflection = examples[0], examples[2]
    assert first.text == "Hi there, thanks for reaching out." and first.tactics == {"Others"}  # "[Other]"
    assert first.context == "Hi, I have been feeling really low since I lost my job." and first.previous == ""
    assert reflection.text == "It sounds like you are scared about what comes next."
    assert reflection.tactics == {"Reflection of feelings"}
    assert reflection.context == "About two weeks ago. I keep thinking I will never find another one."
    assert reflection.previous == "How long ago did that happen?"
    assert examples[1].tactics == {"Question"}  # "[Questions]"
    # a line whose window has two seeker turns: the last one is the context
    assert examples[4].context == "That helps a bit to hear." and examples[4].tactics == {"Providing Suggestions"}


def test_esconv_tsv_read_as_conversations_by_extension_and_by_content(tmp_path):
    rows = read_conversations(MINI)
    assert [r["id"] for r in rows] == ["line-1", "line-6"]  # a dialogue is named by its first line
    first, second = (r["messages"] for r in rows)
    assert [(m["role"], m.get("gold_tactics")) for m in first] == [
        ("user", None), ("assistant", ["Others"]), ("assistant", ["Question"]), ("user", None),
        ("assistant", ["Reflection of feelings"]), ("assistant", ["Self-disclosure"]), ("user", None),
        ("assistant", ["Providing Suggestions"])]
    assert first[6]["content"] == "That helps a bit to hear."
    # the supporter's opener (turn 0) is never a line's target but is kept from the context
    assert [(m["role"], m.get("gold_tactics")) for m in second] == [
        ("assistant", ["Question"]), ("user", None), ("assistant", ["Restatement or Paraphrasing"]), ("user", None),
        ("assistant", ["Information"]), ("assistant", ["Affirmation and Reassurance"])]
    assert second[0]["content"] == "Hello, what would you like to talk about tonight?"
    unnamed = tmp_path / "dialogues"  # no extension: told by the first line
    shutil.copy(MINI, unnamed)
    assert read_conversations(unnamed) == rows


def test_label_aliases_resolve_to_the_taxonomy_names(tmp_path):
    esconv8 = load_taxonomy("esconv8")
    assert esconv8.resolve("Questions") == "Question" and esconv8.resolve("Other") == "Others"
    assert esconv8.resolve("question") == "Question" and esconv8.resolve(" self-disclosure ") == "Self-disclosure"
    assert esconv8.resolve("Reflection  of feelings") == "Reflection of feelings"
    assert esconv8.resolve("Venting") is None
    with pytest.raises(ValueError, match="unique ignoring case"):
        Taxonomy.model_validate({"name": "t", "tactics": [{"name": "A", "aliases": ["b"]}, {"name": "B"}]})
    # labeled JSONL is mapped when a taxonomy is named, kept as written otherwise
    labeled = tmp_path / "labels.jsonl"
    labeled.write_text(json.dumps({"text": "How are you?", "tactic": "Questions"}) + "\n"
                       + json.dumps({"text": "Hello.", "tactics": ["Other"]}) + "\n", encoding="utf-8")
    examples, names, taxonomy = fit_examples(labeled, "esconv8")
    assert [e.tactics for e in examples] == [{"Question"}, {"Others"}]
    assert names == ["Question", "Others"] and taxonomy == "esconv8"
    examples, names, taxonomy = fit_examples(labeled)
    assert names == ["Questions", "Other"] and taxonomy == "labels"


def test_unknown_label_names_the_label_line_and_known_names(tmp_path):
    path = tmp_path / "esconv.tsv"
    lines = MINI.read_bytes().decode("utf-8").split("\r\n")
    lines[1] = lines[1].replace("[Questions]", "[Venting]")
    path.write_bytes("\r\n".join(lines).encode("utf-8"))
    with pytest.raises(RubricError) as info:
        fit_examples(path)
    assert str(info.value) == (f"{path}:2: strategy: unknown tactic 'Venting'; {KNOWN} "
                               "(fix: use one of those names, or give a taxonomy that has this tactic)")
    result = CliRunner().invoke(app, ["tactics", "fit", "--data", str(path), "--out", str(tmp_path / "clf")])
    assert result.exit_code == 2 and f"{path}:2: strategy: unknown tactic 'Venting'; {KNOWN}" in result.output
    labeled = tmp_path / "labels.jsonl"
    labeled.write_text(json.dumps({"text": "Hi.", "tactic": "Others"}) + "\n"
                       + json.dumps({"text": "Hm.", "tactic": "Venting"}) + "\n", encoding="utf-8")
    with pytest.raises(RubricError) as info:
        fit_examples(labeled, "esconv8")
    assert str(info.value).startswith(f"{labeled}:2: tactic: unknown tactic 'Venting'; {KNOWN}")


def test_unsupported_files_name_the_file_line_and_expected_formats(tmp_path):
    runner = CliRunner()
    notes = tmp_path / "notes.txt"
    notes.write_text("\n\nThe supporter asked two questions.\n", encoding="utf-8")
    classify = ["tactics", "classify", "--out", str(tmp_path / "o.jsonl"), "--in"]
    result = runner.invoke(app, classify + [str(notes)])
    assert result.exit_code == 2
    assert (f"{notes}:3: not in a format read here (judged by this first line, as the name has no known extension) "
            f"(fix: give {CONVERSATIONS_FORMAT}; or {ESCONV_FORMAT})") in result.output
    result = runner.invoke(app, ["tactics", "fit", "--data", str(notes), "--out", str(tmp_path / "clf")])
    assert result.exit_code == 2
    assert f"{notes}:3: not in a format read here" in result.output
    assert f"(fix: give {EXAMPLES_FORMAT}; or {ESCONV_FORMAT}; or {TAXONOMY_FORMAT})" in result.output

    # a .tsv is read as ESConv, and a line that is not ESConv is named with the format expected
    wrong = tmp_path / "turns.tsv"
    wrong.write_text("text\ttactic\nHow are you?\tQuestion\n", encoding="utf-8")
    with pytest.raises(RubricError) as info:
        read_conversations(wrong)
    assert str(info.value) == (f"{wrong}:1: not an ESConv line (read as ESConv because the name ends in .tsv) "
                               f"(fix: expected {ESCONV_FORMAT})")
    # JSON that does not parse says which formats would have been read
    broken = tmp_path / "c.jsonl"
    broken.write_text('{"messages": [}\n', encoding="utf-8")
    result = runner.invoke(app, classify + [str(broken)])
    assert result.exit_code == 2 and f"{broken}:1: malformed JSON" in result.output
    assert f"(fix: give {CONVERSATIONS_FORMAT}; or {ESCONV_FORMAT})" in result.output


def test_real_esconv_file_read_directly():
    if not ESCONV.is_file():
        pytest.skip(f"ESConv data not found at {ESCONV} (shared/ beside the checkout, or $ESCONV_TSV)")
    examples, names, _ = fit_examples(ESCONV)
    # independent count: the bracketed strategy of each line's last segment, ESConv's spelling mapped by hand
    raw = Counter()
    with open(ESCONV, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                raw[re.match(r"\S+ 1 \d+ \[([^\]]+)\]", line.rstrip("\r\n").split(" EOS ")[-1].strip()).group(1)] += 1
    by_hand = {"Questions": "Question", "Other": "Others"}
    assert Counter(next(iter(e.tactics)) for e in examples) == {by_hand.get(k, k): v for k, v in raw.items()}
    assert len(examples) == sum(raw.values()) and set(names) == set(load_taxonomy("esconv8").names)
    rows = read_conversations(ESCONV)
    contents = [[m["content"] for m in row["messages"]] for row in rows]
    for example in examples[::50]:  # each line's turns appear, in order, in the dialogue holding its target
        holder = next(c for c in contents if example.text in c)
        after_context = holder[holder.index(example.context):] if example.context else holder
        assert example.text in after_context
    turns = sum(m["role"] == "assistant" for row in rows for m in row["messages"])
    assert turns >= len(examples) and all(m.get("gold_tactics") for row in rows for m in row["messages"]
                                          if m["role"] == "assistant")


class CountingEncoder:
    """Stands in for the sentence encoder: deterministic unit vectors, every call recorded."""

    dim = 8

    def __init__(self):
        self.calls: list[tuple[int, int]] = []  # (texts, batch_size)

    def encode(self, texts, batch_size=32, **_):
        self.calls.append((len(texts), batch_size))
        rng = [np.random.default_rng(zlib.crc32(t.encode())).normal(size=self.dim) for t in texts]
        return np.array([v / np.linalg.norm(v) for v in rng], dtype=np.float32)


@pytest.fixture
def counting_classifier(monkeypatch, request):
    import rubricrl.llm.encoder as encoder_module
    from rubricrl.tactics.classifier import TacticClassifier

    fake = CountingEncoder()
    monkeypatch.setattr(encoder_module, "load_encoder", lambda name=None: fake)
    examples, names, taxonomy = fit_examples(MINI)
    name = f"counting-encoder-{request.node.name}"  # its own key in the process-wide embedding cache
    model = TacticClassifier.fit(examples, names, taxonomy=taxonomy, encoder=name)
    model.encoder = name + "/classify"  # same vectors, nothing cached yet: classify starts cold
    fake.calls.clear()
    return model, fake


def test_classify_embeds_all_turns_in_batches_not_once_per_turn(tmp_path, counting_classifier):
    model, fake = counting_classifier
    conversations = tmp_path / "c.jsonl"
    rows = [{"id": f"c{i}", "messages": [
        {"role": "user", "content": f"Person {i}: I cannot sleep."}, {"role": "assistant", "content": f"Since when, {i}?"},
        {"role": "user", "content": f"Person {i}: a month."}, {"role": "assistant", "content": f"That is long, {i}."},
        {"role": "assistant", "content": f"Have you seen a doctor, {i}?"}]} for i in range(30)]
    conversations.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert label_conversations(conversations, tmp_path / "l.jsonl", model) == (30, 90)
    # distinct texts: 90 turns, 60 person messages (contexts), "" (no previous turn); previous turns are turns
    assert fake.calls == [(151, 64)]  # one encoder call over everything, which the encoder runs 64 at a time
    labeled = [json.loads(line) for line in (tmp_path / "l.jsonl").read_text(encoding="utf-8").splitlines()]
    assistant = [m for r in labeled for m in r["messages"] if m["role"] == "assistant"]
    assert len(assistant) == 90 and all(m["tactics"] and set(m["tactic_probs"]) == set(model.tactics)
                                        for m in assistant)
    # the same probabilities as classifying each conversation on its own (the old path)
    from rubricrl.tactics.novelty import supporter_turns

    alone = model.probabilities(supporter_turns(rows[7]["messages"]))
    batched = [[m["tactic_probs"][t] for t in model.tactics] for m in labeled[7]["messages"] if m["role"] == "assistant"]
    assert np.allclose(alone, batched, atol=1e-4)


def test_classify_reports_progress_in_chunks(tmp_path, counting_classifier, monkeypatch):
    import rubricrl.tactics.classifier as classifier_module

    model, fake = counting_classifier
    monkeypatch.setattr(classifier_module, "PROGRESS_CHUNK", 5)
    seen = []
    conversations, turns = label_conversations(MINI, tmp_path / "l.jsonl", model,
                                               progress=lambda done, total: seen.append((done, total)))
    assert (conversations, turns) == (2, 9)
    distinct = seen[-1][1]
    assert [done for done, _ in seen] == [min(k * 5, distinct) for k in range(1, math.ceil(distinct / 5) + 1)]
    assert len(fake.calls) == len(seen) and all(n <= 5 for n, _ in fake.calls)  # chunks, not one call per text
    assert sum(n for n, _ in fake.calls) == distinct  # each distinct text once


def test_classify_cli_reads_esconv_tsv(tmp_path, counting_classifier):
    model, fake = counting_classifier
    model.save(tmp_path / "clf")
    out = tmp_path / "labeled.jsonl"
    result = CliRunner().invoke(app, ["tactics", "classify", "--in", str(MINI), "--out", str(out),
                                      "--classifier", str(tmp_path / "clf")])
    assert result.exit_code == 0, result.output
    assert f"labeled 9 supporter turns of 2 conversations into {out} (esconv8 tactics)" in result.output
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assistant = [m for r in rows for m in r["messages"] if m["role"] == "assistant"]
    assert [m["gold_tactics"] for m in assistant][:2] == [["Others"], ["Question"]]
    assert all(m["tactics"] for m in assistant)
    assert len(fake.calls) == 1  # 9 turns, one encoder call
    result = CliRunner().invoke(app, ["tactics", "stickiness", "--in", str(out)])
    assert result.exit_code == 0 and "over 7 consecutive supporter-turn pairs" in result.output


def test_classifier_fitted_without_contexts_does_not_embed_them(tmp_path, monkeypatch):
    import rubricrl.llm.encoder as encoder_module
    from rubricrl.tactics.classifier import TacticClassifier, TurnExample

    fake = CountingEncoder()
    monkeypatch.setattr(encoder_module, "load_encoder", lambda name=None: fake)
    examples, names, _ = fit_examples(MINI)
    bare = [TurnExample(e.text, e.tactics) for e in examples]  # like a taxonomy's example turns
    model = TacticClassifier.fit(bare, names, encoder="counting-encoder-no-context")
    assert model.inputs == () and TacticClassifier.fit(examples, names, encoder="counting-encoder-no-context"
                                                       ).inputs == ("context", "previous")
    model.save(tmp_path / "clf")
    meta = json.loads((tmp_path / "clf" / "classifier.json").read_text(encoding="utf-8"))
    assert meta["inputs"] == [] and TacticClassifier.load(tmp_path / "clf").inputs == ()
    del meta["inputs"]  # a classifier saved before `inputs` existed used both
    (tmp_path / "clf" / "classifier.json").write_text(json.dumps(meta), encoding="utf-8")
    assert TacticClassifier.load(tmp_path / "clf").inputs == ("context", "previous")

    model.encoder = "counting-encoder-no-context/classify"
    fake.calls.clear()
    turns = [TurnExample("How are you?", frozenset(), "I feel awful today.", "Hello."),
             TurnExample("How are you?", frozenset(), "Something else entirely.", "")]
    probs = model.probabilities(turns)
    assert np.allclose(probs[0], probs[1])  # it never learned from contexts: they do not move it
    assert fake.calls == [(2, 64)]  # "How are you?" and "" only: no person message embedded
    assert TacticClassifier.load().inputs == ()  # the bundled one is fitted on example turns alone
