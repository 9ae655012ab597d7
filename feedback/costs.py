"""What runs cost: their model calls' tokens at the price table's rates (ModelPrice).

A run is priced by its model: the row for its ``model_name``, else the ``*`` row, else it is
*unpriced* (cost None, shown as "—": an unknown price is never a cost of 0). The offline demo
model costs nothing. Each step's cost is written with the step (feedback/agent/recorder.py) and
the run's is their sum, kept with its other counters; an LLM judge's evaluation is priced the
same way from the tokens it reports.
"""

from dataclasses import dataclass
from decimal import Decimal

from django.utils import timezone

from feedback.models import ModelPrice

OFFLINE_BACKEND = "offline"
MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class Price:
    input_per_million: Decimal
    output_per_million: Decimal

    def of(self, tokens_in: int, tokens_out: int) -> float:
        """US dollars for these tokens."""
        cost = (tokens_in * self.input_per_million + tokens_out * self.output_per_million) / MILLION
        return float(cost)


FREE = Price(Decimal(0), Decimal(0))


def price_for(*, backend: str, model_name: str) -> Price | None:
    """The price of a model's tokens, None when the table has none for it."""
    if backend == OFFLINE_BACKEND:
        return FREE
    # Per name, the row in effect now: the latest that has started (the first seen, newest first).
    in_effect = ModelPrice.objects.filter(
        model_name__in=[model_name, ModelPrice.ANY_MODEL], effective_from__lte=timezone.now()
    ).order_by("-effective_from")
    rows: dict[str, ModelPrice] = {}
    for found in in_effect:
        rows.setdefault(found.model_name, found)
    row = rows.get(model_name) or rows.get(ModelPrice.ANY_MODEL)
    return Price(row.input_per_million, row.output_per_million) if row else None
