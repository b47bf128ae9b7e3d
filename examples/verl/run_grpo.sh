#!/usr/bin/env bash
# GRPO with verl and rubric rewards, the judge served by vLLM (docs/scaling.md).
# Not run by rubricrl's CI (it needs GPUs and a Ray cluster); adapt the model, sizes and hosts.
# Works with verl 0.5.0 to 0.9.x: the reward keys moved in verl 0.7.1, so the config is picked by
# what the installed verl has (override with VERL_REWARD_LAYOUT=reward or legacy).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DATA=${DATA:-data/verl}
JUDGE=${RUBRICRL_JUDGE:-"openai:http://judge-host:8000/v1?model=Qwen/Qwen2.5-7B-Instruct&mode=logprob&concurrency=64"}

# verl >= 0.7.1 ships verl/trainer/config/reward/reward.yaml (the `reward.*` keys); older verl does not.
LAYOUT=${VERL_REWARD_LAYOUT:-$(python3 - <<'EOF'
import importlib.util, pathlib
spec = importlib.util.find_spec("verl")
root = pathlib.Path(next(iter(spec.submodule_search_locations))) if spec else None
print("reward" if root and (root / "trainer/config/reward/reward.yaml").is_file() else "legacy")
EOF
)}
if [[ $LAYOUT == reward ]]; then
  CONFIG=(--config-path "$HERE" --config-name config)
else  # verl 0.5.x-0.7.0 load the reward function from a file, resolved from where verl runs: make it absolute
  CONFIG=(--config-path "$HERE" --config-name config_legacy custom_reward_function.path="$HERE/reward.py")
fi

python3 "$HERE/prepare_data.py" --data "$HERE/../generate/prompts.jsonl" --rubric empathy --out "$DATA"

# Reward workers read RUBRICRL_JUDGE from their environment (reward_kwargs.judge in the config wins when
# set). On a Ray cluster, set it in the job's runtime env instead:
#   ray job submit --runtime-env-json='{"env_vars": {"RUBRICRL_JUDGE": "..."}}' -- ...
export RUBRICRL_JUDGE="$JUDGE"
python3 -m verl.trainer.main_ppo "${CONFIG[@]}" \
  algorithm.adv_estimator=grpo \
  data.train_files="$DATA/train.parquet" \
  data.val_files="$DATA/test.parquet" \
  data.train_batch_size=64 \
  data.max_prompt_length=512 \
  data.max_response_length=256 \
  actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n=8 \
  trainer.n_gpus_per_node=8 \
  trainer.nnodes=1 \
  "$@"
