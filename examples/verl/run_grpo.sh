#!/usr/bin/env bash
# GRPO with verl and rubric rewards, the judge served by vLLM (docs/scaling.md).
# Not run by rubricrl's CI (it needs GPUs and a Ray cluster); adapt the model, sizes and hosts.
set -euo pipefail
DATA=${DATA:-data/verl}
JUDGE=${RUBRICRL_JUDGE:-"openai:http://judge-host:8000/v1?model=Qwen/Qwen2.5-7B-Instruct&mode=logprob&concurrency=64"}

python examples/verl/prepare_data.py --data examples/generate/prompts.jsonl --rubric empathy --out "$DATA"

# Reward workers read RUBRICRL_JUDGE from their environment. On a Ray cluster, set it in the job's
# runtime env instead: ray job submit --runtime-env-json='{"env_vars": {"RUBRICRL_JUDGE": "..."}}' -- ...
export RUBRICRL_JUDGE="$JUDGE"
python3 -m verl.trainer.main_ppo \
  algorithm.adv_estimator=grpo \
  data.train_files="$DATA/train.parquet" \
  data.val_files="$DATA/test.parquet" \
  data.prompt_key=prompt \
  data.train_batch_size=64 \
  data.max_prompt_length=512 \
  data.max_response_length=256 \
  actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n=8 \
  custom_reward_function.path=pkg://rubricrl.integrations.verl \
  custom_reward_function.name=compute_score \
  trainer.n_gpus_per_node=8 \
  trainer.nnodes=1 \
  "$@"
