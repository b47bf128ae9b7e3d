"""The training console: one compact line per logged step instead of TRL's raw metric dict.

    step   3/24  reward 0.412 ±0.153  clipped 25%  gated 5/8  errors 0  pass validates-feeling 38% invites-more 0%  41.5 s

- `reward` is the mean total reward of the step's completions and `±` its standard deviation (the spread
  GRPO learns from); `clipped` the share of completions cut off at max_completion_length;
- `gated`: completions the quality gate stopped (incoherent or deflecting) out of those generated;
  `defences` counts the pre-checks too when any fired; `errors` the judge errors (masked or zeroed);
- `critic` (a critic judge, judges/critic.py): model-judged criteria sent to the verifier out of all, the
  share of verifier verdicts saved, and the verified ones confirmed failed (a dialogue run's are those of
  its rubric reward, `dialogue_rubric/`);
- `pairs` (`reward.mode: pairwise`): pairs compared, comparisons asked of the pairwise judge (both orders),
  and those whose two orders disagreed;
- `pass`: the pass rates of up to `max_criteria` model-judged criteria (rule checks are in
  metrics.jsonl with everything else).

Every metric TRL and rubricrl log stays in metrics.jsonl (train/trainer.py `RunFilesCallback`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from transformers import TrainerCallback


def step_line(step: int, max_steps: int, logs: Mapping[str, float], *, batch: int, reward_name: str = "rubric",
              criteria: tuple[str, ...] = (), max_criteria: int = 4) -> str:
    """The console line for one step's logs (see the module docstring)."""
    def get(key: str) -> float | None:
        value = logs.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    parts = [f"step {step:>3}/{max_steps}"]
    reward, spread = get("reward"), get("reward_std")
    if reward is not None:
        parts.append(f"reward {reward:.3f}" + (f" ±{spread:.3f}" if spread is not None else ""))
    clipped = get("completions/clipped_ratio")
    if clipped is not None:
        parts.append(f"clipped {clipped:.0%}")
    gated = get(f"{reward_name}/defence_gated")
    if gated is not None:
        parts.append(f"gated {gated:.0f}/{batch}")
    prechecked = get(f"{reward_name}/defence_prechecked") or 0.0
    if prechecked:
        parts.append(f"prechecked {prechecked:.0f}")
    errors = get(f"{reward_name}/judge_errors")
    if errors is not None:
        parts.append(f"errors {errors:.0f}")
    # a critic judge's counts: the reward's own, else another reward's (a dialogue run's `dialogue_rubric`)
    critic = reward_name if f"{reward_name}/judge_verified" in logs else next(
        (k.rsplit("/", 1)[0] for k in sorted(logs) if k.endswith("/judge_verified")), None)
    verified, unverified = get(f"{critic}/judge_verified"), get(f"{critic}/judge_unverified")
    if critic is not None and verified is not None and unverified is not None:
        saved = get(f"{critic}/critic_saved")
        parts.append(f"critic verified {verified:.0f}/{verified + unverified:.0f}"
                     + (f" (saved {saved:.0%})" if saved is not None else "")
                     + f" confirmed {get(f'{critic}/critic_confirmed') or 0.0:.0f}")
    pairs, comparisons = get(f"{reward_name}/pairwise_pairs"), get(f"{reward_name}/pairwise_comparisons")
    if pairs is not None and comparisons is not None:
        parts.append(f"pairs {pairs:.0f} comparisons {comparisons:.0f} "
                     f"disagreed {get(f'{reward_name}/pairwise_disagreements') or 0.0:.0f}")
    prefix = f"{reward_name}/pass_rate/"
    names = [c for c in criteria if prefix + c in logs] or sorted(k[len(prefix):] for k in logs if k.startswith(prefix))
    rates = [f"{c} {float(logs[prefix + c]):.0%}" for c in names[:max_criteria]]
    if rates:
        parts.append("pass " + " ".join(rates))
    seconds = get("step_time")
    if seconds is not None:
        parts.append(f"{seconds:.1f} s")
    return "  ".join(parts)


class ConsoleCallback(TrainerCallback):
    """Prints `step_line` for every training log (not for the final train summary TRL logs)."""

    def __init__(self, print_line: Callable[[str], None], *, batch: int, criteria: tuple[str, ...] = (),
                 reward_name: str = "rubric"):
        self.print_line = print_line
        self.batch = batch
        self.criteria = criteria
        self.reward_name = reward_name

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or not state.is_world_process_zero or "train_runtime" in logs:
            return
        self.print_line(step_line(state.global_step, state.max_steps, logs, batch=self.batch,
                                  reward_name=self.reward_name, criteria=self.criteria))
