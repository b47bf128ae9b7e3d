"""verl reward functions: rubric rewards through verl's custom reward function.

Where verl reads the function depends on its version (docs/scaling.md, examples/verl/):

    verl >= 0.7.1 (0.8.x, 0.9.x)          verl 0.5.x - 0.7.0
    reward.custom_reward_function.path    custom_reward_function.path   (0.7.1 and 0.8.x main_ppo still
    reward.custom_reward_function.name    custom_reward_function.name    migrate these; 0.9 ignores them)

    path: pkg://rubricrl.integrations.verl (verl >= 0.7.0), or the file examples/verl/reward.py
    name: compute_score        any manager calling one sample at a time: the reward loop (executor
                               threads) and the legacy naive/dapo managers
          compute_score_async  the reward loop only: it awaits it, no thread
          compute_score_batch  the legacy batch manager only (verl <= 0.7.0, reward_model.reward_manager=batch;
                               on 0.7.0 also reward_model.use_reward_loop=false): lists in, list out

Every call returns `{"score": reward, **logs}` with the same keys for every sample (rewards.rows.LOG_KEYS).
The rubric comes from `ground_truth` when it holds one (a rubric object or list, a JSON string, a
bundled name), else from `extra_info["rubric"]`, else the default rubric; the conversation from
`extra_info["prompt"]` (string or messages), else `extra_info["question"]` (verl does not pass the
prompt to reward functions). Options come from reward_kwargs, else the environment:
`judge` (RUBRICRL_JUDGE, default `gate+exemplar+local`), `rubric` (RUBRICRL_RUBRIC: bundled name or file),
`error_policy` (RUBRICRL_ERROR_POLICY: `zero`, the default, or `raise`), `soft` (default true),
`mode` (RUBRICRL_REWARD_MODE: `pointwise`, the default, or `pairwise`) and `pairwise_max_pairs`.
A judge is built once per process and option set and runs on its own event loop (rewards/runner.py).

Pairwise mode (a sample's reward is its criterion-weighted win rate against the other samples of its
prompt, rewards/pairwise.py) needs a prompt's samples in one call, so it works with `compute_score_batch`
only: the samples of one call with the same conversation (`extra_info` prompt) and rubric form a group,
wherever they stand in the batch (verl may reorder a batch to balance its workers; verl passes no `uid`
to reward functions). `compute_score` and `compute_score_async` get one sample per call (the reward loop
spreads a prompt's samples over workers), so with `mode: pairwise` they raise at once, naming the fix.
Errors name a sample by its `extra_info` `id`, `split` and `index` (or `uid`) when it has them: verl's
reward loop sends one sample per call, so the position in the call says nothing.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from rubricrl.core.messages import Conversation, as_conversation
from rubricrl.rewards.functions import JudgeFailure
from rubricrl.rubrics.model import Rubric
from rubricrl.rewards.runner import JudgeRunner
from rubricrl.rewards.rows import ERROR_POLICIES, RowInput, RowReward, failures, row_reward
from rubricrl.rubrics.values import is_blank, load_named_rubric, looks_like_rubric, plain, rubric_value

JUDGE_ENV, RUBRIC_ENV, POLICY_ENV = "RUBRICRL_JUDGE", "RUBRICRL_RUBRIC", "RUBRICRL_ERROR_POLICY"
MODE_ENV = "RUBRICRL_REWARD_MODE"
DEFAULT_JUDGE = "gate+exemplar+local"
OPTIONS = ("judge", "rubric", "error_policy", "soft", "mode", "pairwise_max_pairs")
MODES = ("pointwise", "pairwise")
PER_SAMPLE_PAIRWISE = ("mode pairwise compares the samples of one prompt, and {name} gets one sample per call (verl's "
                       "reward loop spreads a prompt's samples over its workers); use compute_score_batch with "
                       "reward_model.reward_manager=batch (verl 0.5.0 to 0.7.0; on 0.7.0 also "
                       "reward_model.use_reward_loop=false), or mode pointwise")
VERL_EXTRAS = ("reward_router_address", "reward_model_tokenizer")  # the reward loop may pass these; unused
# extra_info keys that name a sample in errors (prepare_data.py writes the first three)
SAMPLE_KEYS = ("id", "split", "index", "uid")

log = logging.getLogger("rubricrl.verl")
_scorers: dict[tuple, _Scorer] = {}
_scorers_lock = threading.Lock()
_warned: set[str] = set()


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  **kwargs: Any) -> dict[str, float]:
    """One sample's reward and logs, as verl's naive/dapo/reward-loop managers call it."""
    return _scorer(kwargs, per_sample="compute_score").score([(data_source, solution_str, ground_truth, extra_info)])[0]


def compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                        extra_infos: Sequence[dict | None] | None = None, **kwargs: Any) -> list[dict[str, float]]:
    """Every sample's reward and logs in one judge call, as verl's batch manager calls it."""
    extra_infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    return _scorer(kwargs).score(list(zip(data_sources, solution_strs, ground_truths, extra_infos, strict=True)))


async def compute_score_async(data_source: Any, solution_str: str, ground_truth: Any,
                              extra_info: dict | None = None, **kwargs: Any) -> dict[str, float]:
    """compute_score for callers that await (verl's reward loop with an async reward function)."""
    scorer = _scorer(kwargs, per_sample="compute_score_async")
    return (await scorer.ascore([(data_source, solution_str, ground_truth, extra_info)]))[0]


def totals() -> dict[str, int]:
    """Counts over every call in this process: samples, scored, unscored, judge_error; a critic judge's
    verified, unverified and confirmed criteria; pairwise mode's pairs, judged_pairs, comparisons and
    disagreements."""
    out: Counter = Counter()
    for scorer in list(_scorers.values()):
        out.update(scorer.totals)
    return dict(out)


class _Scorer:
    """One judge, default rubric and policy; turns verl samples into rows and rewards into dicts."""

    def __init__(self, judge: str, rubric: str | None, error_policy: str, soft: bool, mode: str = "pointwise",
                 max_pairs: int | None = None):
        from rubricrl.judges import make_judge
        from rubricrl.judges.base import verifier_ids

        if error_policy not in ERROR_POLICIES:
            raise ValueError(f"error_policy must be one of {ERROR_POLICIES}, not {error_policy!r} (verl needs a "
                             "number for every sample, so rows cannot be masked)")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if mode == "pairwise":
            from rubricrl.judges.pairwise import pairwise_spec_problem

            problem = pairwise_spec_problem(judge)
            if problem:
                raise ValueError(f"mode pairwise: {problem}")
        elif max_pairs is not None:
            raise ValueError("pairwise_max_pairs applies only with mode pairwise")
        if max_pairs is not None and max_pairs < 1:
            raise ValueError(f"pairwise_max_pairs must be at least 1, not {max_pairs}")
        self.default: Rubric | None = load_named_rubric(rubric) if rubric else None
        built = make_judge(judge)
        self.verifiers = verifier_ids(built.report())
        self.runner = JudgeRunner(built)
        self.error_policy, self.soft, self.mode, self.max_pairs = error_policy, soft, mode, max_pairs
        self.pairwise = None
        if mode == "pairwise":
            from rubricrl.judges.pairwise import PairwiseRubricJudge

            self.pairwise = PairwiseRubricJudge(built, soft=soft)
        self.calls = 0
        self.totals: Counter = Counter()
        self._lock = threading.Lock()

    def score(self, samples: list[tuple]) -> list[dict[str, float]]:
        names = [sample_name(i, s[3]) for i, s in enumerate(samples)]
        rows = [self._row(name, *s) for name, s in zip(names, samples)]
        if self.pairwise is not None:
            return self._finish(names, rows, self.runner.call(self._pairwise(rows)))
        return self._finish(names, rows, self._pointwise(rows, self.runner.run(rows)))

    async def ascore(self, samples: list[tuple]) -> list[dict[str, float]]:
        names = [sample_name(i, s[3]) for i, s in enumerate(samples)]
        rows = [self._row(name, *s) for name, s in zip(names, samples)]
        return self._finish(names, rows, self._pointwise(rows, await self.runner.arun(rows)))

    def _pointwise(self, rows: list[RowInput], verdicts) -> list[RowReward]:
        return [row_reward(r.rubric, v, soft=self.soft, verifiers=self.verifiers) for r, v in zip(rows, verdicts)]

    async def _pairwise(self, rows: list[RowInput]) -> list[RowReward]:
        """Win rates within the call's groups (one conversation and rubric each), on the runner's loop."""
        from rubricrl.rewards.pairwise import PairwiseRow, groups_by_key, pairwise_results, pairwise_row_reward

        with self._lock:
            call, self.calls = self.calls, self.calls + 1
        groups = groups_by_key([(r.conversation, r.rubric.content_hash()) for r in rows])
        found, cost = await pairwise_results(self.pairwise, [PairwiseRow(r.conversation, r.response, r.rubric)
                                                             for r in rows], groups, max_pairs=self.max_pairs,
                                             seed=str(call))
        with self._lock:
            self.totals.update(cost.to_dict())
        return [pairwise_row_reward(r.rubric, f, soft=self.soft, verifiers=self.verifiers) for r, f in zip(rows, found)]

    def _finish(self, names: list[str], rows: list[RowInput], rewards: list[RowReward]) -> list[dict[str, float]]:
        with self._lock:
            self.totals["samples"] += len(rewards)
            self.totals.update(r.status for r in rewards)
            for key in ("verified", "unverified", "confirmed"):
                self.totals[key] += sum(getattr(r.critic, key) for r in rewards)
        failed = failures(rewards)
        if failed:
            self._report(names, failed, len(rewards))
        return [{"score": r.reward, **r.logs()} for r in rewards]

    def _report(self, names: list[str], failed: list[tuple[int, RowReward]], n: int) -> None:
        first = f"{names[failed[0][0]]}: {failed[0][1].problem}"
        if self.error_policy == "raise":
            raise JudgeFailure(f"{len(failed)} of {n} samples not scored (error_policy raise): {first}")
        log.warning("%d of %d samples not scored, reward 0.0 (flagged rubric_scored=0): %s", len(failed), n, first)

    def _row(self, name: str, data_source: Any, solution_str: str, ground_truth: Any,
             extra_info: dict | None) -> RowInput:
        extra = extra_info if isinstance(extra_info, dict) else {}
        where = f"{name} (data_source {plain(data_source)!r})"
        if not isinstance(solution_str, str):
            raise TypeError(f"{where}: solution_str must be a string, got {type(solution_str).__name__}")
        return RowInput(_conversation(extra, where), solution_str, self._rubric(ground_truth, extra, where))

    def _rubric(self, ground_truth: Any, extra: dict, where: str) -> Rubric:
        if not is_blank(ground_truth) and looks_like_rubric(ground_truth):
            return rubric_value(ground_truth, f"{where} reward_model.ground_truth")
        if not is_blank(extra.get("rubric")):
            return rubric_value(extra["rubric"], f"{where} extra_info.rubric")
        if self.default is not None:
            return self.default
        raise ValueError(f"{where}: no rubric: reward_model.ground_truth holds none and extra_info has no `rubric`; "
                         "put the rubric (JSON) in either (examples/verl/prepare_data.py) or set a default rubric "
                         f"with reward_kwargs.rubric or {RUBRIC_ENV}")


def sample_name(position: int, extra_info: Any) -> str:
    """How errors and warnings name a sample: by the `extra_info` keys that identify it in the data
    (`sample id='b', split='train', index=3`), else by its position in the call (`sample 0`)."""
    extra = extra_info if isinstance(extra_info, dict) else {}
    found = [(key, plain(extra[key])) for key in SAMPLE_KEYS if key in extra]
    found = [(key, value) for key, value in found if not is_blank(value) and isinstance(value, (str, int, float))]
    if not found:
        return f"sample {position}"
    return "sample " + ", ".join(f"{key}={value!r}" for key, value in found)


def _conversation(extra: dict, where: str) -> Conversation:
    for key in ("prompt", "question"):
        value = plain(extra.get(key))
        if is_blank(value) or value == []:
            continue
        try:
            return as_conversation(value)
        except (ValidationError, TypeError, ValueError):
            raise ValueError(f"{where}: extra_info.{key} is not a string or a list of {{role, content}} messages; "
                             "fix it in the data preparation") from None
    _warn_once("no-prompt", "extra_info has no `prompt` (or `question`): model judges see the response without the "
                            "conversation; copy the prompt into extra_info in data preparation "
                            "(examples/verl/prepare_data.py)")
    return as_conversation("")


def _scorer(kwargs: dict[str, Any], per_sample: str | None = None) -> _Scorer:
    """The scorer for these options; `per_sample` names the calling function when it gets one sample per
    call (pairwise mode refused there)."""
    unknown = sorted(set(kwargs) - set(OPTIONS) - set(VERL_EXTRAS))
    if unknown:
        _warn_once(f"kwargs:{unknown}", f"ignoring unknown reward_kwargs {unknown}; rubricrl reads {list(OPTIONS)}")
    soft = kwargs.get("soft", True)
    if isinstance(soft, str):
        soft = soft.strip().lower() not in ("0", "false", "no", "off")
    mode = str(kwargs.get("mode") or os.environ.get(MODE_ENV) or "pointwise").strip().lower()
    if mode == "pairwise" and per_sample:
        raise ValueError(PER_SAMPLE_PAIRWISE.format(name=per_sample))
    max_pairs = kwargs.get("pairwise_max_pairs")
    key = (kwargs.get("judge") or os.environ.get(JUDGE_ENV) or DEFAULT_JUDGE,
           kwargs.get("rubric") or os.environ.get(RUBRIC_ENV) or None,
           kwargs.get("error_policy") or os.environ.get(POLICY_ENV) or "zero", bool(soft), mode,
           int(max_pairs) if max_pairs not in (None, "") else None)
    scorer = _scorers.get(key)
    if scorer is None:
        with _scorers_lock:  # the first call builds the judge (models load once per process)
            scorer = _scorers.get(key)
            if scorer is None:
                scorer = _scorers[key] = _Scorer(*key)
    return scorer


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message)
