"""Strategies: the list, one with its versions, audit log and trial, and a reviewer's decisions,
through the lifecycle's services (feedback/strategies/services.py), which lock the strategy: of
two reviewers deciding at once, the second gets 409 and the state the first one left."""

from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.utils.translation import gettext as _
from ninja import Query, Router

from feedback import selectors
from feedback.forms import StrategyDecisionForm
from feedback.models import Strategy
from feedback.strategies import services

from .auth import require_perm, require_write, user_of
from .cursors import decode_cursor, encode_cursor
from .errors import ApiError, form_invalid, invalid, refusals
from .outputs import StrategyDetailOut, StrategyListOut
from .schemas import DecisionIn, StrategyQuery

router = Router(tags=["strategies"])


@router.get("/strategies", response={200: StrategyListOut, **refusals(400)}, summary="List strategies")
def list_strategies(request: HttpRequest, filters: Query[StrategyQuery]) -> dict:
    """Newest first, optionally of one status; pages are keyset on the id (``next_cursor``)."""
    require_perm(user_of(request), "feedback.view_strategy")
    strategies = selectors.strategy_list(status=filters.status or "").order_by("-id")
    if filters.cursor:
        _direction, position = decode_cursor(filters.cursor, order="id")
        if not position.isdigit():
            raise invalid({"cursor": [_("Not a cursor of this list: pass next_cursor as given.")]})
        strategies = strategies.filter(id__lt=int(position))
    rows = list(strategies[: filters.limit + 1])
    more = len(rows) > filters.limit
    rows = rows[: filters.limit]
    return {
        "data": rows,
        "next_cursor": encode_cursor("id", "after", str(rows[-1].pk)) if more else None,
    }


@router.get(
    "/strategies/{strategy_id}", response={200: StrategyDetailOut, **refusals(400, 404)}, summary="Read a strategy"
)
def read_strategy(request: HttpRequest, strategy_id: int) -> Strategy:
    require_perm(user_of(request), "feedback.view_strategy")
    return selectors.strategy_detail(strategy_id)


@router.post(
    "/strategies/{strategy_id}/decisions",
    response={200: StrategyDetailOut, **refusals(400, 404, 409, 413)},
    summary="Decide on a strategy",
)
def decide_strategy(request: HttpRequest, strategy_id: int, payload: DecisionIn) -> Strategy:
    """Approve a proposal for trial, reject it, promote a trial or roll back: each with a reason,
    recorded in the audit log. 409 when the strategy's state does not allow it (someone decided
    first) or a promotion is blocked (a counter-metric, a mismatched split): the detail says why."""
    user = require_write(request)
    require_perm(user, "feedback.decide_strategy")
    strategy = selectors.strategy_detail(strategy_id)
    form = StrategyDecisionForm(payload.model_dump(exclude_none=True))
    if not form.is_valid():
        raise form_invalid(form)
    try:
        services.strategy_decide(strategy=strategy, reviewer=user, **form.cleaned_data)
    except services.IllegalTransition as exc:
        raise ApiError(409, str(exc)) from None
    except ValidationError as exc:
        raise ApiError(409, " ".join(exc.messages)) from None
    return selectors.strategy_detail(strategy_id)
