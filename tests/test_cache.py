"""SQLite verdict cache: hits, misses only sent on, errors never cached, concurrent writers."""

import asyncio
import multiprocessing as mp

from rubricrl.core.messages import as_conversation
from rubricrl.judges.base import JudgeRequest, JudgeStats, StatsJudge
from rubricrl.judges.cache import CachedJudge, VerdictCache, verdict_key
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status, Verdict, error_verdict

CONV = as_conversation("I lost my job today.")
CRITS = (Criterion(id="a", text="Validates the feeling."), Criterion(id="b", text="Asks a question."),
         Criterion(id="c", text="Fails on purpose."))


class CountingJudge(StatsJudge):
    """Answers `met` for a/b, `error` for c, and records what it was asked."""

    judge_id = "counting@v1"

    def __init__(self):
        self.stats = JudgeStats()
        self.asked: list[tuple[str, ...]] = []

    async def judge(self, requests):
        out = []
        for r in requests:
            self.stats.model_calls += 1
            self.asked.append(tuple(c.id for c in r.criteria))
            out.append([error_verdict(c.id, self.judge_id, "http: 500") if c.id == "c" else
                        Verdict(criterion_id=c.id, status=Status.MET, p_met=0.9, judge_id=self.judge_id)
                        for c in r.criteria])
        return out


def test_second_run_hits_cache_and_only_errors_are_retried(tmp_path):
    inner = CountingJudge()
    judge = CachedJudge(inner, VerdictCache(tmp_path / "v.sqlite"))
    reqs = [JudgeRequest(CONV, "That is hard. How are you?", CRITS), JudgeRequest(CONV, "ok", CRITS)]
    first = asyncio.run(judge.judge(reqs))
    assert [[v.status for v in row] for row in first] == [[Status.MET, Status.MET, Status.ERROR]] * 2
    assert inner.stats.model_calls == 2 and judge.hits == 0 and judge.misses == 6

    second = asyncio.run(judge.judge(reqs))
    # a and b come from the cache; only the errored c is asked again
    assert inner.asked[2:] == [("c",), ("c",)]
    assert [v.cached for v in second[0]] == [True, True, False]
    assert judge.hits == 4
    assert second[0][0].tokens == 0  # a cached verdict costs nothing


def test_cache_persists_across_processes_and_objects(tmp_path):
    path = tmp_path / "v.sqlite"
    judge = CachedJudge(CountingJudge(), VerdictCache(path))
    asyncio.run(judge.judge([JudgeRequest(CONV, "x", CRITS[:2])]))
    fresh_inner = CountingJudge()
    again = CachedJudge(fresh_inner, VerdictCache(path))
    asyncio.run(again.judge([JudgeRequest(CONV, "x", CRITS[:2])]))
    assert fresh_inner.stats.model_calls == 0 and again.hits == 2


def test_key_depends_on_what_decides_a_verdict():
    base = verdict_key("j", CONV, "resp", CRITS[0])
    assert base == verdict_key("j", CONV, "resp", CRITS[0])
    assert base != verdict_key("j2", CONV, "resp", CRITS[0])
    assert base != verdict_key("j", CONV, "resp!", CRITS[0])
    assert base != verdict_key("j", as_conversation("other"), "resp", CRITS[0])
    assert base != verdict_key("j", CONV, "resp", Criterion(id="a", text="Different text."))
    # the weight does not change what the judge decides, so it shares the entry
    assert base == verdict_key("j", CONV, "resp", Criterion(id="a", text="Validates the feeling.", weight=5))


def _writer(path: str, worker: int, n: int) -> None:
    cache = VerdictCache(path)
    for i in range(n):
        key = f"k{i % 50}-{worker % 2}"  # overlapping keys across workers
        cache.put_many([(key, Verdict(criterion_id=f"c{i}", status=Status.UNMET, judge_id="w"))])
        cache.put_many([(f"w{worker}-{i}", Verdict(criterion_id="x", status=Status.MET, judge_id="w"))])
    cache.close()


def test_concurrent_writers(tmp_path):
    path = str(tmp_path / "v.sqlite")
    VerdictCache(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 100)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    cache = VerdictCache(path)
    # 4 workers x 100 unique keys + 2 x 50 shared keys
    assert len(cache) == 400 + 100
    assert cache.get_many(["w3-99"])["w3-99"].status is Status.MET
