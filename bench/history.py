"""A realistic, deterministic history for the benchmarks, written with PostgreSQL COPY.

Runs are spread evenly over ``days`` ending at ``until``, in id order (as a real system writes
them). Each has a task, ~``steps`` steps (thoughts and tool calls alternating, a final answer
when it succeeded), evaluations when it ended, errors whose signatures repeat with a long tail
(a few are very common, most are rare), the odd confirmation, human score and manual retry,
and a share of runs in the scope of strategies on trial or active.

Text COPY is used with values that never contain tabs, newlines or backslashes, so no escaping
is needed: building a line is one f-string, and Python stays the cheap part of the pipeline.
"""

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, transaction

from feedback import roles
from feedback.models import Strategy, StrategyVersion, Task
from feedback.strategies.injection import strategies_changed

KINDS = [Task.Kind.EMAIL_TRIAGE, Task.Kind.FILE_ANALYSIS, Task.Kind.ARITHMETIC, Task.Kind.GENERAL]
KIND_WEIGHTS = [40, 30, 20, 10]
TOOLS = ["list_directory", "read_text_file", "analyze_text", "calculator", "send_reply", "http_get"]
ERROR_CLASSES = ["ToolError", "InvalidToolCall", "ToolTimeout", "ValidationFailed"]
BENCH_PASSWORD = "bench-operator"
GENERATED_TASK_PREFIX = "Bench task "  # a throw-away user of a throw-away database
N = r"\N"
# Generated runs are priced as gpt-4o-mini's calls would be (USD per million tokens: in, out).
PRICE_PER_MILLION = (0.15, 0.60)


def _cost(tokens_in: int, tokens_out: int) -> float:
    return (tokens_in * PRICE_PER_MILLION[0] + tokens_out * PRICE_PER_MILLION[1]) / 1_000_000


RUN_COLUMNS = (
    "id, task_id, task_kind, status, created_at, started_at, finished_at, heartbeat_at, worker, cancel_requested, "
    "llm_backend, model_name, system_prompt, plan, tools_offered, tool_selection, final_output, error, score, "
    "outcome, step_count, tokens_in, tokens_out, retry_of_id, cost"
)
STEP_COLUMNS = (
    "id, run_id, index, turn, kind, thought, tool_name, tool_call_id, arguments, result, error, error_class, "
    "error_signature, success, cached, stale, served_by, started_at, finished_at, duration_ms, attempts, "
    "tokens_in, tokens_out, validation_status, cost"
)


def _ts(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}+00"


@dataclass
class Buffers:
    tasks: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    attempts: list[str] = field(default_factory=list)
    evaluations: list[str] = field(default_factory=list)
    confirmations: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)


COPIES = [
    ("tasks", "feedback_task (id, text, kind, expected_answer, created_at, created_by_id)"),
    ("runs", f"feedback_run ({RUN_COLUMNS})"),
    ("steps", f"feedback_step ({STEP_COLUMNS})"),
    ("attempts", "feedback_stepattempt (id, step_id, number, started_at, duration_ms, error, error_class, retryable)"),
    (
        "evaluations",
        "feedback_evaluation (id, run_id, round, evaluator, kind, status, score, weight, feedback, details, "
        "corrected_answer, created_at, author_id, accomplished)",
    ),
    (
        "confirmations",
        "feedback_toolconfirmation (id, run_id, turn, tool_call_id, tool_name, arguments, status, requested_at, "
        "decided_at, reason, decided_by_id)",
    ),
    ("applied", "feedback_appliedstrategy (id, run_id, strategy_version_id, arm)"),
]
TABLES = {
    "tasks": "feedback_task",
    "runs": "feedback_run",
    "steps": "feedback_step",
    "attempts": "feedback_stepattempt",
    "evaluations": "feedback_evaluation",
    "confirmations": "feedback_toolconfirmation",
    "applied": "feedback_appliedstrategy",
}


def _next_ids() -> dict[str, int]:
    with connection.cursor() as cursor:
        out = {}
        for name, table in TABLES.items():
            cursor.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {table}")
            out[name] = cursor.fetchone()[0]
        return out


