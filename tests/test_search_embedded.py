"""Search on the embedded default (SQLite's FTS5 index, migration 0034) reads what people type as
PostgreSQL's websearch does, and nothing typed is taken for FTS5 syntax."""

import pytest
from django.db import connection

from feedback.models import Run, Task
from feedback.selectors.run_listing import fts5_query, search_runs

from .factories import make_run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("typed", "query"),
    [
        ("counting words", '"counting" "words"'),
        ('"urgent emails" inbox', '"urgent emails" "inbox"'),
        ("report -draft", '"report" NOT "draft"'),
        ('NEAR(a b) * : "', '"NEAR" "a" "b"'),
        ("-only", ""),
        ("  ", ""),
    ],
)
def test_what_is_typed_becomes_quoted_terms(typed, query):
    assert fts5_query(typed) == query


def _found(text: str) -> set[str]:
    return set(search_runs(Run.objects.all(), text).values_list("task__text", flat=True))


def test_several_words_stems_phrases_and_exclusions_find_the_same_tasks_on_both_databases():
    texts = [
        "Summarise the weekly report and count its words",
        "Classify the urgent emails in inbox/",
        "Summarise the draft report",
        "What is 6 * 7?",
    ]
    for text in texts:
        make_run(text=text, kind=Task.Kind.FILE_ANALYSIS)
    assert _found("counting words") == {texts[0]}
    assert _found("summarise report") == {texts[0], texts[2]}
    assert _found("summarise report -draft") == {texts[0]}
    assert _found('"urgent emails"') == {texts[1]}
    assert _found('"emails urgent"') == set()
    assert _found('NEAR( * ":') == set()  # typed syntax is words or nothing, never an error


def test_an_edited_or_deleted_task_is_found_by_its_new_text_only():
    run = make_run(text="Summarise the release notes", kind=Task.Kind.FILE_ANALYSIS)
    Task.objects.filter(pk=run.task_id).update(text="Count the words of the changelog")
    assert _found("release") == set() and _found("changelog") == {"Count the words of the changelog"}
    Task.objects.filter(pk=run.task_id).delete()
    assert _found("changelog") == set()
    if connection.vendor == "sqlite":  # the index follows the table, without orphans
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM feedback_task_fts WHERE feedback_task_fts MATCH 'changelog'")
            assert cursor.fetchone()[0] == 0
