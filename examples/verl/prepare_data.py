"""Write verl training data with rubrics: parquet rows verl's RLHFDataset reads, whose reward
comes from rubricrl.integrations.verl.

    python examples/verl/prepare_data.py --data examples/generate/prompts.jsonl --rubric empathy --out data/verl

Input: JSONL rows with `prompt` (a string or a list of {role, content} messages; `messages` and
`question` are read too), optional `id`,
optional `rubric` (the row's own rubric: an object, a list of criteria or a bundled name).
Output: OUT/train.parquet and OUT/test.parquet with the columns verl expects:
  data_source              "rubricrl/<rubric id>"
  prompt                   the chat messages (verl applies the chat template)
  ability                  "rubric"
  reward_model             {"style": "rubric", "ground_truth": <the rubric as a JSON string>}
  extra_info               {"split", "index", "id", "prompt": the messages again}
verl does not pass the prompt to reward functions, so it is copied into extra_info for the judge.
Every rubric is validated here, so a bad rubric fails now rather than in the middle of training.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from datasets import Dataset

from rubricrl.core.messages import as_conversation
from rubricrl.rubrics.values import RubricValueError, load_named_rubric, rubric_value

PROMPT_KEYS = ("prompt", "messages", "question")


def verl_row(raw: dict, line: int, default, split: str, index: int) -> dict:
    """One verl row from one input row (ValueError names the line and field)."""
    key = next((k for k in PROMPT_KEYS if k in raw), None)
    if key is None:
        raise ValueError(f"line {line}: missing `prompt` (a string or a list of {{role, content}} messages)")
    try:
        messages = [m.model_dump() for m in as_conversation(raw[key])]
    except (ValueError, TypeError) as exc:
        raise ValueError(f"line {line}: `{key}` is not a string or a list of {{role, content}} messages "
                         f"({str(exc).splitlines()[0]})") from None
    rubric = rubric_value(raw["rubric"], f"line {line}: rubric") if raw.get("rubric") else default
    if rubric is None:
        raise ValueError(f"line {line}: no `rubric` in the row and no --rubric given")
    name = rubric.id or rubric.content_hash()[:12]
    return {
        "data_source": f"rubricrl/{name}",
        "prompt": messages,
        "ability": "rubric",
        "reward_model": {"style": "rubric",
                         "ground_truth": json.dumps(rubric.model_dump(mode="json", exclude_none=True))},
        "extra_info": {"split": split, "index": index, "id": str(raw.get("id", f"line-{line}")), "prompt": messages},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="input JSONL (prompt, optional rubric, id)")
    parser.add_argument("--rubric", help="bundled rubric name or file for rows without their own")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--test-fraction", type=float, default=0.2, help="share of rows held out (default 0.2)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        default = load_named_rubric(args.rubric) if args.rubric else None
        raws = [(n, json.loads(line)) for n, line in enumerate(args.data.read_text(encoding="utf-8").splitlines(), 1)
                if line.strip()]
        order = list(range(len(raws)))
        random.Random(args.seed).shuffle(order)
        n_test = round(len(raws) * args.test_fraction) if len(raws) > 1 else 0
        test = set(order[:n_test])
        splits: dict[str, list[dict]] = {"train": [], "test": []}
        for k, (line, raw) in enumerate(raws):
            split = "test" if k in test else "train"
            splits[split].append(verl_row(raw, line, default, split, len(splits[split])))
    except (OSError, ValueError, RubricValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        if rows:
            Dataset.from_list(rows).to_parquet(str(args.out / f"{split}.parquet"))
        print(f"{split}: {len(rows)} rows -> {args.out / f'{split}.parquet'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
