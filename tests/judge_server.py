"""The local OpenAI-compatible server (tests/fake_openai.py) playing an LLM judge.

``behaviour`` picks the answer: a good judgement (``score`` and ``accomplished`` as set), text
that is not JSON, a score out of range, an ``accomplished`` that is not a JSON boolean
(``accomplished_*``), or nothing until long after the client's timeout.
"""

import json

from .fake_openai import FakeOpenAI, completion, error

# Replies whose "accomplished" breaks the schema: the judge's failure, never a verdict.
BAD_ACCOMPLISHED = {
    "accomplished_missing": {"score": 0.9, "feedback": "Fine."},
    "accomplished_string": {"score": 0.9, "accomplished": "yes", "feedback": "Fine."},
    "accomplished_number": {"score": 0.9, "accomplished": 1, "feedback": "Fine."},
    "accomplished_null": {"score": 0.9, "accomplished": None, "feedback": "Fine."},
}


class JudgeServer(FakeOpenAI):
    def __init__(self) -> None:
        super().__init__()
        self.behaviour = "ok"
        self.score = 0.8
        self.accomplished = True
        self.slow_seconds = 3.0
        # Response formats this server refuses, as llama.cpp's refuses json_schema (with this status).
        self.refused_formats: set[str] = set()
        self.refusal_status = 500
        # Without a response format, answer as a chatty model does: the JSON inside prose.
        self.prose_without_format = False
        self.responder = self._judge

    def _judge(self, body: dict) -> dict:
        response_format = (body.get("response_format") or {}).get("type", "prompt")
        if response_format in self.refused_formats:
            return error(self.refusal_status, f"response_format {response_format} is not supported")
        good = {"score": self.score, "accomplished": self.accomplished}
        content = {
            "ok": json.dumps({**good, "feedback": "Correct and complete."}),
            "slow": json.dumps({**good, "feedback": "Too late."}),
            "invalid_json": "Sure! I'd give it a 9/10 {score: nine",
            "out_of_range": json.dumps({"score": 7, "accomplished": True, "feedback": "Seven out of ten."}),
            **{name: json.dumps(reply) for name, reply in BAD_ACCOMPLISHED.items()},
        }[self.behaviour]
        delay = self.slow_seconds if self.behaviour == "slow" else 0
        if response_format == "prompt" and self.prose_without_format:
            content = f"Here is my judgement:\n```json\n{content}\n```\nI hope this helps."
        return {"json": completion(content, usage=(42, 9)), "delay": delay}

    def start(self) -> "JudgeServer":
        self.__enter__()
        return self

    def stop(self) -> None:
        self.__exit__(None, None, None)
