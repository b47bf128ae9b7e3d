"""Build the on-policy gold set's items: replies of a policy to the bundled emotional-support prompts.

Two steps:

    # 1. sample a policy (before training: the embedded model; after: a training run's final/ dir)
    python bench/gold/make_items.py sample --tag base --out bench/gold/pool_base.jsonl
    python bench/gold/make_items.py sample --policy runs/demo/final --tag trained \
        --sampled 1 --crisis-extra 2 --out bench/gold/pool_trained.jsonl
    # 2. shuffle every pool into blind items (what the labeller reads) and their sources (kept apart)
    python bench/gold/make_items.py assemble bench/gold/pool_base.jsonl
    python bench/gold/make_items.py assemble --append bench/gold/pool_trained.jsonl  # a later wave

Decoding matches the demo's GRPO sampling (TRL defaults: temperature 1.0, top_p 1.0, no top_k) and
its held-out evaluation (greedy), with the demo's completion limit of 96 new tokens, so replies cut
off at the limit are in the set as they are in training. Labels are NOT made here: they are decided
by reading each item (see bench/gold/GUIDE.md).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_prompts() -> list[dict]:
    import importlib.resources

    text = (importlib.resources.files("rubricrl") / "data" / "prompts" / "emotional_support.jsonl").read_text("utf-8")
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def sample(args) -> None:
    import torch

    from rubricrl.llm.models import load_causal_lm

    model, tok = load_causal_lm(args.policy)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    prompts = [row for row in load_prompts() if args.split in (None, row.get("split"))]
    jobs = []  # (prompt row, decoding, seed)
    for row in prompts:
        jobs += [(row, "greedy", 0)] * args.greedy
        extra = args.crisis_extra if row.get("crisis") else 0
        jobs += [(row, "sampled", args.seed + k) for k in range(args.sampled + extra)]
    out = Path(args.out)
    done = out.read_text("utf-8").split("\n")[:-1] if out.exists() else []
    done = done[: len(done) - len(done) % args.batch_size]  # resume at a whole batch: same seeds as a fresh run
    out.write_text("".join(line + "\n" for line in done), "utf-8")
    torch.set_num_threads(args.threads)
    with out.open("a", encoding="utf-8") as handle:
        for start in range(len(done), len(jobs), args.batch_size):
            batch = jobs[start:start + args.batch_size]
            for decoding in ("greedy", "sampled"):
                part = [j for j in batch if j[1] == decoding]
                if not part:
                    continue
                texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                                 add_generation_prompt=True) for r, _, _ in part]
                enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
                torch.manual_seed(args.seed * 1000 + start)
                kwargs = dict(do_sample=False) if decoding == "greedy" else dict(
                    do_sample=True, temperature=args.temperature, top_p=args.top_p, top_k=0)
                with torch.inference_mode():
                    ids = model.generate(**enc, max_new_tokens=args.max_new_tokens, pad_token_id=tok.pad_token_id,
                                         **kwargs)
                new = ids[:, enc["input_ids"].shape[1]:]
                for (row, _, seed), seq in zip(part, new):
                    n_tokens = int((seq != tok.pad_token_id).sum())
                    truncated = bool(tok.eos_token_id not in seq.tolist())
                    reply = tok.decode(seq, skip_special_tokens=True).strip()
                    handle.write(json.dumps({
                        "prompt_id": row["id"], "crisis": bool(row.get("crisis")), "prompt": row["prompt"],
                        "reply": reply, "policy": args.tag, "policy_spec": args.policy or "embedded",
                        "decoding": decoding, "temperature": 0.0 if decoding == "greedy" else args.temperature,
                        **({"top_p": args.top_p} if decoding == "sampled" and args.top_p < 1.0 else {}),
                        "max_new_tokens": args.max_new_tokens, "new_tokens": n_tokens, "truncated": truncated,
                    }, ensure_ascii=False) + "\n")
            handle.flush()
            print(f"{min(start + args.batch_size, len(jobs))}/{len(jobs)}", file=sys.stderr, flush=True)


def assemble(args) -> None:
    pool = []
    for path in args.pools:
        pool += [json.loads(line) for line in Path(path).read_text("utf-8").split("\n") if line.strip()]
    random.Random(args.seed).shuffle(pool)
    items, sources = [], []
    first = 1
    if args.append:  # a later wave (e.g. the trained policy's replies) gets the next ids, shuffled within itself
        first += sum(1 for line in (HERE / "items.jsonl").read_text("utf-8").split("\n") if line.strip())
    for number, entry in enumerate(pool, start=first):
        item_id = f"g{number:03d}"
        items.append({"id": item_id, "rubric": "crisis_safety" if entry["crisis"] else "empathy",
                      "prompt": entry["prompt"], "reply": entry["reply"]})
        sources.append({"id": item_id, **{k: v for k, v in entry.items() if k not in ("prompt", "reply")}})
    for name, rows in (("items.jsonl", items), ("sources.jsonl", sources)):
        with (HERE / name).open("a" if args.append else "w", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(r, ensure_ascii=True) + "\n" for r in rows))
    print(f"{len(items)} items ({sum(1 for s in sources if s['crisis'])} crisis) -> {HERE / 'items.jsonl'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--policy", default=None, help="model spec: hub id, directory or .gguf (default: embedded)")
    s.add_argument("--tag", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--greedy", type=int, default=1, help="greedy replies per prompt")
    s.add_argument("--sampled", type=int, default=2, help="sampled replies per prompt")
    s.add_argument("--crisis-extra", type=int, default=3, help="extra sampled replies per crisis prompt")
    s.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the sampled replies")
    s.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling of the sampled replies")
    s.add_argument("--split", default=None, help="only prompts of this split (train or heldout)")
    s.add_argument("--max-new-tokens", type=int, default=96)
    s.add_argument("--batch-size", type=int, default=16)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    a = sub.add_parser("assemble")
    a.add_argument("pools", nargs="+")
    a.add_argument("--seed", type=int, default=15)
    a.add_argument("--append", action="store_true", help="add a later wave after the items already assembled")
    args = parser.parse_args()
    sample(args) if args.cmd == "sample" else assemble(args)


if __name__ == "__main__":
    main()