def _users() -> tuple[int, int]:
    roles.ensure_groups()
    users = {}
    for name, group in (
        ("bench-staff", roles.STAFF),
        ("bench-reviewer", roles.REVIEWER),
        ("bench-operator", roles.OPERATOR),
    ):
        user, created = get_user_model().objects.get_or_create(username=name)
        if created:
            user.set_password(BENCH_PASSWORD)
            user.save()
        user.groups.set(Group.objects.filter(name=group))
        users[name] = user.pk
    return users["bench-staff"], users["bench-reviewer"]


def _strategies(rng: random.Random, count: int, since: datetime) -> list[tuple[int, str]]:
    """Strategies in every status, with versions; returns (version id, arm) pairs runs can use."""
    usable = []
    offset = Strategy.objects.count()  # generating twice into one database adds, never collides
    statuses = [Strategy.Status.ACTIVE, Strategy.Status.TRIAL, Strategy.Status.PROPOSED, Strategy.Status.REJECTED]
    for i in range(count):
        status = statuses[i % len(statuses)]
        strategy = Strategy.objects.create(
            title=f"Bench strategy {i}: check the path before reading",
            status=status,
            pattern_kind=Strategy.PatternKind.ERROR_SIGNATURE,
            pattern_key=f"bench:{offset + i}",
            support=rng.randint(3, 400),
            confidence=round(rng.random(), 3),
            trial_started_at=since if status == Strategy.Status.TRIAL else None,
            created_at=since,
        )
        versions = [
            StrategyVersion.objects.create(
                strategy=strategy,
                number=n + 1,
                pattern=f"read_text_file fails with No such file ({i})",
                new_guidance="List the directory first and use the exact path it shows.",
                condition={"task_kinds": [KINDS[i % len(KINDS)]]},
                created_at=since,
            )
            for n in range(1 + i % 3)
        ]
        Strategy.objects.filter(pk=strategy.pk).update(current_version=versions[-1])
        if status == Strategy.Status.ACTIVE:
            usable.append((versions[-1].pk, "active"))
        elif status == Strategy.Status.TRIAL:
            usable += [(versions[-1].pk, "treatment"), (versions[-1].pk, "control")]
    strategies_changed()  # the update() above sent no signal
    return usable


