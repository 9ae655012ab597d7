"""One line of the benchmark table: a figure, its baseline from the same run, and the target."""

from dataclasses import dataclass


@dataclass
class Result:
    benchmark: str
    measure: str
    value: float | None  # None: not available (not installed, not merged yet)
    unit: str
    baseline: float | None = None
    # The ratio value/baseline to stay within (or to reach, when higher is better).
    target: float | None = None
    higher_is_better: bool = False
    note: str = ""
    errors: int = 0  # requests that failed: the target is not met, whatever the ratio

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        if self.errors:
            return f"NOT met ({self.errors} errors)"
        if self.ratio is None:
            return "NOT met (no figure)" if self.value is None and self.note.startswith("no request") else ""
        met = self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target
        sign = "≥" if self.higher_is_better else "≤"
        return f"{'met' if met else 'NOT met'} ({sign} {self.target:g})"
