from django.db import models

from .task import Task


class DailyRunStats(models.Model):
    """Pre-aggregated counts of one day's ended runs of one task kind, so the metric trends read
    a year as ~365 rows per kind instead of a million runs and ten million steps.

    A run belongs to the day of its ``created_at`` in the project's time zone. The counts follow
    the definitions in feedback/metrics/counts.py exactly (they are computed by its queries): a run's
    figures are added when it ends, and what a later change does to them (a reviewer's score, a
    re-run) when it happens (feedback/rollups.py); ``manage.py rebuild_daily_stats`` recounts.
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
    intervened = models.PositiveIntegerField(default=0)
    confirmed = models.PositiveIntegerField(default=0)
    human_scored = models.PositiveIntegerField(default=0)
    retried = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    # Of the ended runs: those with a cost (their model has a price), and the sum of their costs.
    costed = models.PositiveIntegerField(default=0)
    cost_sum = models.FloatField(default=0.0)
    refreshed_at = models.DateTimeField(auto_now=True)

    COUNTS = (
        "runs", "ended", "succeeded", "accomplished", "judged", "scored", "score_sum", "errors", "repeated_errors",
        "runs_with_repeated", "intervened", "confirmed", "human_scored", "retried", "cancelled", "costed", "cost_sum",
    )  # fmt: skip

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "task_kind"], name="daily_run_stats_unique")]

    def __str__(self) -> str:
        return f"{self.day} {self.task_kind}: {self.runs} runs"


class ToolCounts(models.Model):
    """What a tool rollup row counts of one period's calls of one tool, for one task kind."""

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
        abstract = True


class LatencyCounts(models.Model):
    """A latency histogram row: how many of one period's calls of one tool, for one task kind,
    took a ``duration_ms`` in ``bucket`` (tool_metrics.latency_bucket)."""

    task_kind = models.CharField(max_length=32, choices=Task.Kind.choices)
    tool_name = models.CharField(max_length=100)
    bucket = models.PositiveSmallIntegerField()
    calls = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class DailyToolStats(ToolCounts):
    """Pre-aggregated tool calls of one day's ended runs of one task kind, per tool, so the
    per-tool figures of a year read ~365 rows per kind and tool instead of every tool-call step.

    A call belongs to the day of its run's ``created_at``, like DailyRunStats, and is counted
    by the definitions in feedback/tool_metrics.py (``tool_call_counts``), with its run. The
    latency histogram is in DailyToolLatency.
    """

    day = models.DateField()
    refreshed_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "task_kind", "tool_name"], name="daily_tool_stats_unique")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.task_kind} {self.tool_name}: {self.calls} calls"


class DailyToolLatency(LatencyCounts):
    """The latency histogram of one day's calls of one tool, for one task kind (each bucket 5%
    wider than the one before). Histograms add up across days and kinds, in SQL (a SUM per tool
    and bucket), and the percentiles are estimated from them within 5%."""

    day = models.DateField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "task_kind", "tool_name", "bucket"], name="daily_tool_latency_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.task_kind} {self.tool_name} bucket {self.bucket}: {self.calls} calls"


class MonthlyToolStats(ToolCounts):
    """DailyToolStats added up over a calendar month (``month`` is its first day), so a long window
    reads a dozen rows per kind and tool for its whole months and the daily rows only for the
    days at its edges. A row is always the sum of its month's daily rows: a run's figures are
    added to both at once (feedback/rollups.py), and a recount of days recounts their months
    from the daily rows."""

    month = models.DateField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["month", "task_kind", "tool_name"], name="monthly_tool_stats_unique")
        ]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} {self.task_kind} {self.tool_name}: {self.calls} calls"


class MonthlyToolLatency(LatencyCounts):
    """DailyToolLatency added up over a calendar month, like MonthlyToolStats: a year of one
    tool's histogram is ~12 x buckets rows per kind instead of ~365 x buckets."""

    month = models.DateField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["month", "task_kind", "tool_name", "bucket"], name="monthly_tool_latency_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} {self.task_kind} {self.tool_name} bucket {self.bucket}: {self.calls} calls"
