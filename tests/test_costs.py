"""What runs cost: each step priced when written at its model's price, the run's cost their sum,
an unknown price never taken for free, the rollups and the metrics page, a trial's cost per arm
blocking promotion, and an LLM judge's own cost."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from feedback import metrics, tasks
from feedback.agent.llm import LLMReply, ToolCall
from feedback.agent.recorder import Recorder
from feedback.evaluation.chain import evaluate_run
from feedback.metrics import Window
from feedback.models import AppliedStrategy, ModelPrice, Run, Step, Strategy
from feedback.strategies import services
from feedback.strategies.trials import trial_stats

from .factories import make_finished_run, make_run
from .test_agent_loop import run_loop
from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db


class PricedModel:
    """A stand-in for a hosted model (not our code): a calculator call, then the answer."""

    backend = "openai"

    def __init__(self, name: str) -> None:
        self.name = name
        call = ToolCall("c1", "calculator", '{"expression": "2 + 2"}')
        self.replies = [
            LLMReply(tool_calls=[call], tokens_in=1000, tokens_out=200),
            LLMReply(content="2 + 2 = 4", tokens_in=3000, tokens_out=100),
        ]

    def complete(self, messages, tools):
        return self.replies.pop(0)


def price(name: str, input_price: str, output_price: str) -> ModelPrice:
    return ModelPrice.objects.update_or_create(
        model_name=name, defaults={"input_per_million": input_price, "output_per_million": output_price}
    )[0]


def test_each_step_is_priced_at_its_model_s_price_and_the_run_costs_their_sum(client, operator):
    price("house-model", "2.00", "10.00")
    run = run_loop(make_run(), PricedModel("house-model"))
    assert run.status == Run.Status.SUCCEEDED
    costs = dict(run.steps.exclude(tokens_in=0).values_list("tokens_in", "cost"))
    assert costs == {1000: pytest.approx((1000 * 2 + 200 * 10) / 1e6), 3000: pytest.approx((3000 * 2 + 100 * 10) / 1e6)}
    # The first reply called a tool and said nothing: its tokens are on its model call's step.
    assert run.steps.get(kind=Step.Kind.THOUGHT).tokens_in == 1000
    assert run.steps.get(kind=Step.Kind.TOOL_CALL).tokens_in == 0
    assert run.cost == pytest.approx(sum(c for c in run.steps.values_list("cost", flat=True)))
    assert run.cost == pytest.approx(0.011)
    client.force_login(operator)
    page = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert 'id="run-cost">$0.011<' in page and "1000+200 tokens · $0.004" in page


def test_an_unknown_model_is_unpriced_never_free_until_a_catch_all_price_exists(client, operator):
    run = run_loop(make_run(), PricedModel("nobody-priced-this"))
    assert run.cost is None and not run.steps.exclude(cost=None).exists()
    client.force_login(operator)
    assert ">unpriced</span>" in client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    price(ModelPrice.ANY_MODEL, "1.00", "1.00")
    priced = run_loop(make_run(), PricedModel("nobody-priced-this"))
    assert priced.cost == pytest.approx((4000 + 300) / 1e6)


def test_the_offline_demo_model_costs_nothing(demo_workspace):
    from feedback.agent.loop import execute_run

    run = make_run(text="What is (17 * 23 + 4) / 5?")
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.llm_backend == "offline" and run.cost == 0


def test_a_later_price_change_does_not_rewrite_what_a_run_cost():
    row = price("house-model", "2.00", "10.00")
    run = run_loop(make_run(), PricedModel("house-model"))
    row.input_per_million = Decimal("200.00")
    row.save()
    run.refresh_from_db()
    assert run.cost == pytest.approx(0.011)


def test_a_resumed_run_counts_its_cost_from_its_steps():
    price("house-model", "1.00", "1.00")
    run = make_run(status=Run.Status.RUNNING, worker="w", llm_backend="openai", model_name="house-model")
    first = Recorder(run, "w")
    first.step(turn=1, kind=Step.Kind.THOUGHT, thought="a", tokens_in=500_000, tokens_out=0)
    Run.objects.filter(pk=run.pk).update(cost=None)  # whatever the row says
    resumed = Recorder(Run.objects.get(pk=run.pk), "w")
    resumed.step(turn=2, kind=Step.Kind.THOUGHT, thought="b", tokens_in=0, tokens_out=500_000)
    assert Run.objects.get(pk=run.pk).cost == pytest.approx(1.0)


def test_a_negative_price_is_refused_with_a_clear_error():
    with pytest.raises(ValidationError) as refused:
        ModelPrice(model_name="m", input_per_million=Decimal("-1"), output_per_million=Decimal("1")).full_clean()
    assert "model_price_not_negative" in str(refused.value)


def test_the_metrics_count_cost_from_the_rollups_as_live_and_unpriced_runs_apart(client, operator):
    noon = timezone.now() - timedelta(days=3)
    make_finished_run(created_at=noon, cost=0.25)
    make_finished_run(created_at=noon, cost=0.75, kind="general")
    make_finished_run(created_at=noon, cost=None)  # unpriced
    tasks.daily_stats_refresh_task()  # beat: the closed days into the daily tables
    whole_days = Window(since=noon - timedelta(days=1), until=noon + timedelta(days=2))
    assert metrics.split_window(whole_days)[1] is not None  # read from the daily rows
    live = Window(since=noon - timedelta(hours=1), until=noon + timedelta(hours=1))
    for window in (whole_days, live):
        summary = metrics.cost_summary(window)
        assert (summary["cost"], summary["costed"], summary["unpriced"]) == (pytest.approx(1.0), 2, 1)
        assert summary["cost_per_run"] == pytest.approx(0.5)
    by_kind = {row["kind"]: row for row in metrics.cost_by_kind(whole_days)}
    assert by_kind["general"]["cost"] == pytest.approx(0.75) and by_kind["arithmetic"]["unpriced"] == 1
    client.force_login(operator)
    html = client.get(reverse("feedback-metrics"), {"days": 7}).content.decode()
    assert 'id="figure-cost">$1.00<' in html
    assert "$0.50 per run over 2 runs, 1 unpriced" in html
    assert 'id="cost-general"' in html and 'id="chart-cost"' in html


def test_a_treatment_that_costs_significantly_more_blocks_promotion(reviewer):
    strategy = make_strategy(status="trial")
    Strategy.objects.filter(pk=strategy.pk).update(trial_started_at=timezone.now() - timedelta(days=1))
    start = timezone.now() - timedelta(hours=1)
    for arm, score, cost in (("treatment", 0.9, 0.05), ("control", 0.5, 0.01)):
        for i in range(12):
            run = make_run(status=Run.Status.SUCCEEDED, score=score + (i % 3) * 0.03, tokens_in=400,
                           tokens_out=50, cost=cost * (1 + (i % 3) * 0.1), started_at=start,
                           finished_at=start + timedelta(seconds=2))  # fmt: skip
            AppliedStrategy.objects.create(run=run, strategy_version=strategy.current_version, arm=arm)
    stats = trial_stats(strategy)
    cost = next(g for g in stats.guards if g.name == "cost")
    assert cost.worse and stats.recommendation == "blocked"
    assert any(b.startswith("cost per run (USD) is significantly worse") for b in stats.blockers)
    with pytest.raises(ValidationError):
        services.strategy_promote(strategy=strategy, reviewer=reviewer, reason="scores are better")


def test_an_llm_judge_s_call_is_priced(judge_server):
    price("judge-test", "10.00", "20.00")
    run = make_finished_run(output="The answer is 4.")
    evaluate_run(run.pk)
    judged = run.evaluations.get(kind="judge")
    assert judged.cost == pytest.approx((42 * 10 + 9 * 20) / 1e6)  # the tokens the judge server reports
    assert run.evaluations.get(kind="rule").cost is None
