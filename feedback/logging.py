"""Every log line of a run carries its run id and step, in plain or JSON form."""

import contextvars
import json
import logging

current_run: contextvars.ContextVar[int | None] = contextvars.ContextVar("current_run", default=None)
current_step: contextvars.ContextVar[int | None] = contextvars.ContextVar("current_step", default=None)


class RunContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.run_id = current_run.get() if not hasattr(record, "run_id") else record.run_id
        record.step = current_step.get() if not hasattr(record, "step") else record.step
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "run_id": getattr(record, "run_id", None),
            "step": getattr(record, "step", None),
        }
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, ensure_ascii=False)
