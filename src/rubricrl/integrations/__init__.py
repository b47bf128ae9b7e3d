"""Plugging rubric rewards into other trainers and anything that speaks HTTP.

- `reward_server`: FastAPI app (`rubricrl serve`): OpenRLHF's remote reward API, `/v1/score`,
  `/health`, `/metrics`; its parts: `server_settings`, `server_limits`, `server_metrics`, `openrlhf`.
- `verl`: `compute_score` and friends for verl's custom reward function
  (`reward.custom_reward_function` from verl 0.7.1, `custom_reward_function` before).
- shared: `rubric_values` (rubrics carried in data values), `row_rewards` (verdicts -> reward and
  per-row logs under an error policy), `judge_runner` (a judge on a private event loop).
"""
