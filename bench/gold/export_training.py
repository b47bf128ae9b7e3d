"""Build the bundled training data of the default reward judge from what was labelled by reading.

    python bench/gold/export_training.py

Reads
- `src/rubricrl/data/exemplars/onpolicy_items.jsonl` + `onpolicy_labels.jsonl`: the embedded policy's
  own replies to the TRAIN-split prompts (temperature 0.5, 0.7 with top_p 0.9, and 1.0; none of them is
  in the gold set, whose items are the measurement), labelled by reading with bench/gold/GUIDE.md;
- `src/rubricrl/data/exemplars/labels.jsonl`: rubricrl's hand-written replies, labelled per criterion;
- `src/rubricrl/data/exemplars/deflections.txt`: hand-written deflections, one per line.

Writes
- `gate_examples.jsonl` (judges/gate.py): {prompt, reply, coherent, deflects?, source}. A hand-written
  reply is coherent by authorship; only the on-policy replies and the hand-written deflections carry a
  `deflects` label (a hand-written one-line referral may itself be a deflection, so the others carry
  none);
- `criteria_examples.jsonl` (judges/exemplar.py, `rubricrl judge fit --labels`): one row per
  (reply, criterion) in the labels.jsonl format, with the prompt as `context`: the on-policy replies and
  the hand-written ones.

Every row carries `half` (`a` or `b`), decided by a hash of the prompt it answers, so that the two
halves share no prompt: the default reward judge is fitted on half `a`, the independent evaluation judge
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
SHARED = ("coherent", "deflects")


def half(prompt: str) -> str:
    return "ab"[hashlib.sha256(" ".join(prompt.split()).encode("utf-8")).digest()[0] % 2]


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").split("\n") if line.strip()]


def main() -> None:
    items = {r["id"]: r for r in read(DATA / "onpolicy_items.jsonl")}
    labels = {r["id"]: r["labels"] for r in read(DATA / "onpolicy_labels.jsonl")}
    missing = sorted(set(items) - set(labels))
    if missing:
        raise SystemExit(f"{len(missing)} on-policy items have no labels, e.g. {missing[:5]}")
    gate, criteria = [], []
    for item_id, item in items.items():
        row = labels[item_id]
        gate.append({"prompt": item["prompt"], "reply": item["reply"], "coherent": row["coherent"],
                     "deflects": row["deflects"], "source": "onpolicy", "half": half(item["prompt"])})
        for cid, value in row.items():
            if cid == "no-rushed-advice":
                cid, value = "rushes-to-advice", not value
            if cid not in SHARED:
                criteria.append({"rubric": item["rubric"], "criterion_id": cid, "context": item["prompt"],
                                 "response": item["reply"], "label": value, "source": item_id,
                                 "half": half(item["prompt"])})
    seen = set()
    for row in read(DATA / "labels.jsonl"):
        key = (row.get("context", ""), row["response"])
        if key not in seen:
            seen.add(key)
            gate.append({"prompt": row.get("context", ""), "reply": row["response"], "coherent": True,
                         "source": "handwritten", "half": half(row.get("context", ""))})
        criteria.append({**row, "source": "handwritten", "half": half(row.get("context", ""))})
    prompts = [r["prompt"] for r in items.values()]
    for k, line in enumerate(l for l in (DATA / "deflections.txt").read_text("utf-8").split("\n") if l.strip()):
        gate.append({"prompt": prompts[(7 * k) % len(prompts)], "reply": line.strip(), "coherent": True,
                     "deflects": True, "source": "handwritten-deflection", "half": "ab"[k % 2]})
    for name, rows in (("gate_examples.jsonl", gate), ("criteria_examples.jsonl", criteria)):
        (DATA / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
        print(f"{len(rows)} rows -> {DATA / name}")


if __name__ == "__main__":
    main()
