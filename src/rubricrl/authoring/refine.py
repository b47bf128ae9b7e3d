"""Refine a rubric: split compound criteria, drop near-duplicates, re-weight correlated criteria.

Why: a criterion that bundles two requirements gives no credit for meeting one of them; two
criteria that ask for the same thing, or that a judge always decides together, count one quality
twice. The three steps run in that order and every change is recorded (`Change`) so the CLI can
show a before/after diff. The rules, with a worked example, are in docs/rubrics.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from rubricrl.llm.chat import ChatModel
from rubricrl.judges.base import Judge, JudgeRequest
from rubricrl.rubrics.loading import rubric_from_data
from rubricrl.rubrics.rows import ScoringRow
from rubricrl.rubrics.model import Criterion, Rubric
from rubricrl.authoring.generate import extract_json
from rubricrl.core.verdicts import Status, Verdict

SUBJECT = re.compile(r"^(the (?:reply|response|answer|assistant)|it)\s+", re.IGNORECASE)
# Third-person requirement verbs that may start a clause after "and" / ";" (the conservative split rule).
VERBS = frozenset({
    "acknowledges", "addresses", "affirms", "answers", "apologises", "apologizes", "asks", "avoids", "checks",
    "cites", "clarifies", "describes", "directs", "does", "doesn't", "encourages", "ends", "explains",
    "expresses", "follows", "gives", "identifies", "includes", "invites", "is", "keeps", "lists", "mentions",
    "names", "normalises", "normalizes", "notes", "offers", "points", "provides", "reassures", "recommends",
    "reflects", "refers", "refrains", "remains", "respects", "shows", "starts", "states", "stays", "suggests",
    "summarises", "summarizes", "tells", "thanks", "uses", "validates", "warns", "welcomes", "blames", "dismisses",
    "judges", "lectures", "minimises", "minimizes", "pressures", "rushes", "assumes", "promises", "diagnoses",
})
ADVERBS = ("also", "then", "never", "it")
# "; " or "and" that is followed by a requirement verb and then a word other than "of" ("names of ...").
SEPARATOR = re.compile(r"\s*;\s*(?=(?:(?:also|then|never|it)\s+)*(?:VERB)\s+(?!of\b)\w)"
                       r"|,?\s+and\s+(?=(?:(?:also|then|never|it)\s+)*(?:VERB)\s+(?!of\b)\w)"
                       .replace("VERB", "|".join(sorted(VERBS, key=len, reverse=True))), re.IGNORECASE)
# A condition or contrast may apply to one clause or to all of them: such a criterion is never split.
CONDITIONAL = re.compile(r"\b(if|when|whenever|unless|only|except|until|or|either|rather than|instead of|but|"
                         r"however|although|though|while|whether)\b", re.IGNORECASE)
MIN_JOINT = 5  # responses both criteria must have decided (met/unmet) before their correlation counts
SMALL_SAMPLE = 50  # fewer responses than this get a "noisy correlations" note


@dataclass(frozen=True)
class Change:
    """One line of the diff: a weight of None means "not in that rubric"."""

    id: str
    before: float | None
    after: float | None
    action: str


@dataclass
class Refinement:
    rubric: Rubric
    changes: list[Change]
    notes: list[str] = field(default_factory=list)


def _starts_with_verb(clause: str) -> bool:
    words = clause.lower().split()
    while words and words[0] in ADVERBS:
        words = words[1:]
    return bool(words) and words[0] in VERBS


def split_compound(text: str) -> list[str] | None:
    """Parts of a compound criterion, or None when it is not (conservatively) compound.

    Split only `The reply <verb> ... and <verb> ...` (or `; <verb> ...`): the text starts with a subject
    (the reply/response/answer/assistant, it), every clause starts with a requirement verb from VERBS,
    every part has at least two words, and no condition or alternative (if, when, unless, only, or, ...)
    appears anywhere, since it may apply to one clause or to all."""
    subject = SUBJECT.match(text)
    if subject is None or CONDITIONAL.search(text):
        return None
    body = text[subject.end():].strip().rstrip(".")
    clauses = SEPARATOR.split(body)
    if len(clauses) < 2 or not _starts_with_verb(clauses[0]):
        return None
    parts = []
    for clause in clauses:
        words = clause.split()
        while words and words[0].lower() in ("also", "then", "it"):
            words = words[1:]
        if len(words) < 2:
            return None
        parts.append(f"{subject.group(1)[0].upper()}{subject.group(1)[1:]} {' '.join(words)}.")
    return parts


SPLIT_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["atomic", "parts"],
                "properties": {"atomic": {"type": "boolean"},
                               "parts": {"type": "array", "items": {"type": "string"}, "maxItems": 5}}}


async def llm_split(model: ChatModel, text: str) -> tuple[list[str] | None, str]:
    """Ask a chat model whether a criterion bundles several requirements: (parts or None, note).
    The answer is used only if it is valid: 2-5 distinct parts of at least three words, each made
    mostly (>= 60% of its longer words) of words from the original, so nothing new is invented."""
    messages = [{"role": "system", "content": "You edit grading rubrics. Answer in JSON only."},
                {"role": "user", "content": f"Criterion: {text}\n\nDoes this criterion check one thing (atomic) or "
                 "several separate requirements? If several, rewrite it as 2 to 5 self-contained criteria that "
                 'each start with "The reply". Return {"atomic": true, "parts": []} or {"atomic": false, '
                 '"parts": ["The reply ...", ...]}.'}]
    result = await model.chat(messages, max_tokens=300, json_schema=SPLIT_SCHEMA)
    answer = extract_json(result.text) if result.ok else None
    if not isinstance(answer, dict) or not isinstance(answer.get("atomic"), bool):
        return None, f"splitter answer unusable ({result.error or 'no JSON with a boolean atomic'}); kept as is"
    parts = answer.get("parts")
    if answer["atomic"]:
        return None, ""
    original = set(re.findall(r"[a-z']{4,}", text.lower()))
    if not isinstance(parts, list) or not 2 <= len(parts) <= 5 or len({str(p).lower() for p in parts}) < len(parts):
        return None, "splitter gave no 2-5 distinct parts; kept as is"
    for part in parts:
        words = re.findall(r"[a-z']{4,}", str(part).lower())
        if len(str(part).split()) < 3 or not words or sum(w in original for w in words) / len(words) < 0.6:
            return None, f"splitter part {str(part)[:60]!r} is not taken from the criterion; kept as is"
    return [str(p).strip() for p in parts], ""


def near_duplicates(criteria: Sequence[Criterion], threshold: float,
                    embed: Callable[[list[str]], np.ndarray]) -> list[tuple[int, int, float]]:
    """Pairs (i, j, cosine) with cosine >= threshold, most similar first. Only criteria without a
    check, and only pairs of the same weight sign: "blames the person" (-) and "does not blame the
    person" (+) read alike but are opposites, not duplicates."""
    idx = [i for i, c in enumerate(criteria) if c.check is None and c.weight != 0]
    if len(idx) < 2:
        return []
    vectors = embed([criteria[i].text for i in idx])
    sims = vectors @ vectors.T
    pairs = [(idx[a], idx[b], float(sims[a, b])) for a in range(len(idx)) for b in range(a + 1, len(idx))
             if sims[a, b] >= threshold and (criteria[idx[a]].weight > 0) == (criteria[idx[b]].weight > 0)]
    return sorted(pairs, key=lambda p: -p[2])


