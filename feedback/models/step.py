from django.db import models
from django.utils.translation import gettext_lazy as _

from .run import Run


class Step(models.Model):
    """One recorded moment of a run: a thought, a tool call and its observation, a reflection..."""

    class Kind(models.TextChoices):
        THOUGHT = "thought", _("Thought")
        TOOL_CALL = "tool_call", _("Tool call")
        REFLECTION = "reflection", _("Reflection")
        MODEL_ERROR = "model_error", _("Model error")
        FINAL = "final", _("Final answer")

    class Validation(models.TextChoices):
        PASS = "pass", _("Pass")
        FAIL = "fail", _("Fail")

    # No index of its own: the unique (run, index) constraint's index serves every lookup by run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps", db_index=False)
    index = models.PositiveIntegerField()
    # Steps from the same model reply share a turn; the conversation is rebuilt from them.
    turn = models.PositiveIntegerField(default=0)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    thought = models.TextField(blank=True)
    tool_name = models.CharField(max_length=100, blank=True)
    tool_call_id = models.CharField(max_length=100, blank=True)
    arguments = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    error_class = models.CharField(max_length=100, blank=True)
    # sha1 of tool + error class + normalised message: what "the same error again" means.
    error_signature = models.CharField(max_length=40, blank=True)
    success = models.BooleanField(null=True)
    cached = models.BooleanField(default=False)
    # Degraded answers while a tool's breaker was open: "stale cache" or the fallback tool.
    stale = models.BooleanField(default=False)
    served_by = models.CharField(max_length=100, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=1)
    # The tokens of the model call that produced the step, on the first step of its turn (its
    # thought, else its first tool call): a run's tokens are its steps'.
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    # US dollars, at the run's model's price when the step was written (feedback/costs.py);
    # None: the model has no price.
    cost = models.FloatField(null=True, blank=True)
    validation_status = models.CharField(max_length=8, choices=Validation.choices, blank=True)
    validation = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="step_index_unique")]
        indexes = [
            models.Index(fields=["tool_name", "started_at"], name="step_tool_started"),
            models.Index(
                fields=["error_signature", "run"],
                name="step_error_signature",
                condition=~models.Q(error_signature=""),
            ),
            # A run's steps that went wrong (feedback/metrics/errors.py: errors and refusals, for the
            # metrics' live part and daily rebuild, the trials' error rate): a few of its steps,
            # found without reading the others.
            models.Index(
                fields=["run", "error_signature"],
                name="step_went_wrong",
                condition=models.Q(kind="tool_call", success=False) | models.Q(kind="model_error"),
            ),
            # The mining job (feedback/strategies/): index-only scans of the steps it groups, where
            # it walked the whole step table (a year of a million runs: ten million steps).
            # A run's tool calls in order, for the tool-call sequences.
            models.Index(
                fields=["run", "index", "tool_name"], name="step_mining_calls", condition=models.Q(kind="tool_call")
            ),
            # The failed tool calls' errors, for the error signatures.
            models.Index(
                fields=["error_signature", "tool_name", "error_class", "run"],
                name="step_mining_errors",
                condition=models.Q(kind="tool_call", success=False) & ~models.Q(error_signature=""),
            ),
            # The model's replies the loop could not use, for the malformed replies (replies.py).
            models.Index(
                fields=["run"],
                name="step_mining_replies",
                condition=models.Q(error_class__in=["MalformedReply", "EmptyReply", "InvalidToolCall"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run} step {self.index}"

    @property
    def went_wrong(self) -> bool:
        """A failed call, a failed validation or a model error: what the trace makes stand out
        (``STEP_WENT_WRONG`` asks the same of the database)."""
        failed_check = self.validation_status == self.Validation.FAIL
        return self.success is False or failed_check or self.kind == self.Kind.MODEL_ERROR

    @property
    def keeps_attempts(self) -> bool:
        """Whether it may have attempt rows: the recorder keeps them once a try failed, so only a
        step that was retried or went wrong has any."""
        return self.attempts > 1 or self.went_wrong

    @property
    def starts_runs(self) -> bool:
        """Whether runs may hang from it: sub-agent runs are started by a delegation alone."""
        return self.tool_name == SUBAGENT_TOOL

    # Cheap labels for traces of a thousand steps (see Run.get_status_display).
    def get_kind_display(self) -> str:
        return _KIND_LABELS.get(self.kind, self.kind)

    def get_validation_status_display(self) -> str:
        return _VALIDATION_LABELS.get(self.validation_status, self.validation_status)


# What "went wrong" means on the trace (Step.went_wrong for a step already read): a failed call
# (an error, a guardrail's or a person's refusal), a failed validation, a model error.
STEP_WENT_WRONG = (
    models.Q(success=False) | models.Q(validation_status=Step.Validation.FAIL) | models.Q(kind=Step.Kind.MODEL_ERROR)
)
# The tool that starts sub-agent runs (agent/tools: delegate), each linked to its step.
SUBAGENT_TOOL = "delegate"
_KIND_LABELS = dict(Step.Kind.choices)
_VALIDATION_LABELS = dict(Step.Validation.choices)


class StepAttempt(models.Model):
    """One try of a tool call; a step retried three times has three attempts."""

    # Indexed by the unique (step, number) constraint, as above.
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="attempt_rows", db_index=False)
    number = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    error = models.TextField(blank=True)
    error_class = models.CharField(max_length=100, blank=True)
    retryable = models.BooleanField(default=False)

    class Meta:
        ordering = ["step", "number"]
        constraints = [models.UniqueConstraint(fields=["step", "number"], name="attempt_number_unique")]

    def __str__(self) -> str:
        return f"{self.step} attempt {self.number}"
