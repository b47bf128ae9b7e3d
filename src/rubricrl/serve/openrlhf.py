"""OpenRLHF's remote reward request read as rows to judge.

OpenRLHF posts `{"query": [...], "prompts": [...], "labels": [...]}` where each query is the
prompt and the response decoded together with special tokens kept. For each row we cut the prompt
off the query (the query must start with it, exactly or as a tokenizer's decode cleanup leaves it;
else the row is refused rather than guessed), strip an assistant header the response may start
with and the end-of-turn and padding tokens it ends with, read the conversation back from the
prompt's chat template (ChatML/Qwen, Llama 3, Gemma; otherwise the whole prompt is one user
message), and take the rubric from the label (or the server's rubric when the label is empty).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rubricrl.core.messages import Conversation, Message, as_conversation
from rubricrl.rubrics.model import Rubric
from rubricrl.rewards.rows import RowInput
from rubricrl.rubrics.values import RubricValueError, bundled_names, is_blank, plain, rubric_value

# Tokens a generation ends with (EOS, end of turn) or is padded with, across common chat models.
END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|end|>",
              "<|return|>", "<end_of_turn>", "<eos>", "</s>", "<pad>", "<|pad|>", "[PAD]",
              "<|finetune_right_pad_id|>", "<｜end▁of▁sentence｜>", "<|end▁of▁sentence|>")

# An assistant header a response may start with when the prompt was built without a generation prompt.
START_HEADERS = ("<|im_start|>assistant\n", "<|start_header_id|>assistant<|end_header_id|>\n\n",
                 "<start_of_turn>model\n", "<|assistant|>\n")

_TEMPLATES = (  # role header, content, then the closing token (absent for the generation prompt)
    re.compile(r"<\|im_start\|>([a-z_]+)\n(.*?)(<\|im_end\|>|\Z)", re.DOTALL),  # ChatML (Qwen, SmolLM)
    re.compile(r"<\|start_header_id\|>([a-z_]+)<\|end_header_id\|>\n\n(.*?)(<\|eot_id\|>|\Z)", re.DOTALL),  # Llama 3
    re.compile(r"<start_of_turn>([a-z_]+)\n(.*?)(<end_of_turn>|\Z)", re.DOTALL),  # Gemma
)
_MARKERS = ("<|im_start|>", "<|start_header_id|>", "<start_of_turn>")
_ROLES = {"model": "assistant", "ipython": "tool"}
LABEL_KEYS = ("rubric", "rubrics", "prompt")


@dataclass(frozen=True)
class RowProblem:
    """Why one row of a request cannot be judged: the request field and row index, and the fix."""

    field: str
    row: int | None
    message: str
    fix: str

    def detail(self) -> dict:
        loc = ["body", self.field] + ([self.row] if self.row is not None else [])
        return {"type": "invalid_row", "loc": loc, "msg": self.message, "fix": self.fix}


class RequestProblems(ValueError):
    """Every row problem of a request (the server answers 422 with all of them)."""

    def __init__(self, problems: list[RowProblem]):
        self.problems = problems
        super().__init__("; ".join(f"{p.field}[{p.row}]: {p.message}" for p in problems[:5]))


def parse_request(query: Sequence[str], prompts: Sequence[str], labels: Sequence[Any] | None,
                  default: Rubric | None) -> list[RowInput]:
    """Rows to judge, or RequestProblems naming every bad row."""
    if len(prompts) != len(query):
        raise RequestProblems([RowProblem("prompts", None, f"has {len(prompts)} items but query has {len(query)}",
                                          "send one prompt per query, in the same order")])
    if labels is not None and len(labels) != len(query):
        raise RequestProblems([RowProblem("labels", None, f"has {len(labels)} items but query has {len(query)}",
                                          "send one label per query (an empty string uses the server's rubric)")])
    rows, problems = [], []
    for i, (q, p) in enumerate(zip(query, prompts)):
        try:
            rubric, conversation = read_label(labels[i] if labels is not None else None, default, i)
            response = split_query(q, p, i)
            rows.append(RowInput(conversation or conversation_from_prompt(p), response, rubric))
        except _Refused as exc:
            problems.append(exc.problem)
    if problems:
        raise RequestProblems(problems)
    return rows


class _Refused(Exception):
    def __init__(self, problem: RowProblem):
        self.problem = problem


# What a Hugging Face tokenizer's decode does with `clean_up_tokenization_spaces=True` (Llama 3's
# default): the query OpenRLHF decodes then holds the prompt with these spaces removed.
_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def decode_cleanup(text: str) -> str:
    for old, new in _CLEANUP:
        text = text.replace(old, new)
    return text


def split_query(query: str, prompt: str, row: int = 0) -> str:
    """The response in `query` (= prompt + response), without trailing end-of-turn/padding tokens.
    The prompt must start the query exactly, or as a tokenizer's decode cleanup leaves it."""
    if not query.startswith(prompt) and query.startswith(cleaned := decode_cleanup(prompt)):
        prompt = cleaned
    if not query.startswith(prompt):
        at = next((k for k, (a, b) in enumerate(zip(query, prompt)) if a != b), min(len(query), len(prompt)))
        raise _Refused(RowProblem(
            "query", row, f"does not start with prompts[{row}] (they differ from character {at}: query has "
                          f"{query[at:at + 30]!r}, prompt has {prompt[at:at + 30]!r})",
            "send query = prompt + response with the prompt exactly as in `prompts` (OpenRLHF truncates prompts "
            "longer than --data.max_len minus the generation budget from the left: raise --data.max_len or "
            "shorten prompts)"))
    response = query[len(prompt):]
    for header in START_HEADERS:
        if response.startswith(header):
            response = response[len(header):]
            break
    return strip_end_tokens(response)