SAME_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["same"],
               "properties": {"same": {"type": "boolean"}}}


async def confirm_same(model: ChatModel, a: str, b: str) -> bool | None:
    """Does a chat model say the two criteria require the same thing? None if its answer is unusable."""
    result = await model.chat([{"role": "user", "content": f"Criterion A: {a}\nCriterion B: {b}\n\nDo these two "
                                "grading criteria require the same thing of a reply, so that a reply meeting one "
                                'always meets the other? Return {"same": true} or {"same": false}.'}],
                              max_tokens=20, json_schema=SAME_SCHEMA)
    answer = extract_json(result.text) if result.ok else None
    if isinstance(answer, dict) and isinstance(answer.get("same"), bool):
        return answer["same"]
    word = result.text.strip().lower()[:3] if result.ok else ""
    return True if word.startswith("yes") else False if word.startswith("no") else None


def verdict_matrix(verdicts: Sequence[Sequence[Verdict]], ids: Sequence[str]) -> np.ndarray:
    """responses x criteria: 1.0 met, 0.0 unmet, NaN when not decided (error, skipped)."""
    out = np.full((len(verdicts), len(ids)), np.nan)
    col = {cid: j for j, cid in enumerate(ids)}
    for i, row in enumerate(verdicts):
        for v in row:
            if v.criterion_id in col and v.decided:
                out[i, col[v.criterion_id]] = 1.0 if v.status is Status.MET else 0.0
    return out


