"""The reviewer inbox (issue 26.1): the three kinds of work that wait for a reviewer, in one list.

Each kind keeps its own definition of "waiting" (confirmations_waiting, review_queue, a proposal
is a strategy in ``proposed``); this module only puts them side by side, filters them the same
way and says who has claimed what. Order: confirmations first (a run is blocked on each, oldest
first), then proposals (most support first), then runs to score (newest first, as the queue)."""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from feedback.models import AppliedStrategy, InboxClaim, Run, Strategy, ToolConfirmation
from feedback.models.inbox import CLAIM_TTL

from .confirmations import confirmations_waiting
from .evaluation import review_queue

Kind = InboxClaim.Kind

# What each kind asks of the reviewer: the permission to decide it (feedback/roles.py).
KIND_PERMISSIONS = {
    Kind.CONFIRMATION: "feedback.confirm_toolconfirmation",
    Kind.PROPOSAL: "feedback.decide_strategy",
    Kind.RUN: "feedback.score_run",
}

# Why an item is in the inbox, by code (the reason filter's values).
REASONS = {
    "sensitive_call": _("Sensitive tool call"),
    "proposal": _("New proposal"),
    "not_accomplished": _("Not accomplished"),
    "low_score": _("Low score"),
    "disagreement": _("Judge and rule disagree"),
    "evaluator_failed": _("Evaluator failed"),
}
_RUN_REASONS = ("not_accomplished", "low_score", "disagreement", "evaluator_failed")
# Enough to work through in one sitting; the counts are exact whatever this is.
INBOX_LIMIT = 200


@dataclass(frozen=True)
class ItemRef:
    """An inbox item by kind and primary key; ``key`` ("run-12") is how URLs name it."""

    kind: str
    pk: int

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.pk}"

    @classmethod
    def parse(cls, key: str) -> "ItemRef | None":
        kind, _sep, pk = (key or "").partition("-")
        if kind not in Kind.values or not pk.isdigit() or len(pk) > 18:
            return None
        return cls(kind=kind, pk=int(pk))


@dataclass
class InboxItem:
    ref: ItemRef
    title: str
    created_at: datetime
    reasons: list[str]
    obj: Run | Strategy | ToolConfirmation
    claim: InboxClaim | None = None  # a live claim only; an expired one is shown as none
    strategy_ids: set[int] = field(default_factory=set)

    @property
    def kind(self) -> str:
        return self.ref.kind

    @property
    def pk(self) -> int:
        return self.ref.pk

    @property
    def key(self) -> str:
        return self.ref.key

    @property
    def kind_label(self) -> str:
        return str(Kind(self.kind).label)

    @property
    def reason_labels(self) -> list[str]:
        return [str(REASONS[r]) for r in self.reasons]

    def free_for(self, user: AbstractBaseUser) -> bool:
        """Unclaimed, or claimed by ``user``: what "Save & next" may move to."""
        return self.claim is None or self.claim.claimed_by_id == user.pk


@dataclass
class Inbox:
    items: list[InboxItem]
    counts: dict[str, int]  # per kind, under the reason and strategy filters
    kinds: list[str]  # the kinds this user may decide


def kinds_for(user: AbstractBaseUser) -> list[str]:
    return [kind for kind, perm in KIND_PERMISSIONS.items() if user.has_perm(perm)]


def _applied(strategy_id: int, run: str) -> Exists:
    return Exists(AppliedStrategy.objects.filter(run=OuterRef(run), strategy_version__strategy_id=strategy_id))


def _confirmations(reason: str, strategy_id: int | None) -> QuerySet[ToolConfirmation]:
    if reason and reason != "sensitive_call":
        return ToolConfirmation.objects.none()
    confirmations = confirmations_waiting().select_related("run", "run__task", "run__task__workspace")
    if strategy_id:
        confirmations = confirmations.filter(_applied(strategy_id, "run_id"))
    return confirmations


def _proposals(reason: str, strategy_id: int | None) -> QuerySet[Strategy]:
    if reason and reason != "proposal":
        return Strategy.objects.none()
    proposals = Strategy.objects.filter(status=Strategy.Status.PROPOSED).select_related("current_version")
    if strategy_id:
        proposals = proposals.filter(pk=strategy_id)
    return proposals.order_by("-support", "-updated_at", "-pk")


def _runs(reason: str, strategy_id: int | None) -> QuerySet[Run]:
    if reason and reason not in _RUN_REASONS:
        return Run.objects.none()
    runs = review_queue()
    if reason:
        runs = runs.filter(**{reason: True})
    if strategy_id:
        runs = runs.filter(_applied(strategy_id, "pk"))
    return runs


