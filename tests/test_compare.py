"""Two runs side by side: the same task with and without a strategy, their figures, evaluations
and steps aligned; who may compare what; bad input."""

import pytest
from django.urls import reverse

from feedback.comparison import align_steps
from feedback.models import AppliedStrategy, Evaluation, Run, Step

from .conftest import make_user
from .factories import make_finished_run
from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db
URL = reverse("feedback-run-compare")
TASK = "Summarise release-notes.txt and count its words"


def step(run: Run, index: int, kind: str = Step.Kind.TOOL_CALL, tool: str = "", **fields) -> Step:
    return Step.objects.create(run=run, index=index, turn=index, kind=kind, tool_name=tool, **fields)


@pytest.fixture
def pair(staff):
    """The same task twice: without the strategy (control), it tried the root first and failed;
    with it (treatment), it listed the folders first and found the file."""
    strategy = make_strategy(status="trial")
    control = make_finished_run(user=staff, text=TASK, output="I could not find release-notes.txt.", score=0.2,
                                kind="file_analysis", tokens_in=900, tokens_out=80, cost=0.0002)  # fmt: skip
    step(control, 0, tool="read_text_file", arguments={"path": "release-notes.txt"}, success=False,
         error="No such file: release-notes.txt")  # fmt: skip
    step(control, 1, kind=Step.Kind.FINAL, thought="I could not find release-notes.txt.")
    treatment = make_finished_run(user=staff, text=TASK, output="<b>Release 2.1</b>: 120 words.", score=0.9,
                                  kind="file_analysis", tokens_in=1500, tokens_out=120, cost=0.0003)  # fmt: skip
    step(treatment, 0, tool="list_directory", arguments={"path": "."}, success=True, result={"entries": ["docs"]})
    step(treatment, 1, tool="read_text_file", arguments={"path": "docs/release-notes.txt"}, success=True,
         result={"text": "Release 2.1"})  # fmt: skip
    step(treatment, 2, kind=Step.Kind.FINAL, thought="Release 2.1: 120 words.")
    for run, arm, score in ((control, "control", 0.2), (treatment, "treatment", 0.95)):
        AppliedStrategy.objects.create(run=run, strategy_version=strategy.current_version, arm=arm)
        Evaluation.objects.create(run=run, evaluator="rule", kind="rule", score=score, feedback=f"{arm} rule")
    return control, treatment


def test_two_runs_of_a_task_side_by_side_with_their_steps_aligned(client, staff, pair):
    control, treatment = pair
    client.force_login(staff)
    html = client.get(URL, {"a": control.pk, "b": treatment.pk}).content.decode()
    assert f"Run #{control.pk}" in html and f"Run #{treatment.pk}" in html
    assert "<td>0.20</td><td>0.90</td>" in html  # the scores
    assert "900 in / 80 out" in html and "1500 in / 120 out" in html
    assert "$0.0002" in html and "$0.0003" in html
    assert "Trial control (withheld)" in html and "Trial treatment (applied)" in html
    assert "&lt;b&gt;Release 2.1&lt;/b&gt;" in html and "<b>Release" not in html  # escaped
    assert "control rule" in html and "treatment rule" in html
    # The treatment's listing stands alone; both read the file and answered, side by side.
    steps = html.split('id="compare-steps"')[1]
    rows = steps.split("<tr class=")[1:]
    assert [row.split(">")[0] for row in rows] == ['"alone"', '"differs"', '"differs"']
    assert "list_directory" in rows[0] and "No such file" in rows[1] and "docs/release-notes.txt" in rows[1]


def test_a_run_alone_offers_the_other_runs_of_its_task_the_reader_may_see(client, staff, pair):
    control, treatment = pair
    someone = make_user("someone", "staff")
    hidden = make_finished_run(user=someone, text=TASK)
    make_finished_run(user=staff, text="Another task entirely")
    client.force_login(staff)
    html = client.get(URL, {"a": control.pk}).content.decode()
    assert f'id="suggestion-{treatment.pk}"' in html and f"?a={control.pk}&amp;b={treatment.pk}" in html
    assert f'id="suggestion-{hidden.pk}"' not in html and html.count('id="suggestion-') == 1
    run_page = client.get(reverse("feedback-run-detail", args=[control.pk])).content.decode()
    assert f'href="{URL}?a={control.pk}"' in run_page


def test_a_run_the_reader_may_not_see_is_refused_and_a_missing_one_is_not_found(client, staff, pair):
    control, _ = pair
    others = make_finished_run(user=make_user("someone", "staff"), text=TASK)
    client.force_login(staff)
    assert client.get(URL, {"a": control.pk, "b": others.pk}).status_code == 403
    assert client.get(URL, {"a": others.pk}).status_code == 403
    assert client.get(URL, {"a": control.pk, "b": 10**12}).status_code == 404


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"a": "abc"}, "Enter a whole number."),
        ({"a": "1", "b": "1"}, "a run compared with itself shows no difference"),
        ({"a": "0"}, "greater than or equal to 1"),
        ({"a": "9" * 40}, "less than or equal to"),
        ({"a": "<script>"}, "Enter a whole number."),
    ],
)
def test_bad_input_is_a_clear_error_on_the_form(client, staff, query, message):
    client.force_login(staff)
    response = client.get(URL, query)
    html = response.content.decode()
    assert response.status_code == 400 and message in html and "<script>" not in html


def test_steps_are_aligned_on_what_they_did():
    def steps(*actions: str) -> list[Step]:
        return [Step(index=i, kind=Step.Kind.TOOL_CALL, tool_name=name) for i, name in enumerate(actions)]

    left, right = steps("a", "b", "c"), steps("a", "x", "b", "c", "d")
    pairs = align_steps(left, right)
    shape = [(p.left.tool_name if p.left else None, p.right.tool_name if p.right else None) for p in pairs]
    assert shape == [("a", "a"), (None, "x"), ("b", "b"), ("c", "c"), (None, "d")]
    assert align_steps([], right)[0].left is None and len(align_steps(left, [])) == 3