def correlations(matrix: np.ndarray, min_joint: int = MIN_JOINT) -> np.ndarray:
    """Pairwise Pearson correlation (phi for met/unmet) over the responses both criteria decided;
    NaN when fewer than `min_joint` such responses or when one criterion is constant on them."""
    n = matrix.shape[1]
    out = np.full((n, n), np.nan)
    for a in range(n):
        for b in range(a, n):
            both = ~np.isnan(matrix[:, a]) & ~np.isnan(matrix[:, b])
            x, y = matrix[both, a], matrix[both, b]
            if both.sum() >= min_joint and x.std() > 0 and y.std() > 0:
                out[a, b] = out[b, a] = float(np.corrcoef(x, y)[0, 1])
    return out


def redundant_clusters(corr: np.ndarray, weights: Sequence[float], threshold: float) -> list[list[int]]:
    """Groups (connected components, size >= 2) of criteria linked by corr * sign(w_a) * sign(w_b) >=
    threshold: criteria that move the score in the same direction together. A positive criterion and
    a pitfall that are strongly anti-correlated count one quality twice too; two positive criteria
    that exclude each other (strong negative correlation) do not, so they are not grouped."""
    n = len(weights)
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for a in range(n):
        for b in range(a + 1, n):
            if not np.isnan(corr[a, b]) and corr[a, b] * np.sign(weights[a]) * np.sign(weights[b]) >= threshold:
                parent[root(b)] = root(a)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    return [g for g in groups.values() if len(g) >= 2]


def cluster_weights(weights: Sequence[float], clusters: Sequence[Sequence[int]]) -> list[float]:
    """Scale each cluster so its total |weight| equals its largest member's |weight|, keeping the
    members' proportions and signs: weights 3, 2, 1 -> factor 3/6 -> 1.5, 1.0, 0.5."""
    out = [float(w) for w in weights]
    for group in clusters:
        total = sum(abs(weights[i]) for i in group)
        factor = max(abs(weights[i]) for i in group) / total if total else 1.0
        for i in group:
            out[i] = round(weights[i] * factor, 4)
    return out


@dataclass
class _Log:
    """What happened to each criterion id, and notes for the user."""

    actions: dict[str, list[str]] = field(default_factory=dict)
    parents: dict[str, str] = field(default_factory=dict)  # split part id -> original id
    notes: list[str] = field(default_factory=list)

    def add(self, cid: str, action: str) -> None:
        self.actions.setdefault(cid, []).append(action)


async def _split(criteria: Sequence[Criterion], splitter: ChatModel | None, log: _Log) -> list[Criterion]:
    """Step 1: positive criteria without a check or examples, by the rule, then by the splitter."""
    taken, out = {c.id for c in criteria}, []
    for c in criteria:
        eligible = c.weight > 0 and c.check is None and c.examples is None
        parts, how = (split_compound(c.text) if eligible else None), "rule"
        if parts is None and eligible and splitter is not None:
            parts, note = await llm_split(splitter, c.text)
            how = "splitter"
            if note:
                log.notes.append(f"{c.id}: {note}")
        if not parts:
            out.append(c)
            continue
        ids = []
        for k in range(len(parts)):
            pid = f"{c.id}.{k + 1}"
            while pid in taken:  # the rubric already has a criterion of that name
                pid += "x"
            taken.add(pid)
            ids.append(pid)
        log.add(c.id, f"split ({how}) into {', '.join(ids)}")
        for pid, text in zip(ids, parts):
            log.parents[pid] = c.id
            log.add(pid, f"split from {c.id}")
            out.append(c.model_copy(update={"id": pid, "text": text, "weight": round(c.weight / len(parts), 4)}))
    return out


async def _dedupe(criteria: list[Criterion], threshold: float, embed: Callable[[list[str]], np.ndarray],
                  confirm: ChatModel | None, log: _Log) -> list[Criterion]:
    """Step 2: drop confirmed near-duplicates, keeping the larger |weight| and merging tags."""
    dropped: set[int] = set()
    pairs = near_duplicates(criteria, threshold, embed)
    if pairs and confirm is None:
        log.notes.append("duplicates decided by embeddings alone (no --confirm/--splitter model to confirm them)")
    for i, j, sim in pairs:
        if i in dropped or j in dropped:
            continue
        same = True if confirm is None else await confirm_same(confirm, criteria[i].text, criteria[j].text)
        if not same:
            log.notes.append(f"{criteria[i].id} ~ {criteria[j].id} (cosine {sim:.2f}) kept both: " + (
                "the model says they differ" if same is False else "the model's answer was unusable"))
            continue
        keep, drop = (i, j) if abs(criteria[i].weight) >= abs(criteria[j].weight) else (j, i)
        tags = tuple(dict.fromkeys(criteria[keep].tags + criteria[drop].tags))
        merged = ", tags merged" if tags != criteria[keep].tags else ""
        criteria[keep] = criteria[keep].model_copy(update={"tags": tags})
        dropped.add(drop)
        log.add(criteria[drop].id, f"dropped: duplicate of {criteria[keep].id} (cosine {sim:.2f}"
                + (", confirmed)" if confirm else ")"))
        log.add(criteria[keep].id, f"kept over duplicate {criteria[drop].id}{merged}")
    return [c for k, c in enumerate(criteria) if k not in dropped]