def _strategies_of(run_ids: Iterable[int]) -> dict[int, set[int]]:
    applied: dict[int, set[int]] = {}
    for run_id, strategy_id in AppliedStrategy.objects.filter(run_id__in=list(run_ids)).values_list(
        "run_id", "strategy_version__strategy_id"
    ):
        applied.setdefault(run_id, set()).add(strategy_id)
    return applied


def _item(kind: str, obj: Run | Strategy | ToolConfirmation) -> InboxItem:
    if kind == Kind.CONFIRMATION:
        title = f"{obj.tool_name} · {obj.run.task.text}"
        return InboxItem(
            ref=ItemRef(kind, obj.pk), title=title, created_at=obj.requested_at, reasons=["sensitive_call"], obj=obj
        )
    if kind == Kind.PROPOSAL:
        return InboxItem(
            ref=ItemRef(kind, obj.pk), title=obj.title, created_at=obj.created_at, reasons=["proposal"], obj=obj
        )
    reasons = [code for code in _RUN_REASONS if getattr(obj, code)]
    return InboxItem(
        ref=ItemRef(kind, obj.pk), title=obj.task.text, created_at=obj.created_at, reasons=reasons, obj=obj
    )


def _with_claims_and_strategies(items: list[InboxItem]) -> list[InboxItem]:
    run_ids = [i.obj.run_id if i.kind == Kind.CONFIRMATION else i.pk for i in items if i.kind != Kind.PROPOSAL]
    applied = _strategies_of(run_ids)
    claims = live_claims(i.ref for i in items)
    for item in items:
        if item.kind == Kind.RUN:
            item.strategy_ids = applied.get(item.pk, set())
        elif item.kind == Kind.CONFIRMATION:
            item.strategy_ids = applied.get(item.obj.run_id, set())
        item.claim = claims.get(item.ref)
    return items


_QUERYSETS = {Kind.CONFIRMATION: _confirmations, Kind.PROPOSAL: _proposals, Kind.RUN: _runs}


def inbox_item(*, ref: ItemRef) -> InboxItem | None:
    """One item, if it still waits for a reviewer (None once decided, withdrawn or scored)."""
    obj = _QUERYSETS[ref.kind]("", None).filter(pk=ref.pk).first()
    return None if obj is None else _with_claims_and_strategies([_item(ref.kind, obj)])[0]


def live_claims(refs: Iterable[ItemRef]) -> dict[ItemRef, InboxClaim]:
    """The claims still holding on these items, by item."""
    refs = list(refs)
    by_kind: dict[str, list[int]] = {}
    for ref in refs:
        by_kind.setdefault(ref.kind, []).append(ref.pk)
    if not by_kind:
        return {}
    wanted = Q()
    for kind, pks in by_kind.items():
        wanted |= Q(kind=kind, object_id__in=pks)
    claims = InboxClaim.objects.filter(wanted, claimed_at__gt=timezone.now() - CLAIM_TTL).select_related("claimed_by")
    return {ItemRef(kind=c.kind, pk=c.object_id): c for c in claims}


def inbox(*, user: AbstractBaseUser, kind: str = "", reason: str = "", strategy_id: int | None = None) -> Inbox:
    """What waits for ``user`` (only the kinds they may decide), filtered, with live claims."""
    kinds = kinds_for(user)
    querysets = {k: _QUERYSETS[k](reason, strategy_id) for k in kinds}
    counts = {k: querysets[k].count() for k in kinds}
    shown = [k for k in kinds if not kind or k == kind]
    items = [_item(k, obj) for k in shown for obj in querysets[k][:INBOX_LIMIT]]
    _with_claims_and_strategies(items)
    return Inbox(items=items, counts=counts, kinds=kinds)


def inbox_strategies() -> QuerySet[Strategy]:
    """The strategy filter's choices: proposals, and strategies applied to runs (not rejected)."""
    return Strategy.objects.exclude(status=Strategy.Status.REJECTED).order_by("-updated_at").only("pk", "title")[:100]


def inbox_next(items: list[InboxItem], *, after: ItemRef | None, order: list[ItemRef], user: AbstractBaseUser):
    """The item "Save & next" moves to: the first one after ``after`` in ``order`` (the list as
    it was shown when the decision was made, wrapping round) that is still waiting and free for
    ``user``; failing that, the first free item now in the list (new work arrived)."""
    by_ref = {i.ref: i for i in items}
    if after in order:
        start = order.index(after)
        for ref in order[start + 1 :] + order[:start]:
            item = by_ref.get(ref)
            if item is not None and item.free_for(user):
                return item
    return next((i for i in items if i.free_for(user) and i.ref != after), None)
