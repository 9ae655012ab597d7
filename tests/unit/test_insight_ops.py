"""An insight list's operations (ExpeL): the vote arithmetic, the cap, strict reading of a
writer's answer, the list's own check and the diff a reviewer reads."""

from feedback.strategies.insight_ops import (
    MAX_INSIGHTS,
    START_VOTES,
    Operation,
    apply_operations,
    check_insights,
    insights_diff,
    numbered,
    parse_operations,
)


def item(key, text, votes):
    return {"id": key, "text": text, "votes": votes}


def texts_and_votes(insights):
    return [(i["text"], i["votes"]) for i in insights]


def test_add_starts_at_two_upvote_and_edit_add_one_downvote_removes_one():
    start = [item("a", "Read the file first.", 3), item("b", "Check each result.", 1)]
    new, applied, ignored = apply_operations(
        start,
        [
            Operation("ADD", 0, "List the folder before reading."),
            Operation("UPVOTE", 1),
            Operation("EDIT", 2, "Check each tool result before answering."),
        ],
    )
    assert texts_and_votes(new) == [
        ("Read the file first.", 4),
        ("Check each tool result before answering.", 2),  # edited: its text, one more vote, its id kept
        ("List the folder before reading.", START_VOTES),  # new: after the older one of equal votes
    ]
    assert START_VOTES == 2 and new[1]["id"] == "b" and len(applied) == 3 and ignored == []
    new, _, _ = apply_operations(new, [Operation("DOWNVOTE", 1)])
    assert new[0] == item("a", "Read the file first.", 3)
    assert start[0]["votes"] == 3  # the list given is not changed


def test_an_insight_at_zero_falls_away():
    new, applied, _ = apply_operations([item("a", "One.", 1), item("b", "Two.", 2)], [Operation("DOWNVOTE", 1)])
    assert texts_and_votes(new) == [("Two.", 2)] and len(applied) == 1


def test_indices_are_the_list_as_the_writer_saw_it():
    # The first down-vote removes insight 1 at the end only: "2" still means the second shown.
    start = [item("a", "One.", 1), item("b", "Two.", 2)]
    new, _, _ = apply_operations(start, [Operation("DOWNVOTE", 1), Operation("UPVOTE", 2)])
    assert texts_and_votes(new) == [("Two.", 3)]


def test_beyond_the_cap_the_lowest_fall_away_newest_of_equals_first():
    start = [item(f"k{n}", f"Insight {n}.", 2 + (n == 0)) for n in range(MAX_INSIGHTS)]
    new, _, _ = apply_operations(start, [Operation("ADD", 0, "A new one."), Operation("UPVOTE", 10)])
    assert len(new) == MAX_INSIGHTS == 10
    assert [i["text"] for i in new[:2]] == ["Insight 0.", "Insight 9."]  # 3 votes each, in the order they came
    assert "A new one." not in [i["text"] for i in new]  # 2 votes, the newest of the lowest: it fell away
    assert "Insight 8." in [i["text"] for i in new]


def test_the_list_is_kept_best_voted_first():
    new, _, _ = apply_operations([item("a", "Low.", 1), item("b", "High.", 1)], [Operation("UPVOTE", 2)] * 3)
    assert texts_and_votes(new) == [("High.", 4), ("Low.", 1)]


def test_an_add_of_a_listed_insight_is_an_upvote_not_a_duplicate():
    new, _, _ = apply_operations([item("a", "Call the calculator.", 2)], [Operation("ADD", 0, "call  the CALCULATOR.")])
    assert texts_and_votes(new) == [("Call the calculator.", 3)]


def test_an_index_off_the_list_is_ignored_with_its_reason():
    new, applied, ignored = apply_operations(
        [item("a", "One.", 2)], [Operation("UPVOTE", 2), Operation("EDIT", 5, "x")]
    )
    assert texts_and_votes(new) == [("One.", 2)] and applied == []
    assert [i.reason for i in ignored] == [
        "there is no insight 2 (the list has 1)",
        "there is no insight 5 (the list has 1)",
    ]


def test_a_writer_s_answer_is_read_strictly():
    ops, ignored = parse_operations(
        {
            "operations": [
                {"op": "add", "index": 0, "text": "  Check   each result. "},
                {"op": "UPVOTE", "index": 2, "text": "ignored for an upvote"},
                {"op": "EXPLODE", "index": 1, "text": ""},
                {"op": "UPVOTE", "index": "2", "text": ""},
                {"op": "DOWNVOTE", "index": True, "text": ""},
                {"op": "EDIT", "index": 1, "text": ""},
                {"op": "ADD", "index": 0, "text": "x" * 301},
                {"op": "ADD", "index": 0, "text": "bad \x00 char"},
                "UPVOTE 1",
            ]
        }
    )
    assert ops == [Operation("ADD", 0, "Check each result."), Operation("UPVOTE", 2)]
    reasons = [i.reason for i in ignored]
    assert reasons[0].startswith("unknown operation 'EXPLODE'")
    assert reasons[1] == "UPVOTE needs the number of an insight (1 or more), not '2'"
    assert reasons[2] == "DOWNVOTE needs the number of an insight (1 or more), not True"
    assert reasons[3] == "EDIT needs a text"
    assert reasons[4] == "the text is longer than 300 characters"
    assert reasons[5] == "the text holds a character that cannot be stored"
    assert reasons[6] == "not an object"
    assert ignored[0].as_json() == {"operation": {"op": "EXPLODE", "index": 1, "text": ""}, "reason": reasons[0]}


def test_an_answer_without_operations_is_all_ignored():
    for data in (["ADD x"], {"ops": []}, "text", None):
        ops, ignored = parse_operations(data)
        assert ops == [] and len(ignored) == 1 and "operations" in ignored[0].reason


def test_the_list_s_own_check():
    assert check_insights([item("a1", "One.", 1)]) == []
    assert check_insights("one") != []
    assert check_insights([{"text": "One.", "votes": 1}]) != []  # no id
    assert check_insights([item("a", "One.", 0)]) == ["Insight 1's votes must be a whole number of at least 1."]
    assert check_insights([item("a", "One.", 1), item("a", "Two.", 1)]) != []  # one id twice
    assert check_insights([item(f"k{n}", "x", 1) for n in range(11)]) == ["At most 10 insights, not 11."]


def test_the_diff_says_added_edited_votes_and_removed():
    old = [item("a", "Keep me.", 3), item("b", "Old wording.", 2), item("c", "Drop me.", 1)]
    new = [item("a", "Keep me.", 4), item("b", "New wording.", 3), item("d", "Brand new.", 2)]
    assert insights_diff(old, new) == [
        {"change": "added", "text": "Brand new.", "votes": 2},
        {"change": "edited", "old_text": "Old wording.", "text": "New wording.", "old_votes": 2, "votes": 3},
        {"change": "votes", "text": "Keep me.", "old_votes": 3, "votes": 4},
        {"change": "removed", "text": "Drop me.", "old_votes": 1},
    ]
    assert insights_diff(new, new) == []


def test_the_list_as_a_writer_is_shown_it():
    assert numbered([]) == "(none yet)"
    assert numbered([item("a", "One.", 3), item("b", "Two.", 2)]) == "1. One. (votes: 3)\n2. Two. (votes: 2)"
