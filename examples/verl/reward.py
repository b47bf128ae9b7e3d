"""verl custom reward function file: rubricrl's rubric rewards (rubricrl/integrations/verl.py).

For verl releases whose reward function path takes only a file (0.5.x, 0.6.x), give its absolute path:
    custom_reward_function.path=/path/to/examples/verl/reward.py      (verl 0.5.0 to 0.7.0)
    custom_reward_function.name=compute_score     # or compute_score_batch with the `batch` manager
verl 0.7.0 and later also take pkg://rubricrl.integrations.verl; from 0.7.1 the keys are
reward.custom_reward_function.{path,name} (docs/scaling.md, "Which verl").
"""

from rubricrl.integrations.verl import compute_score, compute_score_async, compute_score_batch

__all__ = ["compute_score", "compute_score_async", "compute_score_batch"]
