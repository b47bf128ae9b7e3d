"""Build the bundled training data of the default reward judge from what was labelled by reading.

    python bench/gold/export_training.py

Reads
- the gold set's items that answer a TRAIN-split prompt (bench/gold/items.jsonl, labels.jsonl): the
  judges are cross-fitted, each on one half of the training prompts, and bench/judge_on_policy.py
  measures each judge only on gold items whose prompt it was not fitted on (the other half, and every
  held-out prompt);
- `bench/gold/onpolicy_items.jsonl` + `onpolicy_labels.jsonl`, once labelled: 258 further replies of
  the embedded policy to the TRAIN-split prompts (temperature 0.5, 0.7 with top_p 0.9, and 1.0; none of
  them is a gold item). Their labels are not written yet; the bundled judges do not use them;
- `src/rubricrl/data/exemplars/labels.jsonl`: rubricrl's hand-written replies, labelled per criterion;
- `src/rubricrl/data/exemplars/deflections.txt`: hand-written deflections, one per line.

Writes
- `gate_examples.jsonl` (judges/gate.py): {prompt, reply, coherent, deflects, source, half}: the
  policy's replies, and the hand-written deflections with `coherent: null` (they teach only the
  deflection model; hand-written replies taught the coherence model "hand-written vs. policy style",
  so none is used for it);
- `criteria_examples.jsonl` (judges/exemplar.py, `rubricrl judge fit --labels`): one row per
  (reply, criterion) in the labels.jsonl format, with the prompt as `context`: the on-policy replies and
  the hand-written ones.

Every row carries `half` (`a` or `b`). A reply to a bundled prompt (gold or on-policy) goes to the half a
hash of its prompt decides, so the two halves share no bundled prompt; hand-written examples alternate
between the halves within each (criterion, label): the default reward judge is fitted on half `a`, the independent evaluation judge
of `rubricrl train` on half `b` (bench/gold/fit_bundled.py, docs/training.md).

`no-rushed-advice` was labelled as written before it became the pitfall `rushes-to-advice` ("jumps
straight to a list of advice before acknowledging the person"), the same judgement stated the other
way round; its reading is carried over negated.

Only labels that a reader decided are copied; nothing here decides a label.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "src" / "rubricrl" / "data" / "exemplars"
GOLD = Path(__file__).resolve().parent
SHARED = ("coherent", "deflects")


def half(prompt: str) -> str:
    return "ab"[hashlib.sha256(" ".join(prompt.split()).encode("utf-8")).digest()[0] % 2]


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").split("\n") if line.strip()]


def main() -> None:
    items, labels = {}, {}
    if (GOLD / "onpolicy_labels.jsonl").is_file():
        items = {r["id"]: r for r in read(GOLD / "onpolicy_items.jsonl")}
        labels = {r["id"]: r["labels"] for r in read(GOLD / "onpolicy_labels.jsonl")}
        missing = sorted(set(items) - set(labels))
        if missing:
            raise SystemExit(f"{len(missing)} on-policy items have no labels, e.g. {missing[:5]}")
    # gold items answering TRAIN-split prompts (cross-fitting, see the module docstring)
    train_prompts = {r["prompt"] for r in read(DATA.parent / "prompts" / "emotional_support.jsonl")
                     if r["split"] == "train"}
    gold_labels = {r["id"]: r["labels"] for r in read(GOLD / "labels.jsonl")}
    for item in read(GOLD / "items.jsonl"):
        if item["prompt"] in train_prompts:
            items[item["id"]], labels[item["id"]] = item, gold_labels[item["id"]]
    gate, criteria = [], []
    for item_id, item in items.items():
        row = labels[item_id]
        gate.append({"prompt": item["prompt"], "reply": item["reply"], "coherent": row["coherent"],
                     "deflects": row["deflects"], "source": "gold" if item_id.startswith("g") else "onpolicy",
                     "half": half(item["prompt"])})
        for cid, value in row.items():
            if cid == "no-rushed-advice":
                cid, value = "rushes-to-advice", not value
            if cid not in SHARED:
                criteria.append({"rubric": item["rubric"], "criterion_id": cid, "context": item["prompt"],
                                 "response": item["reply"], "label": value,
                                 "source": "gold" if item_id.startswith("g") else "onpolicy", "item": item_id,
                                 "half": half(item["prompt"])})
    # hand-written examples answer contexts written with them (none is a bundled prompt): they alternate
    # between the halves within each (criterion, label), so both halves can fit every criterion
    turn: dict = {}
    for row in read(DATA / "labels.jsonl"):
        group = (row["criterion_id"], row["label"])
        turn[group] = turn.get(group, -1) + 1
        row_half = "ab"[turn[group] % 2]
        criteria.append({**row, "source": "handwritten", "half": row_half})
    # each hand-written deflection answers a training prompt of its own half, so the halves stay disjoint
    by_half = {h: sorted({r["prompt"] for r in items.values() if half(r["prompt"]) == h}) for h in "ab"}
    for k, line in enumerate(l for l in (DATA / "deflections.txt").read_text("utf-8").split("\n") if l.strip()):
        prompts = by_half["ab"[k % 2]]
        gate.append({"prompt": prompts[(7 * k) % len(prompts)], "reply": line.strip(), "coherent": None,
                     "deflects": True, "source": "handwritten-deflection", "half": "ab"[k % 2]})
    for name, rows in (("gate_examples.jsonl", gate), ("criteria_examples.jsonl", criteria)):
        (DATA / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
        print(f"{len(rows)} rows -> {DATA / name}")


if __name__ == "__main__":
    main()
