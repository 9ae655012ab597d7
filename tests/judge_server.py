"""The local OpenAI-compatible server (tests/fake_openai.py) playing an LLM judge.

``behaviour`` picks the answer: a good judgement, text that is not JSON, a score out of range,
or nothing until long after the client's timeout.
"""

import json

from .fake_openai import FakeOpenAI, completion


class JudgeServer(FakeOpenAI):
    def __init__(self) -> None:
        super().__init__()
        self.behaviour = "ok"
        self.score = 0.8
        self.slow_seconds = 3.0
        self.responder = self._judge

    def _judge(self, body: dict) -> dict:
        content = {
            "ok": json.dumps({"score": self.score, "feedback": "Correct and complete."}),
            "slow": json.dumps({"score": self.score, "feedback": "Too late."}),
            "invalid_json": "Sure! I'd give it a 9/10 {score: nine",
            "out_of_range": json.dumps({"score": 7, "feedback": "Seven out of ten."}),
        }[self.behaviour]
        delay = self.slow_seconds if self.behaviour == "slow" else 0
        return {"json": completion(content, usage=(42, 9)), "delay": delay}

    def start(self) -> "JudgeServer":
        self.__enter__()
        return self

    def stop(self) -> None:
        self.__exit__(None, None, None)
