"""Who sees which run, a run's state (what its page shows changes only with it) and the
strategies applied to it."""

import functools

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import CharField, F, OuterRef, QuerySet, StringAgg, Subquery, Value
from django.db.models.functions import Cast, Concat

from feedback.models import AppliedStrategy, Evaluation, Run, Step, ToolConfirmation


def runs_visible_to(user: AbstractBaseUser) -> QuerySet[Run]:
    """Operators and reviewers see every run; staff see the runs of their own tasks."""
    runs = Run.objects.all()
    if not user.has_perm("feedback.view_run"):
        runs = runs.filter(task__created_by=user)
    return runs


def run_visible_to(user: AbstractBaseUser, *, owner_id: int | None) -> bool:
    """``runs_visible_to``'s rule for one run whose task ``owner_id`` submitted."""
    return user.has_perm("feedback.view_run") or (owner_id is not None and owner_id == user.pk)


# --- a run's state: what its page and its parts show changes only with it -----------------------
# From the run's row: the final answer and the error come with the status, the tokens with the
# step count (written with each step), the model, prompt, tools and strategies before
# llm_backend (written as the run starts); the times make its clock and its waterfall; the
# sandbox's size and removal, what it says of the run's files.
RUN_STATE = (
    "status", "step_count", "cancel_requested", "score", "outcome", "plan", "llm_backend",
    "created_at", "started_at", "finished_at", "sandbox_bytes", "sandbox_deleted_at",
)  # fmt: skip


def _listed(rows: QuerySet, *, to: str) -> Subquery:
    """The ``rows`` of the outer run (through their field ``to``), each as "id:status", in id
    order, in one string: enough to tell when one is added or changes status (evaluations are
    written once; confirmations and sub-agent runs change by their status)."""
    item = Concat(Cast("id", CharField()), Value(":"), "status", output_field=CharField())
    # In id order where the database can be asked to (SQLite before 3.44 cannot): the same rows in
    # another order would only make a new ETag, never a stale page.
    order = {"order_by": "id"} if connection.features.supports_aggregate_order_by_clause else {}
    listed = rows.filter(**{to: OuterRef("pk")}).order_by().values(to)
    return Subquery(listed.annotate(listed=StringAgg(item, Value(","), **order)).values("listed"))


@functools.cache
def _run_states() -> QuerySet[Run]:
    """Every run's state, as ``run_state`` reads one of them. Built once a process, as a module's
    queryset is: a live page asks for its run's state every second, and building these
    subqueries cost 2.5 ms of the 4 ms each answer took (its SQL: half a millisecond)."""
    last_step = Step.objects.filter(run=OuterRef("pk")).order_by("-index").values("index")[:1]
    return Run.objects.values(
        *RUN_STATE,
        owner=F("task__created_by"),
        last_step=Subquery(last_step),
        evaluations_listed=_listed(Evaluation.objects.all(), to="run"),
        confirmations_listed=_listed(ToolConfirmation.objects.all(), to="run"),
        children_listed=_listed(Run.objects.all(), to="parent"),
    )


def run_state(run_id: int) -> dict | None:
    """What a run's page shows changes only when this does, in one query: its row's columns that
    show, the index of its last step (each step is written once), its evaluations, its
    confirmations and its sub-agent runs with their statuses, and who submitted it (for who may
    see it). None when there is no such run."""
    return next(iter(_run_states().filter(pk=run_id)[:1]), None)


def run_applied_strategies(run: Run) -> QuerySet[AppliedStrategy]:
    return run.applied_strategies.select_related("strategy_version__strategy").order_by("id")
