"""How many of a policy's sampled replies would be cut off at each completion limit?

GRPO samples completions up to `max_completion_length` tokens; a reply that has not ended by then is
cut off mid-sentence (TRL's `completions/clipped_ratio`). This samples the policy the way the demo's
training does (the demo system prompt, temperature 0.7, top_p 0.9, the training prompts) once with a
generous limit, and prints, per candidate limit, the share of replies that had not ended by it, so a
limit can be chosen before paying for a training run.

    python -u bench/clipping.py                                   # embedded policy, demo settings
    python -u bench/clipping.py --policy runs/demo/final --samples 2
    python -u bench/clipping.py --system "Reply in one or two sentences."   # another system prompt
    python -u bench/clipping.py --set grpo.temperature=1.0                  # other demo settings

Measured figures are in docs/benchmarks.md ("The embedded demo").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

LIMITS = (64, 80, 96, 112, 128, 160)


def main() -> None:
    import torch

    from rubricrl.llm.models import load_causal_lm
    from rubricrl.train.config import load_config
    from rubricrl.train.data import load_prompt_data

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default=None, help="hub id, directory or .gguf (default: the demo's model)")
    parser.add_argument("--system", default=None, help="system prompt (default: the demo's)")
    parser.add_argument("--samples", type=int, default=4, help="replies per training prompt")
    parser.add_argument("--set", action="append", default=[], help="config override, as for `rubricrl train --set` "
                        "(e.g. grpo.temperature=1.0)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    # the demo's own training rows, system prompt and sampling settings (what `rubricrl train` uses)
    config = load_config(None, args.set)
    system = config.data.system_prompt if args.system is None else args.system
    data = load_prompt_data(config.data.train, None, config.rubric, config.data.prompt_field, config.data.limit_train,
                            None, system or None)
    grpo = config.grpo_kwargs()
    temperature, top_p = grpo.get("temperature", 1.0), grpo.get("top_p", 1.0)
    torch.set_num_threads(args.threads)
    model, tok = load_causal_lm(args.policy or config.model)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    jobs = [row for row in data.train for _ in range(args.samples)]
    lengths: list[int | None] = []  # new tokens up to and including EOS; None: not ended by max(LIMITS)
    started = time.perf_counter()
    for start in range(0, len(jobs), args.batch_size):
        batch = jobs[start:start + args.batch_size]
        texts = [tok.apply_chat_template(r.messages, tokenize=False, add_generation_prompt=True) for r in batch]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        torch.manual_seed(args.seed * 1000 + start)
        with torch.inference_mode():
            ids = model.generate(**enc, max_new_tokens=max(LIMITS), do_sample=True, temperature=temperature,
                                 top_p=top_p, top_k=0, pad_token_id=tok.pad_token_id)
        for seq in ids[:, enc["input_ids"].shape[1]:].tolist():
            lengths.append(seq.index(tok.eos_token_id) + 1 if tok.eos_token_id in seq else None)
        print(f"{len(lengths)}/{len(jobs)}", file=sys.stderr, flush=True)
    ended = [n for n in lengths if n is not None]
    print(f"policy {args.policy or config.model}; {len(data.train)} training prompts x {args.samples} samples; "
          f"temperature {temperature}, top_p {top_p}; system prompt: {system!r}")
    print(f"median length of replies that ended: {statistics.median(ended) if ended else 'n/a'} tokens; "
          f"{time.perf_counter() - started:.0f} s")
    for limit in LIMITS:
        cut = sum(n is None or n > limit for n in lengths)
        share = 100 * cut / len(lengths)
        print(f"  max_completion_length {limit:4d}: {cut:4d} of {len(lengths)} cut off ({share:.1f}%)")


if __name__ == "__main__":
    main()
