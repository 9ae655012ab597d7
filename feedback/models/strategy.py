from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from feedback.storable import StorableJSONField

from .run import Run


class Strategy(models.Model):
    """A lesson mined from failures. Its content lives in versions; its history in events."""

    class Status(models.TextChoices):
        PROPOSED = "proposed", _("Proposed")
        EXPERIMENT = "experiment", _("In a paired experiment")
        TRIAL = "trial", _("On trial")
        ACTIVE = "active", _("Active")
        REJECTED = "rejected", _("Rejected")
        ROLLED_BACK = "rolled_back", _("Rolled back")

    class PatternKind(models.TextChoices):
        TASK_KEYWORDS = "task_keywords", _("Task kind and keywords")
        ERROR_SIGNATURE = "error_signature", _("Error signature")
        TOOL_SEQUENCE = "tool_sequence", _("Tool-call sequence")
        EVALUATOR_FEEDBACK = "evaluator_feedback", _("Evaluator feedback")
        MALFORMED_REPLY = "malformed_reply", _("Malformed or empty model reply")
        TOOL_SKIPPED = "tool_skipped", _("A tool the successes call, skipped")
        TOOL_RESULT_UNUSED = "tool_result_unused", _("A tool's result left out of the answer")
        MANUAL = "manual", _("Written by a person")
        # One per task kind: a list of insights with votes, updated from failure/success pairs.
        INSIGHTS = "insights", _("Insights from failure/success pairs")

    # The lifecycle: anything not listed here is an illegal transition.
    TRANSITIONS: dict[str, frozenset[str]] = {
        # An experiment first where a dataset exists; straight to trial where none does.
        Status.PROPOSED: frozenset({Status.EXPERIMENT, Status.TRIAL, Status.REJECTED}),
        # Back to proposed when its experiment is stopped or ends without a verdict worth a trial.
        Status.EXPERIMENT: frozenset({Status.TRIAL, Status.REJECTED, Status.PROPOSED}),
        Status.TRIAL: frozenset({Status.ACTIVE, Status.ROLLED_BACK}),
        Status.ACTIVE: frozenset({Status.ROLLED_BACK}),
        Status.REJECTED: frozenset(),
        Status.ROLLED_BACK: frozenset(),
    }

    title = models.CharField(_("title"), max_length=200)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROPOSED)
    pattern_kind = models.CharField(max_length=32, choices=PatternKind.choices)
    # What makes two proposals "the same": a repeated proposal raises support instead.
    pattern_key = models.CharField(max_length=200, blank=True)
    support = models.PositiveIntegerField(default=0)
    # The pattern's failure lift (failure rate with it minus without it; its interval is in
    # evidence_summary["failure_lift"]), None when it cannot be measured: never a made-up 1.00.
    confidence = models.FloatField(null=True, blank=True)
    # A rejected or rolled-back proposal mined again is not reinforced (its support and status
    # stay): its new failing runs since the decision are counted here for reviewers to see.
    recurrences = models.PositiveIntegerField(default=0)
    recurred_at = models.DateTimeField(null=True, blank=True)
    # The failing-vs-succeeding contrast that made the miner propose it (counts, examples).
    evidence_summary = models.JSONField(default=dict, blank=True)
    evidence = models.ManyToManyField(Run, blank=True, related_name="evidence_for")
    current_version = models.ForeignKey(
        "StrategyVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    trial_fraction = models.FloatField(default=0.5)
    trial_started_at = models.DateTimeField(null=True, blank=True)
    # When it became active (its watch compares the runs since with its trial's), and whether that
    # was against the verdict, by a reviewer's explicit override (the audit event says why).
    promoted_at = models.DateTimeField(null=True, blank=True)
    promoted_by_override = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "strategies"
        indexes = [models.Index(fields=["status", "-updated_at"], name="strategy_status_recent")]
        constraints = [
            models.UniqueConstraint(
                fields=["pattern_key"],
                condition=~models.Q(pattern_key=""),
                name="strategy_pattern_key_unique",
            ),
            models.CheckConstraint(
                condition=models.Q(trial_fraction__gt=0, trial_fraction__lt=1),
                name="strategy_trial_fraction_open_unit",
            ),
        ]
        permissions = [("decide_strategy", "Can approve, reject, promote and roll back strategies")]

    def __str__(self) -> str:
        return self.title

    @property
    def decided_at(self) -> datetime | None:
        """When it was rejected or rolled back (None: neither), for its recurrence's message."""
        if self.status not in (self.Status.REJECTED, self.Status.ROLLED_BACK):
            return None
        return (
            self.events.filter(to_status=self.status)
            .order_by("-created_at")
            .values_list("created_at", flat=True)
            .first()
        )

    def can_move_to(self, status: str) -> bool:
        return status in self.TRANSITIONS[self.status]

    @property
    def editable(self) -> bool:
        """A proposal, or a strategy whose paired experiment has ended without taking it further:
        a reviewer may revise it (drop the part that did not help) and test the new version. Not
        while an experiment runs or a trial measures it: that test is of the version it started with."""
        if self.status == self.Status.PROPOSED:
            return True
        return self.status == self.Status.EXPERIMENT and not self.experiments.filter(status="running").exists()

    @property
    def mined_over(self) -> dict | None:
        """The window the latest mining of its pattern read: ``{"days": N, "since": datetime}``,
        or ``{"days": None, "since": None}`` for all history; None when no window was recorded
        (mined before windows were, or written by a person)."""
        summary = self.evidence_summary or {}
        if "window_days" not in summary:
            return None
        since = summary.get("since")
        return {"days": summary["window_days"], "since": datetime.fromisoformat(since) if since else None}


NO_CONTENT = _("A strategy needs guidance, a worked example or a guardrail: it would change nothing.")


class StrategyVersion(models.Model):
    """The content of a strategy at one point; an edit makes a new version, old ones stay."""

    strategy = models.ForeignKey(Strategy, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    # The strategy's title as of this version (Strategy.title is the current one's): an edited
    # title is a new version like any other edit.
    title = models.CharField(_("title"), max_length=200, blank=True)
    pattern = models.TextField(_("pattern"))
    old_behaviour = models.TextField(_("old behaviour"), blank=True)
    # May be empty when the version acts otherwise (a guardrail, a worked example): a strategy's
    # parts are measured one by one, and a version of its guardrail alone is one a reviewer may keep.
    new_guidance = models.TextField(_("new guidance"), blank=True)
    # {"task_kinds": [...], "keywords": [...], "regex": "..."}; empty parts match everything.
    condition = StorableJSONField(_("applicable condition"), default=dict, blank=True)
    # [{"type": "tool_precondition", "tool": ..., "requires": ...}, ...] enforced by the engine.
    guardrails = StorableJSONField(_("guardrails"), default=list, blank=True)
    worked_example = models.TextField(_("worked example"), blank=True)
    # An insight list (strategies/insights.py): [{"text": ..., "votes": n}, ...], best voted first.
    insights = StorableJSONField(_("insights"), default=list, blank=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["strategy", "number"]
        constraints = [models.UniqueConstraint(fields=["strategy", "number"], name="strategy_version_unique")]

    def __str__(self) -> str:
        return f"{self.strategy} v{self.number}"

    def clean(self) -> None:
        # The admin edits versions in place: the same checks as the edit service's.
        from feedback.agent.guardrails import check_guardrails
        from feedback.strategies.conditions import check_condition
        from feedback.strategies.insight_ops import check_insights

        errors = {
            "condition": check_condition(self.condition),
            "guardrails": check_guardrails(self.guardrails),
            "insights": check_insights(self.insights),
            "new_guidance": [] if self.acts else [NO_CONTENT],
        }
        if any(errors.values()):
            raise ValidationError({field: problems for field, problems in errors.items() if problems})

    @property
    def acts(self) -> bool:
        """Whether it changes what a run gets: guidance, a worked example, a guardrail or insights."""
        return bool(self.new_guidance.strip() or self.worked_example.strip() or self.guardrails or self.insights)

    def snapshot(self) -> dict:
        return {
            "version": self.number,
            "title": self.title,
            "pattern": self.pattern,
            "old_behaviour": self.old_behaviour,
            "new_guidance": self.new_guidance,
            "condition": self.condition,
            "guardrails": self.guardrails,
            "worked_example": self.worked_example,
            "insights": self.insights,
        }


class StrategyEvent(models.Model):
    """The append-only audit log: every transition with who, when, why and the content then."""

    class Action(models.TextChoices):
        PROPOSE = "propose", _("Proposed")
        MERGE = "merge", _("Merged a repeated proposal")
        EDIT = "edit", _("Edited")
        EXPERIMENT = "experiment", _("Sent to a paired experiment")
        EXPERIMENT_END = "experiment_end", _("Paired experiment ended")
        APPROVE = "approve", _("Approved for trial")
        REJECT = "reject", _("Rejected")
        PROMOTE = "promote", _("Promoted")
        PROMOTE_OVERRIDE = "promote_override", _("Promoted against the verdict (override)")
        ROLL_BACK = "roll_back", _("Rolled back")
        AUTO_ROLL_BACK = "auto_roll_back", _("Rolled back automatically")
        # A newer version (an insight list's update of a live strategy) made the current one.
        ADOPT = "adopt", _("Adopted a newer version")

    strategy = models.ForeignKey(Strategy, on_delete=models.PROTECT, related_name="events")
    version = models.ForeignKey(StrategyVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="events")
    action = models.CharField(max_length=16, choices=Action.choices)
    from_status = models.CharField(max_length=16, blank=True)
    to_status = models.CharField(max_length=16, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT)
    reason = models.TextField(blank=True)
    snapshot = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["strategy", "created_at", "id"]

    def __str__(self) -> str:
        return f"{self.strategy}: {self.action} at {self.created_at:%Y-%m-%d %H:%M}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise ValidationError("Audit events are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValidationError("Audit events are append-only.")


class InsightPair(models.Model):
    """One failure/success pair of a task kind, compared once for its kind's insight list: what the
    writer said (its operations, those ignored and why) and the model call it took, if any."""

    task_kind = models.CharField(max_length=32)
    # Each failing run is compared once (with the most similar success then at hand).
    failing_run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="insight_pair")
    succeeding_run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    # None until the kind has an insight list (a first pair may change nothing).
    strategy = models.ForeignKey(
        Strategy, null=True, blank=True, on_delete=models.CASCADE, related_name="insight_pairs"
    )
    # The version its operations went into; None when they changed nothing.
    version = models.ForeignKey(StrategyVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    operations = models.JSONField(default=list, blank=True)  # those applied: [{"op", "index", "text"}]
    ignored = models.JSONField(default=list, blank=True)  # [{"operation": ..., "reason": ...}]
    # "rules" or "model"; for the model: its name, format, tokens, duration_ms and any error.
    writer = models.CharField(max_length=16)
    call = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.task_kind}: run {self.failing_run_id} against {self.succeeding_run_id}"