def strip_end_tokens(text: str) -> str:
    """`text` without trailing whitespace and any run of END_TOKENS at its end."""
    while True:
        stripped = text.rstrip()
        for token in END_TOKENS:
            if stripped.endswith(token):
                stripped = stripped[: -len(token)]
                break
        else:
            return stripped
        text = stripped


def conversation_from_prompt(prompt: str) -> Conversation:
    """The messages of a chat-templated prompt; a prompt in no known template is one user message."""
    for marker, pattern in zip(_MARKERS, _TEMPLATES):
        if marker not in prompt:
            continue
        messages = []
        for role, content, closed in pattern.findall(prompt):
            role = _ROLES.get(role, role)
            if not closed and role == "assistant":
                continue  # the generation prompt the response continues
            try:
                messages.append(Message(role=role, content=strip_end_tokens(content)))
            except ValidationError:
                messages = []
                break
        if messages:
            return tuple(messages)
    return as_conversation(prompt)


def read_label(label: Any, default: Rubric | None, row: int) -> tuple[Rubric, Conversation | None]:
    """The row's rubric (and conversation, when the label carries one) from an OpenRLHF label.

    A label is empty (use `default`), a rubric (object, list, JSON string or bundled name), or an
    object `{"rubric": ..., "prompt": ...}` whose optional `prompt` (string or messages) replaces the
    conversation read from the chat template."""
    label = plain(label)
    if isinstance(label, str) and label.strip().startswith("{"):
        try:
            label = json.loads(label)
        except (ValueError, RecursionError) as exc:
            raise _Refused(RowProblem("labels", row, f"is not valid JSON ({str(exc)[:120]})",
                                      "send the rubric as a JSON object or list, or an empty label")) from None
    if is_blank(label):
        if default is None:
            raise _Refused(RowProblem("labels", row, "is empty and the server has no rubric",
                                      "start the server with --rubric, or put a rubric (JSON) in the label column "
                                      "(OpenRLHF --data.label_key)"))
        return default, None
    conversation = None
    if isinstance(label, dict) and ("rubric" in label or "rubrics" in label) and "criteria" not in label:
        unknown = sorted(set(label) - set(LABEL_KEYS))
        if unknown or ("rubric" in label and "rubrics" in label):
            raise _Refused(RowProblem("labels", row, f"has unknown key(s) {unknown}" if unknown else
                                      "has both `rubric` and `rubrics`",
                                      f"a label object holds only {list(LABEL_KEYS)} (one of rubric/rubrics)"))
        if "prompt" in label:
            try:
                conversation = as_conversation(label["prompt"])
                if not conversation:
                    raise ValueError("no messages")
            except (ValidationError, ValueError, TypeError):
                raise _Refused(RowProblem("labels", row, "`prompt` is not a string or a list of {role, content} "
                                                         "messages", "fix the label's prompt or leave it out")) from None
        label = label.get("rubric", label.get("rubrics"))
        if is_blank(label):
            raise _Refused(RowProblem("labels", row, "`rubric` is empty", "put the rubric in the label's `rubric`"))
    try:
        return rubric_value(label, f"labels[{row}]"), conversation
    except RubricValueError as exc:
        raise _Refused(RowProblem("labels", row, str(exc), "send a valid rubric (docs/rubrics.md), one of the "
                                                           f"bundled names {bundled_names()}, or an empty label"))
