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


class RefusalFilter(logging.Filter):
    """Django logs some refusals (a 403 from PermissionDenied, a 400 from a suspicious request) with
    the exception's traceback: a stack of Django's own frames that says nothing about the request,
    repeated for every scanner's probe, burying the tracebacks that matter. A refused request (a
    record of Django's ``log_response``: 4xx, with its request) becomes one line instead: status,
    method, path, who asked, why. Anything else, 500s first, is left as it is, traceback and all."""

    def filter(self, record: logging.LogRecord) -> bool:
        status, request = getattr(record, "status_code", None), getattr(record, "request", None)
        if not isinstance(status, int) or not 400 <= status < 500 or request is None:
            return True
        path = _escaped(getattr(request, "path", "?"))
        reason = record.getMessage().removesuffix(f": {path}")
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and str(error) and str(error) not in reason:
            reason = f"{reason}: {_escaped(str(error))}"
        record.msg = "%s %s %s user=%s: %s"
        record.args = (status, _escaped(getattr(request, "method", "?")), path, _escaped(_who(request)), reason)
        record.exc_info = record.exc_text = record.stack_info = None
        return True


def _escaped(text: str) -> str:
    # As Django escapes what it logs: a newline in a path must not start a forged log line.
    return str(text).encode("unicode_escape").decode("ascii")


def _who(request) -> str:
    """The user name of the session, or of the API's token; "-" for nobody."""
    try:
        user = getattr(getattr(request, "auth", None), "user", None) or getattr(request, "user", None)
        return user.get_username() if user is not None and user.is_authenticated else "-"
    except Exception:  # a log line is never worth an error (the session store may be down)
        return "?"
