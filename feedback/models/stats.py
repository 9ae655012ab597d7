from django.db import models

from .task import Task


class DailyRunStats(models.Model):
    """The counts of one closed day's production runs of one task kind, so the metric trends read
    a year as ~365 rows per kind instead of a million runs and ten million steps.

    A run belongs to the day of its ``created_at`` in the project's time zone. The counts are the
    definitions of feedback/metrics/ (computed by its queries) over the day's runs as they were
    at ``refreshed_at``; only feedback/metrics/daily.py writes them, rebuilding whole days (see
    the feedback.metrics docstring for when).
    """

    day = models.DateField()
    task_kind = models.CharField(max_length=32, choices=Task.Kind.choices)
    runs = models.PositiveIntegerField(default=0)
    ended = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    # Of the ended runs: those whose outcome is accomplished, and those with a known outcome.
    accomplished = models.PositiveIntegerField(default=0)
    judged = models.PositiveIntegerField(default=0)
    scored = models.PositiveIntegerField(default=0)
    # A sum, not an average, so days add up into weeks and windows.
    score_sum = models.FloatField(default=0.0)
    errors = models.PositiveIntegerField(default=0)
    repeated_errors = models.PositiveIntegerField(default=0)
    runs_with_repeated = models.PositiveIntegerField(default=0)
    # Counted apart from the errors (feedback/metrics/errors.py): a guardrail at work, a person's no.
    guardrail_refusals = models.PositiveIntegerField(default=0)
    human_rejections = models.PositiveIntegerField(default=0)
    intervened = models.PositiveIntegerField(default=0)
    confirmed = models.PositiveIntegerField(default=0)
    human_scored = models.PositiveIntegerField(default=0)
    retried = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    # Of the ended runs: those with a cost (their model has a price), and the sum of their costs.
    costed = models.PositiveIntegerField(default=0)
    cost_sum = models.FloatField(default=0.0)
    # When the rebuild that wrote the row began: a change to the day's runs after it (less a
    # margin) makes the next rebuild count the day again.
    refreshed_at = models.DateTimeField()

    COUNTS = (
        "runs", "ended", "succeeded", "accomplished", "judged", "scored", "score_sum", "errors", "repeated_errors",
        "runs_with_repeated", "guardrail_refusals", "human_rejections", "intervened", "confirmed", "human_scored",
        "retried", "cancelled", "costed", "cost_sum",
    )  # fmt: skip

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "task_kind"], name="daily_run_stats_unique")]

    def __str__(self) -> str:
        return f"{self.day} {self.task_kind}: {self.runs} runs"


class DailyToolStats(models.Model):
    """The tool calls of one closed day's production runs of one task kind, per tool, so the
    per-tool figures of a year read ~365 rows per kind and tool instead of every tool-call step.
    A call belongs to the day of its run's ``created_at``, like DailyRunStats, and is rebuilt with
    it. The latency histogram is in DailyToolLatency, keyed the same."""

    day = models.DateField()
    task_kind = models.CharField(max_length=32, choices=Task.Kind.choices)
    tool_name = models.CharField(max_length=100)
    calls = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    retries = models.PositiveIntegerField(default=0)
    # The calls with a recorded duration, and the sum of their durations: the average's parts.
    timed = models.PositiveIntegerField(default=0)
    duration_sum = models.PositiveBigIntegerField(default=0)

    COUNTS = ("calls", "succeeded", "retries", "timed", "duration_sum")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "task_kind", "tool_name"], name="daily_tool_stats_unique")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.task_kind} {self.tool_name}: {self.calls} calls"


class DailyToolLatency(models.Model):
    """The latency histogram of one day's calls of one tool, for one task kind, as rows: how many
    took a ``duration_ms`` in ``bucket`` (metrics.tools.latency_bucket; each bucket 5% wider than
    the one before). Histograms add up across days and kinds, in SQL (a SUM per tool and bucket),
    and the percentiles are estimated from them within 5%."""

    day = models.DateField()
    task_kind = models.CharField(max_length=32, choices=Task.Kind.choices)
    tool_name = models.CharField(max_length=100)
    bucket = models.PositiveSmallIntegerField()
    calls = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "task_kind", "tool_name", "bucket"], name="daily_tool_latency_unique"
            )
        ]
        indexes = [
            # A window of one task kind (four in five of the metrics page's) reads its histograms
            # from this index alone: a year of one kind at 100,000 runs, 60 ms to 19 ms.
            models.Index(fields=["task_kind", "day", "tool_name", "bucket", "calls"], name="daily_tool_latency_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.task_kind} {self.tool_name} bucket {self.bucket}: {self.calls} calls"
