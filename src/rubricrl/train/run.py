"""`rubricrl train`: validate the config, evaluate before, train with TRL GRPO, evaluate after, report.

A run directory holds: config.yaml (as resolved), checkpoints/ (TRL), metrics.jsonl (every log
line), samples.jsonl (judged completions per step), eval_before.jsonl / eval_after.jsonl,
summary.json and report.html.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import yaml

from rubricrl.judges import make_judge
from rubricrl.core.jsonl import read_jsonl, write_jsonl
from rubricrl.llm.models import resolve
from rubricrl.rewards.functions import STRUCTURED_SPANS, FormatReward, LengthPenalty, RubricReward
from rubricrl.train.config import TrainConfig, load_config, require_training
from rubricrl.train.data import load_prompt_data

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# transformers 5 deprecation noise that TRL triggers on every step; nothing for a user to act on
warnings.filterwarnings("ignore", message=".*checkpointing.*", category=FutureWarning)


class RunDirError(RuntimeError):
    pass


def prepare_run_dir(config: TrainConfig, resume: bool) -> Path:
    run_dir = Path(config.output_dir)
    saved = run_dir / "config.yaml"
    if resume:
        if not saved.is_file():
            raise RunDirError(f"{run_dir} has no config.yaml: not a rubricrl run directory")
        return run_dir
    if saved.exists():
        raise RunDirError(f"{run_dir} already holds a run; use `rubricrl train --resume {run_dir}` to continue it "
                          "or set output_dir to a new directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    saved.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    return run_dir


def resume_config(run_dir: Path) -> TrainConfig:
    config = load_config(run_dir / "config.yaml")
    if Path(config.output_dir).resolve() != run_dir.resolve():  # the directory was moved or renamed
        config = config.model_copy(update={"output_dir": str(run_dir)})
    return config


def load_policy(spec: str):
    """A fresh trainable copy of the policy model (never the judge's cached instance)."""
    require_training()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve(spec)
    tokenizer = AutoTokenizer.from_pretrained(source)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    return model, tokenizer


def run_training(config: TrainConfig, *, resume: bool = False, log=print, callbacks: list | None = None) -> dict:
    """Run (or resume) a training run end to end; return the summary written to summary.json.
    `callbacks`: extra transformers TrainerCallbacks (bench/learning.py evaluates every N steps with one)."""
    require_training()
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    from rubricrl.train.buffer import SelectiveSampleBuffer
    from rubricrl.train.trainer import RubricGRPOTrainer, RunFilesCallback

    started = time.time()
    run_dir = prepare_run_dir(config, resume)
    if config.dialogue.enabled:
        return _run_dialogue_training(config, run_dir, resume, log, started)
    data = load_prompt_data(config.data.train, config.data.heldout, config.rubric, config.data.prompt_field,
                            config.data.limit_train, config.data.limit_heldout, config.data.system_prompt)
    log(f"data: {len(data.train)} training prompts, {len(data.heldout)} held-out, {len(data.rubrics)} rubric(s)")
    reward_judge = make_judge(config.reward.judge, threshold=config.reward.threshold)
    eval_judge = make_judge(config.eval.judge) if config.eval.enabled else None
    model, tokenizer = load_policy(config.model)

    summary: dict = {"run_dir": str(run_dir), "model": config.model, "reward_judge": config.reward.judge,
                     "eval_judge": config.eval.judge if config.eval.enabled else None}
    if eval_judge is not None:
        summary["before"] = _evaluate_once(run_dir / "eval_before.jsonl", model, tokenizer, data, eval_judge,
                                           config.eval.max_new_tokens, log, "before")

    judged_span = "response" if config.reward.structured else None
    if config.reward.mode == "pairwise":
        from rubricrl.judges.pairwise import PairwiseRubricJudge
        from rubricrl.rewards.pairwise import PairwiseRubricReward

        rubric_reward = PairwiseRubricReward(
            PairwiseRubricJudge(reward_judge, soft=config.reward.soft), None,
            num_generations=config.grpo_kwargs()["num_generations"], max_pairs=config.reward.pairwise_max_pairs,
            seed=config.grpo_kwargs()["seed"], error_policy=config.reward.error_policy, judged_span=judged_span,
            rubrics=data.rubrics)
    else:
        rubric_reward = RubricReward(reward_judge, None, error_policy=config.reward.error_policy,
                                     soft=config.reward.soft, judged_span=judged_span, rubrics=data.rubrics)
    reward_funcs, weights = [rubric_reward], [1.0]
    if config.reward.structured:
        reward_funcs.append(FormatReward(STRUCTURED_SPANS))
        weights.append(config.reward.format_weight)
    if config.reward.length_max_words:
        reward_funcs.append(LengthPenalty(config.reward.length_max_words))
        weights.append(config.reward.length_weight)
    if config.reward.novelty_weight > 0:
        from rubricrl.tactics.classifier import TacticClassifier
        from rubricrl.tactics.novelty import NoveltyReward

        reward_funcs.append(NoveltyReward(TacticClassifier.load(config.reward.tactic_classifier),
                                          config.reward.novelty_mode))
        weights.append(config.reward.novelty_weight)

    args = _grpo_args(config, run_dir, weights)
    peft_config = _peft_config(config)
    buffer = None
    if config.buffer.enabled:
        buffer = SelectiveSampleBuffer(args.num_generations, capacity=config.buffer.capacity,
                                       zero_spread_threshold=config.buffer.zero_spread_threshold,
                                       min_abs_advantage=config.buffer.min_abs_advantage,
                                       pad_token_id=tokenizer.pad_token_id)
    trainer = RubricGRPOTrainer(
        model=model, reward_funcs=reward_funcs, args=args,
        train_dataset=Dataset.from_list([r.to_trl() for r in data.train]),
        processing_class=tokenizer, peft_config=peft_config,
        callbacks=[RunFilesCallback(run_dir, rubric_reward), *(callbacks or [])],
        scaffold=config.scaffold, rubrics=data.rubrics, sample_buffer=buffer,
    )
    _compact_console(trainer, log, args.per_device_train_batch_size, reward_name=rubric_reward.__name__,
                     criteria=_model_judged(data.rubrics))
    checkpoint = resume and any((run_dir / "checkpoints").glob("checkpoint-*"))
    log(f"training: {args.max_steps} GRPO steps, {args.num_generations} generations per prompt"
        + (" (resuming from the last checkpoint)" if checkpoint else ""))
    trainer.train(resume_from_checkpoint=True if checkpoint else None)
    trainer.save_model(str(run_dir / "final"))

    if eval_judge is not None:
        summary["after"] = _evaluate_once(run_dir / "eval_after.jsonl", trainer.model, tokenizer, data, eval_judge,
                                          config.eval.max_new_tokens, log, "after", reuse=False)
    if summary.get("before") and summary.get("after"):
        from rubricrl.train.evaluate import paired_change

        summary["change"] = paired_change(read_jsonl(run_dir / "eval_before.jsonl"),
                                          read_jsonl(run_dir / "eval_after.jsonl"), data.rubrics)
    summary["reward_totals"] = dict(rubric_reward.totals)
    summary["steps"] = trainer.state.global_step
    summary["seconds"] = round(time.time() - started, 1)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _model_judged(rubrics) -> tuple[str, ...]:
    """Ids of the model-judged criteria with a positive weight, in rubric order (for the console line)."""
    return tuple(dict.fromkeys(c.id for r in rubrics.values() for c in r.criteria if c.check is None and c.weight > 0))


def _compact_console(trainer, log, batch: int, *, reward_name: str, criteria: tuple[str, ...] = ()) -> None:
    """One line per step on the console (train/console.py) instead of TRL's raw metric dict."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from rubricrl.train.console import ConsoleCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(ConsoleCallback(log, batch=batch, criteria=criteria, reward_name=reward_name))


def _grpo_args(config: TrainConfig, run_dir: Path, weights: list[float]):
    import torch
    from trl import GRPOConfig

    grpo = config.grpo_kwargs()
    grpo.setdefault("bf16", torch.cuda.is_available())
    grpo.setdefault("reward_weights", weights)
    return GRPOConfig(output_dir=str(run_dir / "checkpoints"), **grpo)


def _peft_config(config: TrainConfig):
    if config.lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(r=config.lora.r, lora_alpha=config.lora.alpha, lora_dropout=config.lora.dropout,
                      target_modules=config.lora.target_modules, task_type="CAUSAL_LM")


def _run_dialogue_training(config: TrainConfig, run_dir: Path, resume: bool, log, started: float) -> dict:
    """Multi-turn GRPO against simulated users (docs/dialogue.md): personas are the prompts, the
    dialogue rollout plays the conversations, emotion (and optionally rubric) rewards score them."""
    from datasets import Dataset

    from rubricrl.llm.chat import make_chat_model
    from rubricrl.dialogue.credit import TurnCredit
    from rubricrl.dialogue.grpo import DialogueRollout, opening_prompt
    from rubricrl.dialogue.persona import load_personas
    from rubricrl.dialogue.rewards import DialogueRubricReward, EmotionReward
    from rubricrl.dialogue.user import SimulatedUser, UserSettings
    from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric
    from rubricrl.train.trainer import RubricGRPOTrainer, RunFilesCallback

    d = config.dialogue
    loaded = load_personas(d.personas)
    for problem in loaded.problems:
        log(f"skipped persona: {problem}")
    personas = loaded.personas[: d.limit] if d.limit else loaded.personas
    if not personas:
        raise ValueError(f"dialogue.personas {d.personas}: no usable persona")
    log(f"dialogue: {len(personas)} personas, user model {d.user_model}, {d.max_turns} turns, reward {d.reward_mode}"
        + (f", credit per turn (alpha {d.credit_alpha_or_default:g})" if d.credit == "turn" else ""))
    settings = UserSettings(start_emotion=d.start_emotion, max_change=d.max_change, max_turns=d.max_turns)
    user = SimulatedUser(make_chat_model(d.user_model), settings)
    emotion = EmotionReward(d.reward_mode, max_change=d.max_change, alpha=d.alpha, gamma=d.gamma)
    reward_funcs, weights = [emotion], [1.0]
    if d.rubric_per is not None:
        rubric_path = config.rubric if Path(config.rubric).exists() else bundled_rubric_path(config.rubric)
        reward_funcs.append(DialogueRubricReward(make_judge(config.reward.judge, threshold=config.reward.threshold),
                                                 load_rubric(rubric_path), d.rubric_per, soft=config.reward.soft))
        weights.append(d.rubric_weight)
    args = _grpo_args(config, run_dir, weights)
    model, tokenizer = load_policy(config.model)
    rollout = DialogueRollout(personas, user, max_new_tokens=d.max_new_tokens, seed=args.seed)
    credit = None
    if d.credit == "turn":  # the weights TRL sums the rewards with (grpo.reward_weights may override ours)
        credit = TurnCredit(reward_funcs, list(args.reward_weights or [1.0] * len(reward_funcs)),
                            d.credit_alpha_or_default)
    trainer = RubricGRPOTrainer(
        model=model, reward_funcs=reward_funcs, args=args, processing_class=tokenizer,
        train_dataset=Dataset.from_list([{"prompt": opening_prompt(p), "persona_id": p.id} for p in personas]),
        peft_config=_peft_config(config), callbacks=[RunFilesCallback(run_dir, emotion)], rollout_func=rollout,
        turn_credit=credit)
    _compact_console(trainer, log, args.per_device_train_batch_size, reward_name=emotion.__name__)
    checkpoint = resume and any((run_dir / "checkpoints").glob("checkpoint-*"))
    log(f"training: {args.max_steps} multi-turn GRPO steps, {args.num_generations} conversations per persona")
    trainer.train(resume_from_checkpoint=True if checkpoint else None)
    trainer.save_model(str(run_dir / "final"))
    summary = {"run_dir": str(run_dir), "model": config.model, "dialogue": True, "credit": d.credit,
               "reward_totals": dict(emotion.totals), "steps": trainer.state.global_step,
               "seconds": round(time.time() - started, 1),
               "evaluate_with": f"rubricrl simulate --policy local:{run_dir / 'final'} --out {run_dir / 'simulate'}"}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _evaluate_once(path: Path, model, tokenizer, data, judge, max_new_tokens, log, label,
                   reuse: bool = True) -> dict | None:
    """Held-out evaluation written to `path`; a resumed run reuses an existing 'before' file."""
    from rubricrl.scoring.formulas import bootstrap
    from rubricrl.train.evaluate import evaluate

    if reuse and path.is_file():
        records = read_jsonl(path)
        scores = [r["score"] for r in records if r["score"] is not None]
        estimate = bootstrap(scores) if scores else None
    else:
        log(f"held-out evaluation ({label}): {len(data.heldout)} prompts")
        records, estimate = evaluate(model, tokenizer, data.heldout, data.rubrics, judge, max_new_tokens)
        write_jsonl(path, records, allow_nan=True)
    return {"estimate": estimate.to_dict() if estimate else None,
            "errors": sum(r["n_error"] for r in records), "rows": len(records)}
