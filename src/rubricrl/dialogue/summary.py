"""The Sentient-style summary of simulated conversations (their HTML report is
`rubricrl.reports.simulation`).

Benchmark score = mean final emotion (0-100) over conversations, with a bootstrap 95% CI;
success = reached 100, failure = fell below 10. Conversations that ended in an error are
counted and left out of the score (their final emotion is not a measurement).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass

from rubricrl.dialogue.rollout import Transcript
from rubricrl.scoring.formulas import Estimate, bootstrap


@dataclass
class SimulationSummary:
    conversations: int
    scored: int
    errors: int
    score: Estimate | None  # mean final emotion, 0-100
    successes: int
    failures: int
    mean_turns: float | None
    end_reasons: dict[str, int]
    error_reasons: dict[str, int]
    empty_supporter_replies: int
    per_persona: dict[str, float]

    def to_dict(self) -> dict:
        return asdict(self)


def summarize_simulation(transcripts: list[Transcript], *, success_at: float = 100, failure_below: float = 10,
                         seed: int = 0) -> SimulationSummary:
    ok = [t for t in transcripts if t.end_reason != "error"]
    finals = [t.final_emotion for t in ok]
    score = None
    if finals:
        unit = bootstrap([f / 100 for f in finals], seed=seed, clip=False)
        mean = sum(finals) / len(finals)  # not unit.mean * 100: 68.15 must not print as 68.1 after a round trip
        score = Estimate(mean, unit.std * 100, unit.ci_low * 100, unit.ci_high * 100, unit.n)
    by_persona: dict[str, list[float]] = defaultdict(list)
    for t in ok:
        by_persona[t.persona_id].append(t.final_emotion)
    reasons = Counter((next((x.error for x in t.turns if x.error), "") or "unknown").split(":", 1)[0]
                      for t in transcripts if t.end_reason == "error")
    return SimulationSummary(
        conversations=len(transcripts), scored=len(ok), errors=len(transcripts) - len(ok), score=score,
        successes=sum(f >= success_at for f in finals), failures=sum(f < failure_below for f in finals),
        mean_turns=sum(t.supporter_turns for t in ok) / len(ok) if ok else None,
        end_reasons=dict(Counter(t.end_reason for t in transcripts)), error_reasons=dict(reasons),
        empty_supporter_replies=sum(t.notes.count("empty_supporter_reply") for t in transcripts),
        per_persona={k: sum(v) / len(v) for k, v in sorted(by_persona.items())})
