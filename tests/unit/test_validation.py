"""Layer 1: every rule kind passing and failing on crafted tool results."""

import pytest

from feedback.evaluation.validation import validate

WEATHER = {"status": 200, "city": "Oslo", "current": {"temperature": -3.5, "unit": "C"}, "days": [1, 2]}


def only(report):
    assert len(report.checks) == 1
    return report.checks[0]


class TestJsonSchema:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "current": {"type": "object"}},
        "required": ["city", "current"],
    }

    def test_it_passes_a_matching_result(self):
        report = validate([{"type": "json_schema", "schema": self.schema}], WEATHER)
        assert report.status == "pass"
        assert only(report) == {
            "rule": "json_schema",
            "ok": True,
            "hard": True,
            "message": "matches the JSON Schema",
        }
        assert not report.hard_failure

    def test_it_fails_a_wrong_shape_and_says_where(self):
        report = validate([{"type": "json_schema", "schema": self.schema}], {"city": 7})
        assert report.status == "fail" and report.hard_failure
        assert "current" in only(report)["message"] and "more" in only(report)["message"]

    def test_a_broken_schema_is_a_failing_check_not_an_exception(self):
        report = validate([{"type": "json_schema", "schema": {"type": "no-such-type"}}], WEATHER)
        assert report.status == "fail"
        assert only(report)["message"].startswith("bad rule: invalid JSON Schema")


class TestRange:
    def test_it_passes_inside_the_range(self):
        rule = {"type": "range", "path": "current.temperature", "min": -50, "max": 50}
        assert validate([rule], WEATHER).status == "pass"

    @pytest.mark.parametrize("value", [-50.5, 51, 1e9])
    def test_it_fails_outside_the_range(self, value):
        rule = {"type": "range", "path": "current.temperature", "min": -50, "max": 50}
        report = validate([rule], {"current": {"temperature": value}})
        assert report.status == "fail"
        assert "outside" in only(report)["message"]

    def test_it_fails_a_missing_or_non_numeric_value(self):
        rule = {"type": "range", "path": "current.temperature", "min": -50, "max": 50}
        assert "missing" in only(validate([rule], {"current": {}}))["message"]
        assert "not a number" in only(validate([rule], {"current": {"temperature": "hot"}}))["message"]
        assert "not a number" in only(validate([rule], {"current": {"temperature": True}}))["message"]

    def test_list_indexes_in_the_path(self):
        assert validate([{"type": "range", "path": "days.1", "min": 2, "max": 2}], WEATHER).status == "pass"

    def test_min_above_max_is_a_bad_rule(self):
        report = validate([{"type": "range", "path": "days.0", "min": 5, "max": 1}], WEATHER)
        assert only(report)["message"].startswith("bad rule:")


class TestRegex:
    def test_it_passes_a_full_match(self):
        assert validate([{"type": "regex", "path": "city", "pattern": "[A-Z][a-z]+"}], WEATHER).status == "pass"

    def test_a_partial_match_is_not_enough(self):
        report = validate([{"type": "regex", "path": "city", "pattern": "Os"}], WEATHER)
        assert report.status == "fail" and "does not match" in only(report)["message"]

    def test_a_non_string_fails(self):
        assert validate([{"type": "regex", "path": "status", "pattern": r"\d+"}], WEATHER).status == "fail"

    def test_an_invalid_pattern_is_a_bad_rule(self):
        report = validate([{"type": "regex", "path": "city", "pattern": "(["}], WEATHER)
        assert only(report)["message"].startswith("bad rule: invalid regular expression")


class TestRequiredKeys:
    def test_it_passes_when_all_are_present(self):
        assert validate([{"type": "required_keys", "keys": ["city", "current.unit"]}], WEATHER).status == "pass"

    def test_it_names_the_missing_ones(self):
        report = validate([{"type": "required_keys", "keys": ["city", "wind", "current.rain"]}], WEATHER)
        assert report.status == "fail"
        assert only(report)["message"] == "missing keys: wind, current.rain"

    def test_an_empty_key_list_is_a_bad_rule(self):
        assert only(validate([{"type": "required_keys", "keys": []}], WEATHER))["message"].startswith("bad rule")


class TestHttpStatus:
    def test_an_allowed_status_passes(self):
        report = validate([{"type": "http_status", "allowed": [200, 201]}], WEATHER)
        assert report.status == "pass" and not report.retryable

    @pytest.mark.parametrize(("status", "retryable"), [(503, True), (500, True), (429, True), (404, False)])
    def test_a_refused_status_fails_and_says_whether_to_retry(self, status, retryable):
        report = validate([{"type": "http_status", "allowed": [200]}], {"status": status})
        assert report.status == "fail" and report.hard_failure
        assert report.retryable is retryable

    def test_a_custom_path(self):
        rule = {"type": "http_status", "path": "response.code", "allowed": [204]}
        assert validate([rule], {"response": {"code": "204"}}).status == "pass"

    def test_bad_allowed_codes_are_a_bad_rule(self):
        assert only(validate([{"type": "http_status", "allowed": "200"}], WEATHER))["message"].startswith("bad rule")


class TestReport:
    def test_a_soft_failure_only_warns(self):
        rules = [
            {"type": "required_keys", "keys": ["city"]},
            {"type": "range", "path": "current.temperature", "min": 0, "max": 40, "hard": False},
        ]
        report = validate(rules, WEATHER)
        assert report.status == "pass" and not report.hard_failure
        assert [c["ok"] for c in report.checks] == [True, False]
        assert report.checks[1]["hard"] is False

    def test_a_soft_5xx_is_not_retried(self):
        report = validate([{"type": "http_status", "allowed": [200], "hard": False}], {"status": 502})
        assert report.status == "pass" and not report.retryable

    @pytest.mark.parametrize("rule", [{"type": "telepathy"}, {}, "range", None, {"type": ["range"]}])
    def test_unknown_or_malformed_rules_fail_clearly(self, rule):
        report = validate([rule], WEATHER)
        assert report.status == "fail"
        assert only(report)["message"].startswith("bad rule: unknown type")

    def test_no_rules_pass(self):
        assert validate([], None).as_json() == {"status": "pass", "checks": []}

    def test_as_json_is_what_the_step_records(self):
        report = validate([{"type": "required_keys", "keys": ["x"]}], {})
        assert report.as_json() == {
            "status": "fail",
            "checks": [{"rule": "required_keys", "ok": False, "message": "missing keys: x", "hard": True}],
        }

    def test_a_non_dict_result_does_not_crash_any_rule(self):
        rules = [
            {"type": "range", "path": "a", "min": 0},
            {"type": "regex", "path": "a", "pattern": "x"},
            {"type": "required_keys", "keys": ["a"]},
            {"type": "http_status"},
            {"type": "json_schema", "schema": {"type": "object"}},
        ]
        report = validate(rules, ["not", "a", "dict"])
        assert report.status == "fail" and len(report.checks) == 5
