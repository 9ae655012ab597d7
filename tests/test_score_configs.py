"""Score configurations (issue 26.1): what reviewers rate beside the 0–1 score, defined by
operators (a number in a range, a category, yes / no), asked for by the score forms (the run page,
the inbox) and the API, kept with the reviewer's evaluation, and counted on the metrics page."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from feedback import metrics, services
from feedback.models import Evaluation, Run, ScoreConfig, ScoreValue

from .api_helpers import call, token_for
from .factories import make_finished_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def configs():
    return {
        "stars": ScoreConfig.objects.create(name="Stars", data_type="numeric", min_value=1, max_value=5),
        "problem": ScoreConfig.objects.create(
            name="Problem", data_type="categorical", categories=["None", "Wrong tool", "Incomplete"]
        ),
        "helpful": ScoreConfig.objects.create(name="Helpful", data_type="boolean", required=True),
    }


def ended(**fields) -> Run:
    """A run that ended long enough ago for its page to offer the score form."""
    fields.setdefault("finished_at", timezone.now() - timedelta(hours=1))
    return make_finished_run(output="4", **fields)


def field(config: ScoreConfig) -> str:
    return f"config_{config.pk}"


def test_an_operator_defines_each_type_and_a_bad_one_comes_back_as_typed(client, operator):
    client.force_login(operator)
    url = reverse("feedback-settings-score-create")
    for body in (
        {"name": "Stars", "data_type": "numeric", "min_value": "1", "max_value": "5"},
        {"name": "Problem", "data_type": "categorical", "categories": "None\n Wrong tool \n\nNone\nIncomplete"},
        {"name": "Helpful", "data_type": "boolean", "min_value": "3", "required": "on"},
    ):
        assert client.post(url, body).status_code == 302, body
    stars, problem, helpful = (ScoreConfig.objects.get(name=n) for n in ("Stars", "Problem", "Helpful"))
    assert (stars.min_value, stars.max_value, stars.updated_by) == (1, 5, operator)
    assert problem.categories == ["None", "Wrong tool", "Incomplete"]  # trimmed, blank and repeated lines dropped
    assert (helpful.min_value, helpful.required) == (None, True)  # a bound means nothing for yes / no
    bad = client.post(url, {"name": "Tone <b>", "data_type": "categorical", "categories": "only one"})
    assert bad.status_code == 400 and "Give at least two categories." in bad.content.decode()
    assert "only one" in bad.content.decode() and "Tone &lt;b&gt;" in bad.content.decode()
    empty_range = client.post(url, {"name": "Range", "data_type": "numeric", "min_value": "2", "max_value": "2"})
    assert empty_range.status_code == 400 and "The maximum is above the minimum." in empty_range.content.decode()
    page = client.get(reverse("feedback-settings-score-list")).content.decode()
    assert "None / Wrong tool / Incomplete" in page and "1 – 5" in page and not ScoreConfig.objects.filter(name="Range")


def test_the_run_page_asks_for_each_live_configuration_and_records_the_values(client, reviewer, configs):
    run = ended()
    ScoreConfig.objects.create(name="Old", data_type="boolean", archived=True)
    client.force_login(reviewer)
    page = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert f'name="{field(configs["stars"])}"' in page and 'min="1.0"' in page and 'max="5.0"' in page
    assert '<option value="Wrong tool">Wrong tool</option>' in page and "Old" not in page
    body = {"score": "0.3", field(configs["stars"]): "2", field(configs["problem"]): "Wrong tool"}
    body[field(configs["helpful"])] = "0"
    response = client.post(reverse("feedback-run-score", args=[run.pk]), body, headers={"HX-Request": "true"})
    html = response.content.decode()
    evaluation = Evaluation.objects.get(run=run, kind="human")
    given = {v.config.name: v.value for v in evaluation.score_values.select_related("config")}
    assert given == {"Stars": 2.0, "Problem": "Wrong tool", "Helpful": False}
    assert '<span class="muted">Problem</span> <strong>Wrong tool</strong>' in html
    assert '<span class="muted">Helpful</span> <strong>No</strong>' in html


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"stars": "6"}, "Ensure this value is less than or equal to 5"),
        ({"stars": "nan"}, "Enter a number."),
        ({"problem": "Rude"}, "Select a valid choice."),
        ({}, "This field is required."),  # Helpful is required
    ],
)
def test_a_bad_value_is_refused_with_its_message_and_records_nothing(client, reviewer, configs, values, error):
    run = ended()
    client.force_login(reviewer)
    body = {"score": "0.5", "comment": "kept as typed", field(configs["helpful"]): "1"}
    body.update({field(configs[name]): value for name, value in values.items()})
    if not values:
        del body[field(configs["helpful"])]
    html = client.post(reverse("feedback-run-score", args=[run.pk]), body, headers={"HX-Request": "true"})
    assert error in html.content.decode() and "kept as typed" in html.content.decode()
    assert not Evaluation.objects.filter(run=run, kind="human").exists()


def test_the_service_checks_values_itself(reviewer, configs):
    run = ended()
    helpful = ScoreValue(config=configs["helpful"], number=1)
    with pytest.raises(ValidationError, match="Stars is between 1 – 5"):
        services.run_add_human_score(
            run=run, user=reviewer, score=0.5, score_values=[helpful, ScoreValue(config=configs["stars"], number=9)]
        )
    with pytest.raises(ValueError, match="Required: Helpful"):
        services.run_add_human_score(run=run, user=reviewer, score=0.5)
    with pytest.raises(ValidationError, match="Helpful is yes or no"):
        services.run_add_human_score(
            run=run, user=reviewer, score=0.5, score_values=[ScoreValue(config=configs["helpful"], number=0.5)]
        )
    assert not Evaluation.objects.filter(run=run).exists()


def test_the_inbox_scores_with_the_configurations_too(client, reviewer, configs):
    run = make_finished_run(output="?", score=0.1, text="low score task")
    client.force_login(reviewer)
    page = client.get(reverse("feedback-inbox"), {"kind": "run"}).content.decode()
    assert f'name="{field(configs["problem"])}"' in page
    body = {"score": "0.2", field(configs["helpful"]): "1", field(configs["problem"]): "Incomplete"}
    client.post(reverse("feedback-inbox-decide", args=["run", run.pk]), body)
    values = ScoreValue.objects.filter(evaluation__run=run).order_by("config__name")
    assert [(v.config.name, v.display) for v in values] == [("Helpful", "Yes"), ("Problem", "Incomplete")]


def test_the_api_lists_the_configurations_and_takes_values_by_name(client, reviewer, configs):
    run = ended()
    token = token_for(reviewer)
    listed = call(client, "GET", "/score-configs", token=token).json()
    assert [(c["name"], c["data_type"], c["categories"]) for c in listed][:2] == [
        ("Helpful", "boolean", []),
        ("Problem", "categorical", ["None", "Wrong tool", "Incomplete"]),
    ]
    body = {"score": 0.9, "scores": {"Stars": 4.5, "Helpful": True, "Problem": "None"}}
    response = call(client, "POST", f"/runs/{run.pk}/score", token=token, body=body)
    assert response.status_code == 201, response.json()
    scores = {s["name"]: s["value"] for s in response.json()["evaluation"]["scores"]}
    assert scores == {"Helpful": True, "Problem": "None", "Stars": 4.5}
    read = call(client, "GET", f"/runs/{run.pk}", token=token).json()
    assert {s["name"] for s in read["evaluations"][0]["scores"]} == {"Helpful", "Problem", "Stars"}


@pytest.mark.parametrize(
    ("scores", "key", "message"),
    [
        ({"Helpful": True, "Tone": "calm"}, "scores", "No score configuration is named Tone"),
        ({"Helpful": True, "Stars": 0}, "scores.Stars", "greater than or equal to 1"),
        ({"Helpful": True, "Problem": "Rude"}, "scores.Problem", "Select a valid choice"),
        ({"Stars": 3}, "scores.Helpful", "This field is required."),
    ],
)
def test_a_bad_value_through_the_api_is_400_under_its_name(client, reviewer, configs, scores, key, message):
    run = ended()
    response = call(
        client, "POST", f"/runs/{run.pk}/score", token=token_for(reviewer), body={"score": 1, "scores": scores}
    )
    assert response.status_code == 400
    assert message in " ".join(response.json()["errors"][key])
    assert not Evaluation.objects.filter(run=run).exists()


def test_a_configuration_in_use_keeps_its_meaning_and_is_archived_not_deleted(client, operator, reviewer, configs):
    run = ended()
    services.run_add_human_score(
        run=run,
        user=reviewer,
        score=0.5,
        score_values=[
            ScoreValue(config=configs["helpful"], number=1),
            ScoreValue(config=configs["problem"], label="Wrong tool"),
            ScoreValue(config=configs["stars"], number=4),
        ],
    )
    client.force_login(operator)

    def edit(config, **changes):
        body = {"name": config.name, "data_type": config.data_type, "categories": "\n".join(config.categories)}
        body.update({k: v for k, v in (("min_value", config.min_value), ("max_value", config.max_value)) if v})
        body.update(changes)
        return client.post(reverse("feedback-settings-score-edit", args=[config.pk]), body)

    assert "archive it and make a new one" in edit(configs["helpful"], data_type="numeric").content.decode()
    assert "In use, so kept: Wrong tool." in edit(configs["problem"], categories="None\nIncomplete").content.decode()
    assert "the range keeps them" in edit(configs["stars"], max_value="3").content.decode()
    assert (
        edit(configs["problem"], categories="None\nWrong tool\nIncomplete\nRude").status_code == 302
    )  # adding is fine
    refused = client.post(reverse("feedback-settings-score-delete", args=[configs["stars"].pk]), follow=True)
    assert "has values on runs: archive it instead" in refused.content.decode()
    assert ScoreConfig.objects.filter(pk=configs["stars"].pk).exists()
    assert edit(configs["stars"], archived="on").status_code == 302
    client.force_login(reviewer)
    page = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert field(configs["stars"]) not in page  # gone from the form
    assert '<span class="muted">Stars</span> <strong>4</strong>' in page  # the value given stays


def test_an_unused_configuration_can_be_deleted(client, operator, configs):
    client.force_login(operator)
    response = client.post(reverse("feedback-settings-score-delete", args=[configs["stars"].pk]))
    assert response.status_code == 302 and not ScoreConfig.objects.filter(name="Stars").exists()


def test_the_metrics_count_each_production_run_once_with_its_latest_value(client, operator, reviewer, configs):
    now = timezone.now()
    runs = [ended(created_at=now - timedelta(hours=i + 1)) for i in range(3)]
    experiment = ended(created_at=now - timedelta(hours=1), purpose=Run.Purpose.EXPERIMENT)

    def score(run, stars, problem, helpful):
        values = [
            ScoreValue(config=configs["helpful"], number=helpful),
            ScoreValue(config=configs["stars"], number=stars),
        ]
        if problem:
            values.append(ScoreValue(config=configs["problem"], label=problem))
        services.run_add_human_score(run=run, user=reviewer, score=0.5, score_values=values)

    score(runs[0], 1, "Wrong tool", 0)
    score(runs[0], 5, "None", 1)  # scored again: this replaces the first
    score(runs[1], 2, "Wrong tool", 0)
    score(runs[2], 3, "", 1)
    score(experiment, 1, "Incomplete", 0)  # experiment runs are measured apart
    figures = {f.config.name: f for f in metrics.reviewer_scores(metrics.Window.last(7))}
    assert (figures["Stars"].runs, figures["Stars"].mean, figures["Stars"].low, figures["Stars"].high) == (
        3,
        10 / 3,
        2,
        5,
    )
    assert (figures["Helpful"].runs, round(figures["Helpful"].mean, 3)) == (3, 0.667)
    assert figures["Problem"].categories == [("None", 1, 0.5), ("Wrong tool", 1, 0.5), ("Incomplete", 0, 0.0)]
    client.force_login(operator)
    html = client.get(reverse("feedback-metrics")).content.decode()
    assert (
        'id="reviewer-scores"' in html and "mean <strong>3.33</strong>" in html and "yes <strong>67%</strong>" in html
    )
