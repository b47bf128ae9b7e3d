"""verl custom reward function file: rubricrl's rubric rewards (rubricrl/integrations/verl.py).

For verl versions whose `custom_reward_function.path` does not take `pkg://rubricrl.integrations.verl`:
    custom_reward_function.path=/path/to/examples/verl/reward.py
    custom_reward_function.name=compute_score        # or compute_score_batch with the legacy batch manager
"""

from rubricrl.integrations.verl import compute_score, compute_score_async, compute_score_batch

__all__ = ["compute_score", "compute_score_async", "compute_score_batch"]
