from types import SimpleNamespace

from feedback.datasets.checkers import check, checker_verdict, options_problems


def item(checker, expected, **options):
    return SimpleNamespace(checker=checker, expected=expected, checker_options=options)


def test_numeric_finds_the_figure_in_prose():
    assert check(item("numeric", 42), "After adding them up, the total is 42.").passed
    assert not check(item("numeric", 42), "The expression is 40 + 3 = 43.").passed


# Issue 25: a small model's narrated plan ("1. List the files ... 4. Count the urgent emails.")
# passed "how many are urgent?" as 4, and the learning cycle counted it a right answer.
PLAN = (
    "To count the urgent emails, I'll follow these steps:\n1. List all files in inbox/.\n"
    "2. Read each file.\n  3) Decide whether it is urgent.\n- 4. Count the urgent emails.\n\nLet's proceed."
)


def test_numeric_reads_no_figure_in_a_list_items_number():
    for n in (1, 2, 3, 4):
        assert not check(item("numeric", n), PLAN).passed
    assert check(item("numeric", n), PLAN).detail == "No number in the answer."
    # A figure the answer states in a list, or alone on its last line, still counts.
    assert check(item("numeric", 2), "Read them all:\n1. 001-ana is urgent\n2. 003-chen is urgent\nTotal: 2").passed
    assert check(item("numeric", 3), "Urgent emails:\n3.").passed
    assert check(item("numeric", 1.5), "1.5 kg of flour").passed


def test_numeric_tolerance_and_thousands():
    assert check(item("numeric", 1234.5), "It comes to 1,234.5 euros.").passed
    assert check(item("numeric", 3.14159, tolerance=0.01), "About 3.14").passed
    assert not check(item("numeric", 3.14159, tolerance=0.001), "About 3.14").passed
    assert not check(item("numeric", 7), "I cannot compute that.").passed


def test_labels_one_of_and_set_of():
    assert check(item("labels", "urgent"), "Category: Urgent").passed
    assert not check(item("labels", "urgent"), "Category: routine").passed
    assert check(item("labels", ["billing", "urgent"]), "urgent, billing").passed
    assert not check(item("labels", ["billing", "urgent"]), "urgent only").passed


def test_labels_forbidden_ones_fail_an_answer_that_names_them():
    urgent = item("labels", ["002-site-down"], forbidden=["001-invoice", "003-question"])
    assert check(urgent, "Urgent: 002-site-down.txt (the site is down).").passed
    everything = check(urgent, "Urgent: 001-invoice.txt, 002-site-down.txt and 003-question.txt")
    assert not everything.passed and "001-invoice, 003-question" in everything.detail
    assert options_problems("labels", ["a"], {"forbidden": "b"})
    assert options_problems("labels", ["a"], {"forbidden": [""]})


def test_contains_and_regex():
    assert check(item("contains", ["alpha", "beta"]), "Alpha and BETA").passed
    assert not check(item("contains", ["alpha", "gamma"]), "alpha").passed
    assert check(item("regex", r"\bword count: \d+"), "Word count: 120").passed
    assert not check(item("regex", r"^\d+$"), "twelve").passed


def test_json_schema():
    schema = {"type": "object", "required": ["urgent"], "properties": {"urgent": {"type": "boolean"}}}
    assert check(item("json_schema", schema), '```json\n{"urgent": true}\n```').passed
    assert not check(item("json_schema", schema), '{"urgent": "yes"}').passed
    assert not check(item("json_schema", schema), "not json").passed


def test_bad_options_refused():
    assert options_problems("numeric", "abc", {})
    assert options_problems("numeric", 1, {"tolerance": -1})
    assert options_problems("regex", r"(a)\1", {})
    assert options_problems("json_schema", {"type": 12}, {})
    assert options_problems("labels", [], {})
    assert options_problems("nope", 1, {})
    assert not options_problems("numeric", 1, {"tolerance": 0.5})


def test_checker_verdict_none_without_item_or_answer():
    assert checker_verdict(SimpleNamespace(dataset_item_id=None, final_output="4")) is None
    run = SimpleNamespace(dataset_item_id=1, dataset_item=item("numeric", 4), final_output="")
    assert checker_verdict(run) is None
    run.final_output = "2 + 2 = 4"
    assert checker_verdict(run).passed
