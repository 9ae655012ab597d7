"""The strategy kinds the learning cycle measures one by one (strategies/cycle.py, ``--kinds``):
each makes, of one part of a family's picked strategy versions, the change of a paired experiment
on the held-out items, so that part's effect is measured alone. Another kind (the insights of
issue 25.3) adds its entry to ``KINDS``."""

from collections.abc import Callable, Sequence

from feedback.agent.prompts import WORKED_EXAMPLES_HEADING
from feedback.models import StrategyVersion


def _guidance(versions: Sequence[StrategyVersion]) -> tuple[str, dict] | None:
    texts = [v.new_guidance.strip() for v in versions if v.new_guidance.strip()]
    return ("guidance", {"guidance": "\n".join(texts)}) if texts else None


def _examples(versions: Sequence[StrategyVersion]) -> tuple[str, dict] | None:
    # No experiment change places text in the prompt's worked-example section: the examples go in
    # as guidance text, under the same heading the prompt gives them (agent/prompts.py).
    texts = [v.worked_example.strip() for v in versions if v.worked_example.strip()]
    return ("guidance", {"guidance": WORKED_EXAMPLES_HEADING + "\n\n" + "\n\n".join(texts)}) if texts else None


def _guardrails(versions: Sequence[StrategyVersion]) -> tuple[str, dict] | None:
    rules = [rule for v in versions for rule in v.guardrails if isinstance(rule, dict)]
    return ("guardrails", {"guardrails": rules}) if rules else None


# Each strategy kind measured on its own (``kinds``): the experiment change (its kind and content)
# made of that part of a family's picked versions, None when they have none of it. Another kind
# (the insights of issue 25.3) adds its entry here.
KINDS: dict[str, Callable[[Sequence[StrategyVersion]], tuple[str, dict] | None]] = {
    "guidance": _guidance,
    "examples": _examples,
    "guardrails": _guardrails,
}
