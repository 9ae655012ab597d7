"""What an error is: written once, here, for the metrics and for the trials' error rate
(feedback/strategies/trials.py calls ``run_had_error``).

An **error** is a step where the agent's work went wrong:

- a tool call that failed (``success`` false): the tool's error, a timeout, an invalid call, an
  open circuit, a sub-agent that failed, a call that could not be recorded;
- a model error (a ``model_error`` step): the model unreachable, or a reply the loop could not
  use (malformed, empty, an echo of the instruction).

Two kinds of refusal are **not** errors and are counted apart, each as its own figure:

- a **guardrail refusal** (``GuardrailRefused``): an active strategy's rule refused the call
  before it ran, or held back an answer until a tool had run (a ``model_error`` step of that
  class); that is a strategy at work, not a mistake (a run it derails still fails);
- a **human rejection** (``Refused``): a reviewer refused a sensitive call's confirmation.

An error is *repeated* when its signature (tool + error class + normalised message) was already
seen in an earlier production run (``counts.went_wrong_groups``); a model error has no signature (it
is no tool's), so it counts as an error and never as a repeated one.
"""

from django.db.models import Exists, OuterRef, Q

from feedback.models import Step

# The error classes the engine gives a refused call (feedback/agent/loop.py).
GUARDRAIL_REFUSED = "GuardrailRefused"
PERSON_REFUSED = "Refused"
REFUSALS = (GUARDRAIL_REFUSED, PERSON_REFUSED)

_FAILED_CALL = Q(kind=Step.Kind.TOOL_CALL, success=False)
_MODEL_ERROR = Q(kind=Step.Kind.MODEL_ERROR)
# Every step that went wrong one way or another: an error or a refusal.
WENT_WRONG = _FAILED_CALL | _MODEL_ERROR
# On Step: the steps that are errors, and the two kinds of refusal counted apart. A guardrail
# refuses a call before it runs, or an answer until a tool has run (a model_error step).
ERROR_STEP = WENT_WRONG & ~Q(error_class__in=REFUSALS)
GUARDRAIL_REFUSAL = WENT_WRONG & Q(error_class=GUARDRAIL_REFUSED)
HUMAN_REJECTION = _FAILED_CALL & Q(error_class=PERSON_REFUSED)


def run_had_error(run: str = "pk") -> Exists:
    """Whether the run ``OuterRef(run)`` has at least one error step (by the definition above)."""
    return Exists(Step.objects.filter(ERROR_STEP, run=OuterRef(run)))