async def _reweight(criteria: list[Criterion], judge: Judge, responses: Sequence[ScoringRow], threshold: float,
                    log: _Log) -> list[Criterion]:
    """Step 3: judge the responses, find clusters of redundant criteria, scale their weights."""
    verdicts: list[list[Verdict]] = []
    for start in range(0, len(responses), 16):
        verdicts += await judge.judge([JudgeRequest(r.conversation, r.response, tuple(criteria))
                                       for r in responses[start:start + 16]])
    matrix = verdict_matrix(verdicts, [c.id for c in criteria])
    undecided = [c.id for j, c in enumerate(criteria) if np.sum(~np.isnan(matrix[:, j])) < MIN_JOINT]
    if undecided:
        log.notes.append(f"fewer than {MIN_JOINT} decided responses for {', '.join(undecided)}: not re-weighted")
    if len(responses) < SMALL_SAMPLE:
        log.notes.append(f"correlations from {len(responses)} responses are noisy; judge a few hundred to trust them")
    weights = [c.weight for c in criteria]
    clusters = redundant_clusters(correlations(matrix), weights, threshold)
    new = cluster_weights(weights, clusters)
    out = list(criteria)
    for group in clusters:
        names = ", ".join(criteria[k].id for k in group)
        for k in group:
            log.add(criteria[k].id, f"reweighted x{new[k] / weights[k]:.3g} (correlated: {names})")
            out[k] = criteria[k].model_copy(update={"weight": new[k]})
    return out


async def refine_rubric(rubric: Rubric, *, embed: Callable[[list[str]], np.ndarray] | None = None,
                        splitter: ChatModel | None = None, confirm: ChatModel | None = None,
                        judge: Judge | None = None, responses: Sequence[ScoringRow] = (),
                        dup_threshold: float = 0.9, corr_threshold: float = 0.8) -> Refinement:
    """Split, de-duplicate, then re-weight (when `judge` and `responses` are given); the result is
    validated like a hand-written rubric, and `changes` lists every original and new criterion."""
    if embed is None:
        from rubricrl.llm.encoder import embed
    log = _Log()
    current = await _split(rubric.criteria, splitter, log)
    current = await _dedupe(current, dup_threshold, embed, confirm, log)
    if judge is not None and responses:
        current = await _reweight(current, judge, responses, corr_threshold, log)
    elif judge is not None or responses:
        log.notes.append("re-weighting needs both --responses and --judge; weights kept")
    data = {"id": f"{rubric.id}-refined" if rubric.id else None, "description": rubric.description,
            "hard_rule_gate": rubric.hard_rule_gate, "criteria": [criterion_dict(c) for c in current]}
    refined = rubric_from_data({k: v for k, v in data.items() if v is not None}, "refined rubric")
    after = {c.id: c.weight for c in refined.criteria}
    changes = []
    for c in rubric.criteria:
        changes.append(Change(c.id, c.weight, after.get(c.id), "; ".join(log.actions.get(c.id, [])) or "kept"))
        for pid in (p for p in log.parents if log.parents[p] == c.id):
            changes.append(Change(pid, None, after.get(pid), "; ".join(log.actions[pid])))
    return Refinement(refined, changes, log.notes)


def criterion_dict(c: Criterion) -> dict:
    """A criterion as plain data in our field order, without default-valued optional fields."""
    data = c.model_dump(mode="json", exclude_defaults=True)
    return {"id": c.id, "text": c.text, "weight": c.weight, **{k: v for k, v in data.items()
                                                                if k not in ("id", "text", "weight")}}


def write_rubric(rubric: Rubric, path: Path) -> None:
    """Write a rubric as YAML (or JSON for a `.json` path) that `load_rubric` reads back."""
    data = {"id": rubric.id, "description": rubric.description, "hard_rule_gate": rubric.hard_rule_gate,
            "criteria": [criterion_dict(c) for c in rubric.criteria]}
    data = {k: v for k, v in data.items() if v not in (None, "")}
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (json.dumps(data, indent=2, ensure_ascii=False) if path.suffix.lower() == ".json"
            else yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100))
    path.write_text(text, encoding="utf-8")
