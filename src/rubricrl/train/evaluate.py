"""Held-out evaluation of a policy: generate greedily, judge with the evaluation judge, bootstrap."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rubricrl.core.messages import as_conversation
from rubricrl.judges.base import Judge, JudgeRequest
from rubricrl.rubrics.model import Rubric
from rubricrl.scoring.formulas import Estimate, bootstrap, score_row
from rubricrl.train.data import PromptRow


def generate(model, tokenizer, prompts: Sequence[list[dict]], max_new_tokens: int, batch_size: int = 8) -> list[str]:
    """Greedy completions for chat prompts, batched with left padding."""
    import torch

    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    outputs: list[str] = []
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(prompts), batch_size):
            texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                     for p in prompts[start:start + batch_size]]
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            with torch.inference_mode():
                ids = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=tokenizer.pad_token_id)
            outputs += tokenizer.batch_decode(ids[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return [o.strip() for o in outputs]


def evaluate(model, tokenizer, rows: Sequence[PromptRow], rubrics: dict[str, Rubric], judge: Judge,
             max_new_tokens: int) -> tuple[list[dict], Estimate | None]:
    """Records (prompt, completion, verdicts, score) per held-out row and the mean with a 95% CI."""
    completions = generate(model, tokenizer, [r.messages for r in rows], max_new_tokens)
    requests = [JudgeRequest(as_conversation(r.messages), c, rubrics[r.rubric_key].criteria)
                for r, c in zip(rows, completions)]
    answers = asyncio.run(judge.judge(requests)) if requests else []
    records = []
    for row, completion, verdicts in zip(rows, completions, answers):
        s = score_row(rubrics[row.rubric_key], verdicts)
        records.append({"id": row.id, "prompt": row.messages[-1]["content"], "completion": completion,
                        "score": s.score, "n_error": s.n_error, "coverage": s.coverage,
                        "verdicts": [v.model_dump(mode="json") for v in verdicts]})
    scores = [r["score"] for r in records if r["score"] is not None]
    return records, (bootstrap(scores) if scores else None)


def paired_change(before: Sequence[dict], after: Sequence[dict], rubrics: dict[str, Rubric] | None = None, *,
                  resamples: int = 1000, seed: int = 0) -> dict | None:
    """The paired difference after - before over the held-out prompts scored in both evaluations (mean
    and 95% bootstrap CI over prompts, unclipped), with what must not regress alongside: the hard-rule
    pass rate and the share of replies the quality gate stopped (judge id `gate`; only when the
    evaluation judge has a gate). None when no prompt was scored in both."""
    first = {r["id"]: r for r in before if r.get("score") is not None}
    pairs = [(first[r["id"]], r) for r in after if r.get("score") is not None and r["id"] in first]
    if not pairs:
        return None
    diff = bootstrap([b["score"] - a["score"] for a, b in pairs], resamples=resamples, seed=seed, clip=False)
    # a hard rule passes when a positive one is met or a pitfall (negative weight) is not
    hard = {c.id: c.weight > 0 for rubric in (rubrics or {}).values() for c in rubric.criteria if c.kind == "hard_rule"}

    def side(records: list[dict]) -> dict:
        verdicts = [v for r in records for v in r["verdicts"] if v["criterion_id"] in hard]
        decided = [v for v in verdicts if v["status"] in ("met", "unmet")]
        gated = sum(any(v.get("judge_id") == "gate" for v in r["verdicts"]) for r in records)
        return {"mean": sum(r["score"] for r in records) / len(records),
                "hard_rule_pass_rate": (sum((v["status"] == "met") == hard[v["criterion_id"]] for v in decided)
                                        / len(decided)) if decided else None,
                "gated_share": gated / len(records)}

    return {"n": len(pairs), "difference": diff.to_dict(), "excludes_zero": diff.ci_low > 0 or diff.ci_high < 0,
            "before": side([a for a, _ in pairs]), "after": side([b for _, b in pairs])}
