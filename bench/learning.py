"""Does training with rubricrl make the policy better, and does the reward judge agree with an
independent one while it does? Learning curves over seeds.

For each seed this trains the demo configuration (`rubricrl train` defaults, any `--set` applied) for
`--steps` GRPO steps and, every `--every` steps (and at step 0), generates greedy replies to the
held-out prompts and scores them under two judges:
- the reward judge (`reward.judge`, what the policy is optimised against);
- the independent evaluation judge (`eval.judge`; by default fitted on prompt-disjoint examples,
  docs/training.md).
A reward-judge curve that climbs while the independent curve stays flat is the reward-hacking signal.

    python -u bench/learning.py                               # 3 seeds x 100 steps, every 20 steps
    python -u bench/learning.py --seeds 0 --steps 20 --every 10 --out /tmp/learning-smoke
    python -u bench/learning.py --seeds 1 2 --out runs/learning   # add seeds to an earlier run's curves

Seeds already in `--out/curves.json` from an earlier run with the same steps, judges and overrides are
kept (a seed run again is replaced), so the seeds can be run in separate sittings; each point records
the git commit it was trained at, and the table says when the seeds' commits differ.

Prints one line per evaluation and a final table (mean over seeds and the paired change from step 0,
95% bootstrap CI over prompts pooled across seeds), and writes `curves.json` and `curves.png` to `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from transformers import TrainerCallback


def held_out_scores(model, tokenizer, data, judges: dict, max_new_tokens: int) -> dict[str, dict[str, float]]:
    """judge name -> held-out row id -> score, from one greedy generation."""
    from rubricrl.core.messages import as_conversation
    from rubricrl.judges import JudgeRequest
    from rubricrl.scoring.formulas import score_row
    from rubricrl.train.evaluate import generate

    completions = generate(model, tokenizer, [r.messages for r in data.heldout], max_new_tokens)
    out = {}
    for name, judge in judges.items():
        requests = [JudgeRequest(as_conversation(r.messages), c, data.rubrics[r.rubric_key].criteria)
                    for r, c in zip(data.heldout, completions)]
        answers = asyncio.run(judge.judge(requests))
        scores = {r.id: score_row(data.rubrics[r.rubric_key], v).score for r, v in zip(data.heldout, answers)}
        out[name] = {k: v for k, v in scores.items() if v is not None}
    return out


class CurveCallback(TrainerCallback):
    def __init__(self, data, judges, every: int, max_new_tokens: int, seed: int, sink: list):
        self.data, self.judges, self.every, self.max_new_tokens = data, judges, every, max_new_tokens
        self.seed, self.sink = seed, sink

    def _evaluate(self, step: int, model, tokenizer) -> None:
        started = time.perf_counter()
        scores = held_out_scores(model, tokenizer, self.data, self.judges, self.max_new_tokens)
        self.sink.append({"seed": self.seed, "step": step, "scores": scores})
        means = "  ".join(f"{name} {sum(s.values()) / max(len(s), 1):.3f}" for name, s in scores.items())
        print(f"[seed {self.seed}] step {step:>3}: {means}  ({time.perf_counter() - started:.0f} s)", flush=True)

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        self._evaluate(0, model, processing_class)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step % self.every == 0:
            self._evaluate(state.global_step, model, processing_class)


def paired_from_start(points: list[dict], judge: str, step: int):
    """Paired change (step - 0) over (seed, prompt) units, bootstrap over units."""
    from rubricrl.scoring.formulas import bootstrap

    diffs = []
    for seed in sorted({p["seed"] for p in points}):
        start = next(p for p in points if p["seed"] == seed and p["step"] == 0)["scores"][judge]
        at = next((p for p in points if p["seed"] == seed and p["step"] == step), None)
        if at is None:
            continue
        diffs += [at["scores"][judge][k] - start[k] for k in at["scores"][judge] if k in start]
    return bootstrap(diffs, clip=False) if diffs else None


def plot(points: list[dict], judges: list[str], path: Path) -> None:
    import matplotlib.pyplot as plt

    from rubricrl.reports.figures import subplots

    fig, ax = subplots(figsize=(7, 4))
    for judge, style in zip(judges, ("-", "--")):
        for seed in sorted({p["seed"] for p in points}):
            mine = sorted((p for p in points if p["seed"] == seed), key=lambda p: p["step"])
            ax.plot([p["step"] for p in mine],
                    [sum(p["scores"][judge].values()) / max(len(p["scores"][judge]), 1) for p in mine],
                    style, marker="o", label=f"{judge} (seed {seed})")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("held-out score (greedy)")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)


def code_version() -> str:
    """The checkout's commit (with `+dirty` for uncommitted changes), or `unknown` outside git."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def earlier_points(path: Path, settings: dict, seeds: list[int]) -> list[dict]:
    """The points of an earlier run in `path` for seeds other than `seeds`; its settings must match."""
    if not path.exists():
        return []
    earlier = json.loads(path.read_text("utf-8"))
    differ = [k for k, v in settings.items() if earlier.get(k) != v]
    if differ:
        raise SystemExit(f"{path}: an earlier run with other {', '.join(differ)} "
                         f"({', '.join(f'{k}={earlier.get(k)!r}' for k in differ)}); use another --out")
    return [p for p in earlier["points"] if p["seed"] not in seeds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--set", action="append", default=[], help="config override, as for `rubricrl train --set`")
    parser.add_argument("--out", type=Path, default=Path("runs/learning"))
    args = parser.parse_args()

    from rubricrl.judges import make_judge
    from rubricrl.train.config import load_config
    from rubricrl.train.data import load_prompt_data
    from rubricrl.train.run import run_training

    reference = load_config(None, args.set)
    settings = {"reward_judge": reference.reward.judge, "eval_judge": reference.eval.judge, "steps": args.steps,
                "every": args.every, "overrides": args.set}
    points: list[dict] = earlier_points(args.out / "curves.json", settings, args.seeds)
    version = code_version()
    for seed in args.seeds:
        config = load_config(None, [*args.set, f"grpo.max_steps={args.steps}", f"grpo.seed={seed}",
                                    f"output_dir={args.out / f'seed{seed}'}", "eval.enabled=false"])
        data = load_prompt_data(config.data.train, config.data.heldout, config.rubric, config.data.prompt_field,
                                config.data.limit_train, config.data.limit_heldout, config.data.system_prompt)
        judges = {"reward judge": make_judge(config.reward.judge), "independent judge": make_judge(config.eval.judge)}
        mine: list[dict] = []
        callback = CurveCallback(data, judges, args.every, config.eval.max_new_tokens, seed, mine)
        started = time.perf_counter()
        run_training(config, callbacks=[callback], log=lambda m: print(m, flush=True))
        points += [{**p, "code": version} for p in mine]
        print(f"[seed {seed}] done in {time.perf_counter() - started:.0f} s", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "curves.json").write_text(json.dumps({"points": points, **settings}, indent=1))
    names = ["reward judge", "independent judge"]
    seeds = sorted({p["seed"] for p in points})
    versions = {p["seed"]: p.get("code", "unknown") for p in points}
    plot(points, names, args.out / "curves.png")
    print(f"\nreward judge {settings['reward_judge']}; independent judge {settings['eval_judge']}; seeds {seeds}; "
          f"code " + ", ".join(f"seed {k} at {v}" for k, v in sorted(versions.items()))
          + ("  (the seeds were trained at DIFFERENT commits)" if len(set(versions.values())) > 1 else ""))
    print(f"{'step':>5}  " + "  ".join(f"{n:>34}" for n in names))
    for step in sorted({p["step"] for p in points}):
        cells = []
        for name in names:
            at = [p for p in points if p["step"] == step]
            mean = sum(sum(p["scores"][name].values()) / max(len(p["scores"][name]), 1) for p in at) / len(at)
            change = paired_from_start(points, name, step) if step else None
            cells.append(f"{mean:.3f}" + (f" ({change.mean:+.3f} [{change.ci_low:+.3f}, {change.ci_high:+.3f}])"
                                          if change else " " * 27))
        print(f"{step:>5}  " + "  ".join(f"{c:>34}" for c in cells))
    print(f"curves: {args.out / 'curves.json'}, {args.out / 'curves.png'}")


if __name__ == "__main__":
    sys.exit(main())
