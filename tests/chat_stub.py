"""A tiny OpenAI-compatible chat server for eval tests: a deterministic policy and grader.

The policy answers the last user message from `replies` (first substring that occurs wins;
`ERROR` answers HTTP 400, `EMPTY` an empty message), else `Echo: <message>`. A grader request
(the HTTP judge's per_criterion prompt) is met when the criterion's first 'single-quoted' phrase
occurs in the graded response; a criterion containing `[garbage]` gets an unparsable answer. A
pairwise request (the HTTP judge's JSON `compare` prompt) prefers the response with more words, the
same in both orders; equal lengths tie.
It runs in a thread of the test process; `eval` subprocesses reach it over loopback.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rubricrl.judges.http_prompts import GRADER_SYSTEM, PAIR_GRADER_SYSTEM


class ChatStub:
    def __init__(self, replies: dict[str, str] | None = None, *, policy_delay: float = 0.0, judge_delay: float = 0.0):
        self.replies = replies or {}
        self.policy_delay, self.judge_delay = policy_delay, judge_delay
        self.policy_calls = self.judge_calls = self.pair_calls = 0
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, content = stub.answer(body["messages"])
                payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content},
                                                   "finish_reason": "stop"}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 5}} if status == 200
                                     else {"error": content}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def policy_spec(self) -> str:
        return f"openai:{self.url}?model=stub&max_retries=0"

    def judge_spec(self) -> str:
        return f"openai:{self.url}?model=stub-grader&max_retries=0&mode=per_criterion"

    def answer(self, messages: list[dict]) -> tuple[int, str]:
        if messages and messages[0]["content"] == GRADER_SYSTEM:
            with self._lock:
                self.judge_calls += 1
            time.sleep(self.judge_delay)
            return 200, self.grade(messages[-1]["content"])
        if messages and messages[0]["content"] == PAIR_GRADER_SYSTEM:
            with self._lock:
                self.pair_calls += 1
            return 200, self.prefer(messages[-1]["content"])
        with self._lock:
            self.policy_calls += 1
        time.sleep(self.policy_delay)
        prompt = [m for m in messages if m["role"] == "user"][-1]["content"]
        reply = next((r for k, r in self.replies.items() if k in prompt), f"Echo: {prompt}")
        if reply == "ERROR":
            return 400, "stub policy refuses this prompt"
        return 200, "" if reply == "EMPTY" else reply

    @staticmethod
    def grade(user: str) -> str:
        response = user.split("<<<RESPONSE\n", 1)[1].split("\nRESPONSE>>>", 1)[0]
        criterion = re.search(r"Criterion \([^)]*\): (.*?)\n\nReturn a JSON", user, re.S).group(1)
        if "[garbage]" in criterion:
            return "I would rather not say."
        phrase = re.search(r"'([^']+)'", criterion)
        met = bool(phrase) and phrase.group(1).lower() in response.lower()
        return json.dumps({"explanation": f"looked for {phrase.group(1) if phrase else '-'}", "criteria_met": met})

    @staticmethod
    def prefer(user: str) -> str:
        a, b = (part.split("\nRESPONSE>>>", 1)[0] for part in user.split("<<<RESPONSE\n")[1:3])
        na, nb = len(a.split()), len(b.split())
        return json.dumps({"explanation": f"{na} words against {nb}", "better": "A" if na > nb else "B" if nb > na
                           else "tie"})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
