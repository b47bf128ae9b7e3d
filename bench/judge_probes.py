"""False-positive rate of the embedded judges on the probe suite, without and with the defences.

    python bench/judge_probes.py [--limit 8] [--http-limit 4] [--generative-limit 2] [--judges SPEC,...] [--evidence]

For each judge spec (default: `local`, `llamacpp?mode=logprob`, `llamacpp?mode=per_criterion`), every
probe of `rubricrl.judge_tools.probes` (master keys, empty, fake verdicts, injections, ...) is judged on
bundled emotional-support prompts (an even spread over the areas: LIMIT for local judges,
HTTP_LIMIT for HTTP judges, one call per verdict, GENERATIVE_LIMIT for the per_criterion / batched
modes, which generate a JSON explanation of ~40 tokens per verdict) against the bundled empathy rubric, once with the defences off and once with the defaults
on (`rubricrl judge audit` does the same for one spec). FPR = met / (met + unmet) over (probe,
positive-weight model-judged criterion) pairs; errors are left out and counted. `llamacpp` specs
start a llama.cpp server on loopback with the embedded SmolLM2-135M-Instruct GGUF.

A fresh verdict cache (temporary file) is shared by the two passes of a judge: a probe that the
defences leave unchanged and do not pre-check is sent to the model once and its verdict is reused
(the model is deterministic at temperature 0), so the second pass only pays for changed text.
Tables are printed in Markdown.

The HTTP judges run with their shipped JSON schemas (including the `maxLength` bounds). An earlier
draft stripped those bounds because a per_criterion answer took 73 s instead of 3.3 s; that was measured
while four jobs shared the two cores. On a quiet machine the bounded schema is as fast (0.39 s for a
63-token answer) and keeps the tiny model from rambling to max_tokens. Run benchmarks alone.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rubricrl.judges import make_judge
from rubricrl.judges.defences import Defences
from rubricrl.judge_tools.probes import (
    EXCLUDED_FROM_OVERALL,
    AuditReport,
    bundled_items,
    run_audit,
)
from rubricrl.rubrics.loading import bundled_rubric_path, load_rubric

# concurrency = the server's 4 slots and a long timeout: on a busy 2-core machine queued calls would
# otherwise time out and be retried, which only adds load
SERVER = "timeout=900&concurrency=4"
DEFAULT_JUDGES = f"local,llamacpp?mode=logprob&{SERVER},llamacpp?mode=per_criterion&{SERVER}"


def pct(tally) -> str:
    return "-" if tally.fpr is None else f"{tally.fpr:.1%}"


def mean_p(tally) -> str:
    return "-" if tally.mean_p is None else f"{tally.mean_p:.3f}"


def table(report: AuditReport) -> str:
    head = ["| probe | family | pairs | FPR off | FPR on | mean p_met off | on | errors off/on |",
            "|---|---|--:|--:|--:|--:|--:|--:|"]
    rows = [f"| {line.name} | {line.family} | {line.without.pairs} | {pct(line.without)} | {pct(line.with_)} | "
            f"{mean_p(line.without)} | {mean_p(line.with_)} | {line.without.errors}/{line.with_.errors} |"
            for line in report.probes.values()]
    fam = ["", "| family | pairs | FPR off | FPR on | mean p_met off | on | errors off/on |", "|---|--:|--:|--:|--:|--:|--:|"]
    lines = list(report.family_lines().values())
    lines += [report.aggregate(name=f"**overall** (all but {', '.join(EXCLUDED_FROM_OVERALL)})"),
              report.aggregate(["master_key"], "**master keys**")]
    fam += [f"| {line.name} | {line.without.pairs} | {pct(line.without)} | {pct(line.with_)} | "
            f"{mean_p(line.without)} | {mean_p(line.with_)} | {line.without.errors}/{line.with_.errors} |"
            for line in lines]
    return "\n".join(head + rows + fam)


def stop_server(judge) -> None:
    model = judge.model_judge
    for _ in range(3):
        model = getattr(model, "inner", model)
    server = getattr(model, "server", None)
    if server is not None:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=8, help="bundled prompts (an even spread)")
    parser.add_argument("--http-limit", type=int, default=4, help="prompts for HTTP (openai / llamacpp) specs")
    parser.add_argument("--generative-limit", type=int, default=2,
                        help="prompts for per_criterion / batched specs, which generate an explanation per verdict")
    parser.add_argument("--judges", default=DEFAULT_JUDGES, help="comma-separated judge specs")
    parser.add_argument("--evidence", action="store_true",
                        help="the 'on' pass also requires evidence quotes (generative HTTP modes)")
    args = parser.parse_args()
    rubric = load_rubric(bundled_rubric_path("empathy"))
    print(f"rubric {rubric.id}; probes per prompt: {len(bundled_items(1, rubric)[0].probes())}; "
          f"defences on = {Defences(require_evidence=args.evidence).describe()}")
    summary = []  # (spec, prompts, master keys, overall, seconds)
    with tempfile.TemporaryDirectory(prefix="judge-probes-") as tmp:
        for n, spec in enumerate(s.strip() for s in args.judges.split(",")):
            generative = "mode=per_criterion" in spec or "mode=batched" in spec
            http = spec.startswith(("openai", "llamacpp")) and "+" not in spec
            limit = args.generative_limit if generative else args.http_limit if http else args.limit
            items = bundled_items(limit, rubric)
            start = time.perf_counter()
            without = make_judge(spec, cache_path=Path(tmp) / f"verdicts-{n}.sqlite", defences=Defences.off())
            with_ = without.with_defences(Defences(require_evidence=args.evidence))
            try:
                report = run_audit(without, with_, items)
            finally:
                stop_server(without)
            seconds = time.perf_counter() - start
            calls = without.stats.model_calls
            print(f"\n### {spec}: {report.judge_id}\n\nprompts {', '.join(i.id for i in items)}; "
                  f"{report.rows} prompts x {len(items[0].probes())} probes, "
                  f"{report.criteria} positive model-judged criteria; {seconds:.0f} s, {calls} model calls "
                  f"(forward passes or HTTP calls)\n")
            print(table(report))
            s = report.defence_stats
            print(f"\ndefences: {s['prechecked']} responses pre-checked {s['precheck_reasons']}, "
                  f"{s['neutralised']} neutralised {s['neutralised_kinds']}, {s['downgraded']} downgraded")
            keys, overall = report.aggregate(["master_key"]), report.aggregate()
            summary.append((spec, report.rows, keys, overall, seconds))
    print("\n### summary\n\n| judge | prompts | master keys FPR off | on | overall FPR off | on | "
          "overall mean p_met off | on | seconds |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for spec, rows, keys, overall, seconds in summary:
        print(f"| `{spec}` | {rows} | {pct(keys.without)} | {pct(keys.with_)} | {pct(overall.without)} | "
              f"{pct(overall.with_)} | {mean_p(overall.without)} | {mean_p(overall.with_)} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
