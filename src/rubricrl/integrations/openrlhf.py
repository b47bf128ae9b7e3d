"""OpenRLHF's remote reward requests read as rows. The code lives in `rubricrl.serve.openrlhf`
(the reward server is what OpenRLHF talks to); this path is kept for scripts that import it."""

from rubricrl.serve.openrlhf import END_TOKENS, START_HEADERS, LABEL_KEYS, RowProblem, RequestProblems, parse_request, decode_cleanup, split_query, strip_end_tokens, conversation_from_prompt, read_label  # noqa: F401

__all__ = ['END_TOKENS', 'START_HEADERS', 'LABEL_KEYS', 'RowProblem', 'RequestProblems', 'parse_request', 'decode_cleanup', 'split_query', 'strip_end_tokens', 'conversation_from_prompt', 'read_label']
