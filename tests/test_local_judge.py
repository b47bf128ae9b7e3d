"""The local yes/no judge: shared-prefix probabilities equal the naive computation, prechecks,
errors for inputs that do not fit, and the embedded model converted once."""

import asyncio

import numpy as np
import pytest

from rubricrl.core.messages import as_conversation
from rubricrl.judges.base import JudgeRequest
from rubricrl.judges.local import _Pack, _row_chunks, _tree_batch
from rubricrl.rubrics.model import Criterion
from rubricrl.core.verdicts import Status

pytestmark = pytest.mark.slow

CRITERIA = tuple(Criterion(id=f"c{i}", text=t) for i, t in enumerate([
    "The reply acknowledges that the person feels discouraged.",
    "The reply asks an open question.",
    "The reply gives practical advice.",
    "The reply is dismissive.",
    "The reply mentions the test.",
]))
RESPONSES = [
    "That sounds really discouraging after trying so hard. What happened this time?",
    "Just practice more.",
    "Failing three times does not make you an idiot. Many people need several tries, and the nerves on the day "
    "are real. Would it help to talk through what felt hardest?",
    "ok",
]


def requests(conversation_text="I failed my driving test for the third time and I feel like an idiot."):
    conv = as_conversation(conversation_text)
    return [JudgeRequest(conv, r, CRITERIA) for r in RESPONSES]


def test_shared_prefix_equals_naive_per_criterion(local_judge):
    reqs = requests()
    shared = local_judge.probabilities(reqs, shared=True)
    naive = local_judge.probabilities(reqs, shared=False)
    a = np.array([[p.p_met for p in row] for row in shared])
    b = np.array([[p.p_met for p in row] for row in naive])
    assert a.shape == (len(RESPONSES), len(CRITERIA))
    assert np.abs(a - b).max() < 1e-3
    # The probabilities are not all the same number: the comparison is meaningful.
    assert a.std() > 1e-3
    mass_a = np.array([[p.answer_mass for p in row] for row in shared])
    mass_b = np.array([[p.answer_mass for p in row] for row in naive])
    assert np.abs(mass_a - mass_b).max() < 1e-3


def test_shared_prefix_equal_when_packs_are_split_into_many_batches(local_judge):
    reqs = requests()
    budget = local_judge.max_batch_tokens
    local_judge.max_batch_tokens = 64  # forces one pack per forward pass
    try:
        split = local_judge.probabilities(reqs, shared=True)
    finally:
        local_judge.max_batch_tokens = budget
    whole = local_judge.probabilities(reqs, shared=True)
    assert np.abs(np.array([[p.p_met for p in r] for r in split]) -
                  np.array([[p.p_met for p in r] for r in whole])).max() < 1e-4


def test_shared_prefix_uses_fewer_forward_tokens(local_judge):
    reqs = requests()
    before = local_judge.stats.tokens
    local_judge.probabilities(reqs, shared=True)
    shared_tokens = local_judge.stats.tokens - before
    before = local_judge.stats.tokens
    local_judge.probabilities(reqs, shared=False)
    naive_tokens = local_judge.stats.tokens - before
    assert naive_tokens > 3 * shared_tokens


def test_judge_groups_by_conversation_and_keeps_order(local_judge):
    reqs = requests() + requests("My best friend stopped answering my messages.")
    verdicts = asyncio.run(local_judge.judge(reqs))
    assert [len(v) for v in verdicts] == [len(CRITERIA)] * len(reqs)
    for req, row in zip(reqs, verdicts):
        assert [v.criterion_id for v in row] == [c.id for c in req.criteria]
        for v in row:
            assert v.status in (Status.MET, Status.UNMET)
            assert 0.0 <= v.p_met <= 1.0
            assert (v.status is Status.MET) == (v.p_met >= local_judge.threshold)
            assert v.tokens > 0 and "P(yes)=" in v.evidence
    # same conversation, same response -> same verdicts whichever batch it was in
    alone = asyncio.run(local_judge.judge(requests()[:1]))[0]
    assert [round(v.p_met, 4) for v in alone] == [round(v.p_met, 4) for v in verdicts[0]]


def test_empty_response_is_unmet_by_precheck_without_model_call(local_judge):
    conv = as_conversation("hello")
    calls = local_judge.stats.model_calls
    [row] = asyncio.run(local_judge.judge([JudgeRequest(conv, "  \n", CRITERIA)]))
    assert local_judge.stats.model_calls == calls
    assert all(v.status is Status.UNMET and v.reason.startswith("precheck") for v in row)


def test_response_longer_than_context_is_an_error_verdict(local_judge):
    conv = as_conversation("hello")
    huge = "word " * 200_000  # 1 MB
    errors = local_judge.stats.errors
    [row, ok] = asyncio.run(local_judge.judge([JudgeRequest(conv, huge, CRITERIA),
                                               JudgeRequest(conv, "Hi, how are you feeling?", CRITERIA)]))
    assert all(v.status is Status.ERROR and v.reason.startswith("too_long") for v in row)
    assert all(v.status in (Status.MET, Status.UNMET) for v in ok)
    assert local_judge.stats.errors == errors + len(CRITERIA)


def test_tree_mask_blocks_sibling_suffixes():
    pack = _Pack(0, [11, 12], [[21, 22], [31]])
    ids, positions, mask, readout = _tree_batch([pack], offset=3, pad_id=0)
    assert ids.tolist() == [[11, 12, 21, 22, 31]]
    assert positions.tolist() == [[3, 4, 5, 6, 5]]  # suffixes restart after the response
    m = mask[0, 0].int().tolist()
    # columns: 3 prefix, then r1 r2 s1a s1b s2
    assert m[0] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert m[3] == [1, 1, 1, 1, 1, 1, 1, 0]
    assert m[4] == [1, 1, 1, 1, 1, 0, 0, 1]  # s2 sees the response, not suffix 1
    assert readout.tolist() == [[0, 3], [0, 4]]


def test_row_chunks_respect_budget():
    assert _row_chunks([10, 10, 10, 10], 25) == [(0, 2), (2, 2)]
    assert _row_chunks([30], 10) == [(0, 1)]  # a row larger than the budget still runs alone
    assert _row_chunks([], 10) == []


def test_embedded_model_is_converted_once(monkeypatch):
    from rubricrl.llm import models

    first = models.resolve(None)
    monkeypatch.setattr(models, "_convert", lambda *a: pytest.fail("converted a second time"))
    assert models.resolve("smollm2") == first
    assert models.resolve(str(models.embedded_gguf_path())) == first  # the same file given as a path
    assert (models.Path(first) / "model.safetensors").is_file()


def test_missing_gguf_and_unknown_spec_errors(tmp_path):
    from rubricrl.llm import models

    with pytest.raises(models.ModelNotFoundError, match="GGUF file not found"):
        models.resolve(str(tmp_path / "nope.gguf"))
    assert models.resolve("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"  # hub ids pass through
