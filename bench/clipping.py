"""How many of a policy's sampled replies would be cut off at each completion limit?

GRPO samples completions up to `max_completion_length` tokens; a reply that has not ended by then is
cut off mid-sentence (TRL's `completions/clipped_ratio`). This samples the policy the way the demo's
training does (the demo system prompt, temperature 0.7, top_p 0.9, the training prompts) once with a
generous limit, and prints, per candidate limit, the share of replies that had not ended by it, so a
limit can be chosen before paying for a training run.

    python -u bench/clipping.py                                   # embedded policy, demo settings
    python -u bench/clipping.py --policy runs/demo/final --samples 2
    python -u bench/clipping.py --system "Reply in one or two sentences."   # another system prompt

Measured figures are in docs/benchmarks.md ("The embedded demo").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

LIMITS = (64, 80, 96, 112, 128, 160)


def main() -> None:
    import torch

    from rubricrl.llm.models import load_causal_lm
    from rubricrl.train.config import DEMO_SYSTEM_PROMPT

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default=None, help="hub id, directory or .gguf (default: the embedded model)")
    parser.add_argument("--system", default=DEMO_SYSTEM_PROMPT, help="system prompt (default: the demo's)")
    parser.add_argument("--samples", type=int, default=4, help="replies per training prompt")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import importlib.resources

    text = (importlib.resources.files("rubricrl") / "data" / "prompts" / "emotional_support.jsonl").read_text("utf-8")
    prompts = [row for row in map(json.loads, filter(str.strip, text.split("\n"))) if row.get("split") == "train"]
    torch.set_num_threads(args.threads)
    model, tok = load_causal_lm(args.policy)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    jobs = [row for row in prompts for _ in range(args.samples)]
    lengths: list[int | None] = []  # new tokens up to and including EOS; None: not ended by max(LIMITS)
    started = time.perf_counter()
    for start in range(0, len(jobs), args.batch_size):
        batch = jobs[start:start + args.batch_size]
        texts = [tok.apply_chat_template(([{"role": "system", "content": args.system}] if args.system else [])
                                         + [{"role": "user", "content": r["prompt"]}], tokenize=False,
                                         add_generation_prompt=True) for r in batch]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        torch.manual_seed(args.seed * 1000 + start)
        with torch.inference_mode():
            ids = model.generate(**enc, max_new_tokens=max(LIMITS), do_sample=True, temperature=args.temperature,
                                 top_p=args.top_p, top_k=0, pad_token_id=tok.pad_token_id)
        for seq in ids[:, enc["input_ids"].shape[1]:].tolist():
            lengths.append(seq.index(tok.eos_token_id) + 1 if tok.eos_token_id in seq else None)
        print(f"{len(lengths)}/{len(jobs)}", file=sys.stderr, flush=True)
    ended = [n for n in lengths if n is not None]
    print(f"policy {args.policy or 'embedded'}; {len(prompts)} training prompts x {args.samples} samples; "
          f"temperature {args.temperature}, top_p {args.top_p}; system prompt: {args.system!r}")
    print(f"median length of replies that ended: {statistics.median(ended) if ended else 'n/a'} tokens; "
          f"{time.perf_counter() - started:.0f} s")
    for limit in LIMITS:
        cut = sum(n is None or n > limit for n in lengths)
        share = 100 * cut / len(lengths)
        print(f"  max_completion_length {limit:4d}: {cut:4d} of {len(lengths)} cut off ({share:.1f}%)")


if __name__ == "__main__":
    main()
