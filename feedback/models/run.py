from django.db import models
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.translation import gettext_lazy as _

from .task import Task

# Where runs without a score sort: below every scored run (the run list's score order).
NO_SCORE = -1.0


class Run(models.Model):
    """One attempt of the agent at a task: its state, the exact prompt it got and its outcome."""

    class Status(models.TextChoices):
        """The process, not the task: whether the agent is still at it and how it stopped."""

        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        AWAITING_CONFIRMATION = "awaiting_confirmation", _("Awaiting confirmation")
        # Stored as "succeeded" (older rows, URLs and the API keep it), shown as "Answered": the
        # run ended with a final answer, which may well say "I could not find the file". Whether
        # the task was done is the run's outcome.
        SUCCEEDED = "succeeded", _("Answered")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")

    class Outcome(models.TextChoices):
        """The task, not the process: did the run accomplish what was asked? Decided by the
        evaluators (feedback/evaluation/chain.py, ``run_outcome``) when the run is evaluated."""

        ACCOMPLISHED = "accomplished", _("Accomplished")
        NOT_ACCOMPLISHED = "not_accomplished", _("Not accomplished")
        UNKNOWN = "unknown", _("Unknown")

    class Purpose(models.TextChoices):
        """Why the run exists. Only production runs (people's tasks) enter the metrics, mining
        and trials; experiment runs (a dataset's items with and without a change) and playground
        runs (a person trying an edit on one run) are measured apart."""

        PRODUCTION = "production", _("Production")
        EXPERIMENT = "experiment", _("Experiment")
        PLAYGROUND = "playground", _("Playground")

    ACTIVE_STATUSES = frozenset({Status.QUEUED, Status.RUNNING, Status.AWAITING_CONFIRMATION})

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="runs")
    # Denormalised from the task so the list and trend queries need no join.
    task_kind = models.CharField(max_length=32, choices=Task.Kind.choices)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    # Set when a person asked for this run again: the original then counts as an intervention.
    retry_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries")
    parent_step = models.ForeignKey(
        "feedback.Step", null=True, blank=True, on_delete=models.SET_NULL, related_name="child_runs"
    )
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.QUEUED)
    # db_default too: rows written by raw SQL or COPY (the benchmark history) are production runs.
    purpose = models.CharField(
        max_length=16, choices=Purpose.choices, default=Purpose.PRODUCTION, db_default=Purpose.PRODUCTION
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The lease of the worker executing the run; a step is written only under a valid lease.
    worker = models.CharField(max_length=200, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # The dataset item this run answered (an experiment's run, or a run an item was made from).
    dataset_item = models.ForeignKey(
        "feedback.DatasetItem", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )

    llm_backend = models.CharField(max_length=32, blank=True)
    model_name = models.CharField(max_length=200, blank=True)
    system_prompt = models.TextField(blank=True)
    plan = models.JSONField(default=list, blank=True)
    tools_offered = models.JSONField(default=list, blank=True)
    # "all", "lexical" or "embeddings": how tools_offered was chosen.
    tool_selection = models.CharField(max_length=16, blank=True)

    final_output = models.TextField(blank=True)
    error = models.TextField(blank=True)
    score = models.FloatField(null=True, blank=True)
    # db_default too: rows written by raw SQL or COPY (the benchmark history) start unknown.
    outcome = models.CharField(
        max_length=16, choices=Outcome.choices, default=Outcome.UNKNOWN, db_default=Outcome.UNKNOWN
    )
    step_count = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    # The sum of its steps' costs, in US dollars, kept with its counters; None: its model has no price.
    cost = models.FloatField(null=True, blank=True)
    # The run's sandbox (its own copy of the workspace; a sub-agent works in its root run's, so only
    # root runs have these): its size, reserved when the run is queued (its workspace's size) and
    # measured when it ends; None: no sandbox. Removed by the retention policy (feedback/retention.py),
    # which sets sandbox_deleted_at; the size stays, as what was removed.
    sandbox_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    sandbox_deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["-created_at", "-id"], name="run_recent"),
            # The metrics page's outcome precision reads the window's latest experiment runs;
            # without it PostgreSQL scanned every run of the window (25 ms a page at 100,000 runs).
            models.Index(fields=["purpose", "-created_at"], name="run_purpose_recent"),
            # The run list's filters, in its order (newest first, id breaking ties) so a page and
            # a keyset "after (created_at, id)" are one index range scan, at any depth.
            models.Index(fields=["status", "-created_at", "-id"], name="run_status_recent"),
            models.Index(fields=["task_kind", "-created_at", "-id"], name="run_kind_recent"),
            # Both filters at once; also lets the paginator count them from the index alone.
            models.Index(fields=["status", "task_kind", "-created_at", "-id"], name="run_status_kind_recent"),
            models.Index(fields=["task_kind", "created_at"], name="run_kind_created"),
            models.Index(fields=["score", "created_at"], name="run_score_created"),
            # The run list's outcome filter, newest first like the status filter.
            models.Index(fields=["outcome", "-created_at", "-id"], name="run_outcome_recent"),
            # The run list sorted by score, unscored runs last (selectors.run_page): one index scan.
            models.Index(Coalesce("score", Value(NO_SCORE)).desc(), F("id").desc(), name="run_score_sort"),
            # And with the list's filters, as for newest first: a filter that unscored runs fill
            # (cancelled) walked 856,000 rows of the plain sort for its first page at a million runs.
            *(
                models.Index(*filters, Coalesce("score", Value(NO_SCORE)).desc(), F("id").desc(), name=name)
                for name, filters in (
                    ("run_status_score", ("status",)),
                    ("run_kind_score", ("task_kind",)),
                    ("run_status_kind_score", ("status", "task_kind")),
                    ("run_outcome_score", ("outcome",)),
                )
            ),
            # The runs that ended since the metrics' last rebuild of closed days (feedback/metrics/daily.py).
            models.Index(fields=["finished_at"], name="run_finished"),
            # The sandboxes still on disk (a person's quota by their tasks, the metrics' figures): a
            # few days' runs.
            models.Index(
                fields=["task", "finished_at"],
                name="run_sandbox_kept",
                condition=Q(sandbox_bytes__isnull=False, sandbox_deleted_at__isnull=True),
            ),
        ]
        permissions = [
            ("view_metrics", "Can view metric trends"),
            ("score_run", "Can score runs"),
            ("confirm_toolconfirmation", "Can confirm or refuse sensitive tool calls"),
        ]

    def __str__(self) -> str:
        return f"Run #{self.pk}"

    # Django's generated get_FOO_display rebuilds a hashable dict of the choices on every call:
    # a tenth of the run list's rendering time. A dict built once gives the same labels.
    def get_status_display(self) -> str:
        return _STATUS_LABELS.get(self.status, self.status)

    def get_outcome_display(self) -> str:
        return _OUTCOME_LABELS.get(self.outcome, self.outcome)

    def get_task_kind_display(self) -> str:
        return _KIND_LABELS.get(self.task_kind, self.task_kind)

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE_STATUSES

    @cached_property
    def owner_id(self) -> int | None:
        """Who submitted the run's task, who may see and control it: read from the task, unless
        the query annotated it (a live part's poll reads the run alone)."""
        return self.task.created_by_id


_STATUS_LABELS = dict(Run.Status.choices)
_KIND_LABELS = dict(Task.Kind.choices)
_OUTCOME_LABELS = dict(Run.Outcome.choices)


class AppliedStrategy(models.Model):
    """Which strategy version a run was in the scope of, and in which arm of its trial."""

    class Arm(models.TextChoices):
        ACTIVE = "active", _("Active (applied)")
        TREATMENT = "treatment", _("Trial treatment (applied)")
        CONTROL = "control", _("Trial control (withheld)")

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="applied_strategies")
    strategy_version = models.ForeignKey(
        "feedback.StrategyVersion", on_delete=models.PROTECT, related_name="applications"
    )
    arm = models.CharField(max_length=16, choices=Arm.choices)

    # The rows whose strategy was applied to their run (``applied``): every arm but the control's.
    APPLIED = ~Q(arm=Arm.CONTROL)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "strategy_version"], name="applied_once_per_run")]

    def __str__(self) -> str:
        return f"{self.run} {self.strategy_version} ({self.arm})"

    @property
    def applied(self) -> bool:
        return self.arm != self.Arm.CONTROL
