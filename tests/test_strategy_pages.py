import pytest
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from feedback.models import AppliedStrategy, Run, Strategy

from .factories import make_run
from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db


@pytest.fixture
def proposed(db):
    s = make_strategy()
    run = make_run(text="Summarise <b>release-notes.txt</b>", kind="file_analysis", status=Run.Status.SUCCEEDED,
                   score=0.3)  # fmt: skip
    s.evidence.add(run)
    s.evidence_summary = {"failing_with": 12, "failing_total": 14, "succeeding_with": 0, "succeeding_total": 30}
    s.save()
    return s


def test_the_review_page_shows_evidence_contrast_and_the_prompt_diff(client, reviewer, proposed):
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[proposed.pk])).content.decode()
    assert "12 of 14 failing runs show it, against 0 of 30 succeeding runs" in html
    assert "Summarise &lt;b&gt;release-notes.txt&lt;/b&gt;" in html and "<b>release-notes" not in html
    assert '<span class="diff-add">+Lessons from earlier runs (follow them):</span>' in html
    assert '<span class="diff-add">+- Use exact paths.</span>' in html
    assert 'value="approve"' in html and 'value="reject"' in html and 'value="promote"' not in html
    assert "Save new version" in html


def test_an_operator_reads_but_cannot_decide(client, operator, proposed):
    client.force_login(operator)
    html = client.get(reverse("feedback-strategy-detail", args=[proposed.pk])).content.decode()
    assert "Use exact paths." in html and 'value="approve"' not in html and "Save new version" not in html


def test_approve_reject_and_their_messages(client, reviewer, proposed):
    client.force_login(reviewer)
    url = reverse("feedback-strategy-decide", args=[proposed.pk])
    response = client.post(url, {"action": "approve", "reason": "worth a try", "trial_fraction": "0.25"}, follow=True)
    assert f"Strategy #{proposed.pk} is now on trial." in response.content.decode()
    proposed.refresh_from_db()
    assert proposed.status == "trial" and proposed.trial_fraction == 0.25
    response = client.post(url, {"action": "reject", "reason": "changed my mind"}, follow=True)
    assert "A strategy that is on trial cannot be rejected." in response.content.decode()
    response = client.post(url, {"action": "roll_back", "reason": ""}, follow=True)
    assert "Say why." in response.content.decode()
    proposed.refresh_from_db()
    assert proposed.status == "trial"


def test_the_trial_panel_shows_both_arms(client, reviewer, settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 3
    s = make_strategy(status="trial")
    Strategy.objects.filter(pk=s.pk).update(trial_started_at="2026-11-01T00:00:00Z")
    for arm, scores in (("treatment", [0.9, 0.95, 0.92, 0.91]), ("control", [0.4, 0.5, 0.45, 0.42])):
        for score in scores:
            AppliedStrategy.objects.create(run=make_run(status="succeeded", score=score),
                                           strategy_version=s.current_version, arm=arm)  # fmt: skip
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[s.pk])).content.decode()
    assert "promote: the treatment is significantly better" in html
    assert "<td>Treatment (applied)</td><td>4</td><td>4</td><td>0.920</td>" in html
    assert 'value="promote"' in html


def test_a_bad_edit_keeps_what_was_typed(client, reviewer, proposed):
    client.force_login(reviewer)
    data = {"title": "t", "pattern": "p", "new_guidance": "Read <carefully>", "condition": "{not json",
            "guardrails": "[]"}  # fmt: skip
    response = client.post(reverse("feedback-strategy-edit", args=[proposed.pk]), data)
    html = response.content.decode()
    assert response.status_code == 400 and "Not valid JSON" in html
    assert "Read &lt;carefully&gt;" in html and "{not json" in html
    assert proposed.versions.count() == 1
    data["condition"] = '{"task_kinds": ["file_analysis"], "keywords": ["notes"]}'
    response = client.post(reverse("feedback-strategy-edit", args=[proposed.pk]), data)
    assert response.status_code == 302
    proposed.refresh_from_db()
    assert proposed.current_version.number == 2 and proposed.current_version.condition["keywords"] == ["notes"]


def test_a_reviewer_edits_the_title_and_guidance_in_the_browser(client, reviewer, proposed):
    client.force_login(reviewer)
    url = reverse("feedback-strategy-detail", args=[proposed.pk])
    html = client.get(url).content.decode()
    assert 'name="title"' in html and 'value="Resolve paths"' in html
    data = {"title": "Find the file before reading it", "pattern": "read_text_file: no such file",
            "new_guidance": "List the folders, then read the exact path.", "condition": "{}", "guardrails": "[]",
            "reason": "clearer"}  # fmt: skip
    response = client.post(reverse("feedback-strategy-edit", args=[proposed.pk]), data, follow=True)
    html = response.content.decode()
    assert "Saved as version 2." in html
    assert "<h1>Find the file before reading it</h1>" in html
    assert "List the folders, then read the exact path." in html
    proposed.refresh_from_db()
    assert proposed.title == "Find the file before reading it"
    assert proposed.versions.get(number=1).title == "Resolve paths"
    # The history shows each version with its title.
    assert "v1 · " in html and "Resolve paths" in html


def test_the_mining_schedule_is_edited_without_a_restart(client, reviewer):
    client.force_login(reviewer)
    client.post(reverse("feedback-strategies-schedule"), {"every_minutes": "15"})
    task = PeriodicTask.objects.get(task="feedback.tasks.strategies_mine_task")
    assert (task.interval.every, task.interval.period) == (15, "minutes")
    html = client.get(reverse("feedback-strategy-list")).content.decode()
    assert 'value="15"' in html
    response = client.post(reverse("feedback-strategies-schedule"), {"every_minutes": "0"}, follow=True)
    assert "between 1 and 10080" in response.content.decode()