@dataclass
class Generator:
    runs: int
    steps: int = 10
    days: int = 365
    seed: int = 7
    long_runs: int = 1
    long_run_steps: int = 1000
    strategies: int = 60
    batch: int = 20_000
    until: datetime = field(default_factory=lambda: datetime.now(UTC).replace(minute=0, second=0, microsecond=0))
    progress: Callable[[str], None] = print

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        # A long tail of signatures: a handful cause most errors, and most are rare.
        self.signatures = [f"{self.rng.getrandbits(160):040x}" for _ in range(2000)]

    def generate(self) -> dict[str, int]:
        staff, reviewer = _users()
        since = self.until - timedelta(days=self.days)
        usable = _strategies(self.rng, self.strategies, since)
        self.ids = _next_ids()
        first = dict(self.ids)
        first_run = self.ids["runs"]
        self.t0, self.span = since.timestamp(), self.days * 86400.0
        # The long runs (the trace page's benchmark) are the newest ones.
        long_from = self.runs - self.long_runs
        for start in range(0, self.runs, self.batch):
            buf = Buffers()
            for i in range(start, min(self.runs, start + self.batch)):
                n_steps = self.long_run_steps if i >= long_from else self.rng.randint(2, 2 * self.steps - 2)
                self._run(buf, i, n_steps, staff, reviewer, usable, first_run)
            with transaction.atomic(), connection.cursor() as cursor:
                for name, target in COPIES:
                    lines = getattr(buf, name)
                    if lines:
                        with cursor.cursor.copy(f"COPY {target} FROM STDIN") as copy:
                            copy.write("\n".join(lines) + "\n")
            self.progress(f"  {min(self.runs, start + self.batch):,} runs written")
        with connection.cursor() as cursor:
            for table in TABLES.values():
                cursor.execute(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT COALESCE(MAX(id), 1) FROM {table}))"
                )
                # VACUUM too: fresh COPY rows have no hint bits nor visibility map, and the first
                # readers would pay to set them; the benchmarks measure a settled database.
                cursor.execute(f"VACUUM (ANALYZE) {table}")
        return {name: self.ids[name] - first[name] for name in TABLES}

    def _run(self, buf: Buffers, i: int, n_steps: int, staff: int, reviewer: int, usable: list, first_run: int) -> None:
        rng, ids = self.rng, self.ids
        run_id, task_id = ids["runs"], ids["tasks"]
        ids["runs"] += 1
        ids["tasks"] += 1
        kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
        created = self.t0 + self.span * (i + rng.random()) / self.runs
        ended = created < self.until.timestamp() - 600
        roll = rng.random()
        status = ("succeeded" if roll < 0.78 else "failed" if roll < 0.95 else "cancelled") if ended else "running"
        buf.tasks.append(
            f"{task_id}\t{GENERATED_TASK_PREFIX}{i} of kind {kind}: triage the inbox\t{kind}\t\t{_ts(created)}\t{staff}"
        )
        t, tokens_in, tokens_out = created + rng.random() * 2, 0, 0
        for index in range(n_steps):
            step_id = ids["steps"]
            ids["steps"] += 1
            turn = index // 2 + 1
            last = index == n_steps - 1
            duration = int(rng.lognormvariate(4, 1)) + 1
            started, t = t, t + duration / 1000 + 0.05
            if last and status == "succeeded":
                kind_s, tool, args, result, success = "final", "", N, N, "t"
            elif index % 2 == 0:
                kind_s, tool, args, result, success = "thought", "", N, N, N
            else:
                kind_s, tool = "tool_call", TOOLS[rng.randrange(len(TOOLS))]
                args, result, success = f'{{"path": "inbox/{index}.txt"}}', '{"ok": true}', "t"
            error = error_class = signature = ""
            attempts = 1
            if kind_s == "tool_call" and rng.random() < 0.12:
                success, result = "f", N
                sig = min(int(rng.paretovariate(1.2)) - 1, len(self.signatures) - 1)
                signature, error_class = self.signatures[sig], ERROR_CLASSES[sig % len(ERROR_CLASSES)]
                error = f"No such file: inbox/{sig}.txt"
                if rng.random() < 0.3:
                    attempts = rng.randint(2, 3)
                    for number in range(1, attempts + 1):
                        buf.attempts.append(
                            f"{ids['attempts']}\t{step_id}\t{number}\t{_ts(started)}\t{duration}\t{error}\t{error_class}\tt"
                        )
                        ids["attempts"] += 1
            tin, tout = (rng.randint(200, 2000), rng.randint(10, 200)) if kind_s != "tool_call" else (0, 0)
            tokens_in, tokens_out = tokens_in + tin, tokens_out + tout
            thought = "Looking at the next message in the inbox" if kind_s != "tool_call" else ""
            buf.steps.append(
                f"{step_id}\t{run_id}\t{index}\t{turn}\t{kind_s}\t{thought}\t{tool}\t{'call-' + str(index) if tool else ''}"
                f"\t{args}\t{result}\t{error}\t{error_class}\t{signature}\t{success}\tf\tf\t\t{_ts(started)}\t{_ts(t)}"
                f"\t{duration}\t{attempts}\t{tin}\t{tout}\t{'pass' if success == 't' and tool else ''}"
                f"\t{_cost(tin, tout)!r}"
            )
        score, outcome = N, "not_accomplished" if status in ("failed", "cancelled") else "unknown"
        if ended and status != "cancelled" and rng.random() < 0.9:
            value = rng.betavariate(5, 2) if status == "succeeded" else rng.betavariate(2, 5)
            score = f"{value:.3f}"
            # As the outcome rule decides: an answer the judge finds poor was not accomplished.
            if status == "succeeded":
                outcome = "accomplished" if value >= 0.5 else "not_accomplished"
            self._evaluations(buf, run_id, score, outcome, t, reviewer)
        retry_of = N
        if i > 10 and rng.random() < 0.005:
            retry_of = str(run_id - rng.randint(1, 10))
        finished = _ts(t) if ended else N
        output = "Flagged 3 urgent emails" if status == "succeeded" else ""
        failure = (
            "Step limit reached" if status == "failed" else "Cancelled by a user." if status == "cancelled" else ""
        )
        buf.runs.append(
            f"{run_id}\t{task_id}\t{kind}\t{status}\t{_ts(created)}\t{_ts(created + 1)}\t{finished}\t{_ts(t)}\t\tf"
            f"\tbench\tzero-latency\tYou are a careful agent.\t[]\t[]\tall\t{output}\t{failure}\t{score}\t{outcome}"
            f"\t{n_steps}\t{tokens_in}\t{tokens_out}\t{retry_of}\t{_cost(tokens_in, tokens_out)!r}"
        )
        if rng.random() < 0.01:
            buf.confirmations.append(
                f"{ids['confirmations']}\t{run_id}\t1\tcall-1\tsend_reply\t{{}}\tapproved\t{_ts(created + 2)}\t{_ts(created + 60)}\t\t{reviewer}"
            )
            ids["confirmations"] += 1
        if usable and rng.random() < 0.15:
            version, arm = usable[rng.randrange(len(usable))]
            buf.applied.append(f"{ids['applied']}\t{run_id}\t{version}\t{arm}")
            ids["applied"] += 1

    def _evaluations(self, buf: Buffers, run_id: int, score: str, outcome: str, t: float, reviewer: int) -> None:
        ids, rng = self.ids, self.rng
        said = "t" if outcome == "accomplished" else "f"
        # The rule evaluator only ever says "not accomplished" (a failed run, a refusal).
        rows = [("rule", "rule", N, "f" if outcome == "not_accomplished" else N)]
        if rng.random() < 0.5:
            rows.append(("offline_heuristic_judge", "judge", N, said))
        if rng.random() < 0.02:
            rows.append(("human", "human", str(reviewer), said))
        for evaluator, kind, author, accomplished in rows:
            buf.evaluations.append(
                f"{ids['evaluations']}\t{run_id}\t1\t{evaluator}\t{kind}\tok\t{score}\t1\tLooks right\t{{}}\t\t{_ts(t + 5)}\t{author}\t{accomplished}"
            )
            ids["evaluations"] += 1


def generate(**options) -> dict[str, int]:
    return Generator(**options).generate()


def fill(
    *,
    runs: int = 1000,
    steps: int = 10,
    days: int = 365,
    seed: int = 7,
    long_runs: int = 1,
    long_run_steps: int = 1000,
    strategies: int = 60,
    progress: Callable[[str], object] = print,
) -> str:
    """Generate the history, then rebuild the closed days' metric tables as beat would; returns a summary."""
    from feedback.metrics.daily import daily_stats_rebuild_all
    from feedback.models import DailyRunStats, DailyToolLatency, DailyToolStats

    if connection.vendor != "postgresql":
        raise RuntimeError("The bench history is written with PostgreSQL COPY: set DATABASE_URL to PostgreSQL.")
    started = time.monotonic()
    counts = generate(
        runs=runs,
        steps=steps,
        days=days,
        seed=seed,
        long_runs=min(long_runs, runs),
        long_run_steps=long_run_steps,
        strategies=strategies,
        progress=progress,
    )
    copied = time.monotonic() - started
    daily_stats_rebuild_all()
    with connection.cursor() as cursor:
        # As autovacuum would soon after a production rebuild (where it may be off, as on the
        # bench machines, the planner would keep guessing a handful of rows for a year of them).
        for model in (DailyRunStats, DailyToolStats, DailyToolLatency):
            cursor.execute(f"VACUUM (ANALYZE) {model._meta.db_table}")
    return (
        ", ".join(f"{n:,} {name}" for name, n in counts.items())
        + f" in {copied:.0f} s; daily tables in {time.monotonic() - started - copied:.0f} s."
    )
