"""Cron expressions people type for recurring tasks: read by celery's own parser, refused with a
message that names the field and the value at fault, and refused when they fire more often than
a task may repeat.

Celery reads a day as firing when its day of month, month AND day of week all match (not vixie
cron's "day of month OR day of week"); the gaps below are computed the way celery fires.
"""

import re
from dataclasses import dataclass
from datetime import date, timedelta
from itertools import pairwise

from celery.schedules import ParseException, crontab_parser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

# A recurring task runs at most this often, whether the schedule is an interval or a cron.
MIN_GAP_MINUTES = 5
# Celery's day of week counts from Sunday: 0-6 (and names: sun, mon...).
FIELDS = (
    ("minute", gettext_lazy("Minute"), 0, 59),
    ("hour", gettext_lazy("Hour"), 0, 23),
    ("day_of_month", gettext_lazy("Day of month"), 1, 31),
    ("month_of_year", gettext_lazy("Month"), 1, 12),
    ("day_of_week", gettext_lazy("Day of week"), 0, 6),
)
# Day-of-month, month and weekday repeat together every 28 years (leap years included); only
# read when a schedule fires in the last and the first hour of a day.
_CALENDAR_DAYS = 28 * 365 + 7


class CronError(ValueError):
    """A cron expression that cannot be used; its message is for the person who typed it."""


@dataclass(frozen=True)
class Cron:
    """A parsed expression: the fields as typed (CrontabSchedule's keyword arguments) and the
    values each one fires at."""

    fields: dict[str, str]
    values: dict[str, frozenset[int]]


def parse(expression: str) -> Cron:
    """Five fields, each readable by celery; CronError names the first field at fault."""
    parts = (expression or "").split()
    if len(parts) != len(FIELDS):
        raise CronError(
            _("A cron expression has five fields (minute hour day-of-month month day-of-week), e.g. 0 7 * * 1-5; "
              "this one has %(n)s.") % {"n": len(parts)}
        )  # fmt: skip
    fields, values = {}, {}
    for (name, label, low, high), text in zip(FIELDS, parts, strict=True):
        try:
            found = crontab_parser(high - low + 1, low).parse(text)
        except (ValueError, ParseException):
            raise CronError(_field_error(str(label), text, low, high)) from None
        fields[name], values[name] = text, frozenset(found)
    return Cron(fields, values)


def _field_error(label: str, text: str, low: int, high: int) -> str:
    # Steps (the n of */n) are not values: only the numbers before a slash must be in range.
    for number in re.findall(r"\d+", re.sub(r"/\w*", "", text)):
        if not low <= int(number) <= high:
            return _("%(field)s %(value)s is out of range %(low)s-%(high)s.") % {
                "field": label, "value": int(number), "low": low, "high": high}  # fmt: skip
    if re.search(r"/0*(?:,|$)", text):
        return _("%(field)s: a step is at least 1 (*/5, not */0).") % {"field": label}
    return _(
        "%(field)s: “%(value)s” is not a value celery can read: use *, a number (%(low)s-%(high)s), a range "
        "(1-5), a list (1,15,30) or a step (*/15)."
    ) % {"field": label, "value": text, "low": low, "high": high}


def shortest_gap_minutes(cron: Cron, days: set[date] | None = None) -> int | None:
    """The fewest minutes between two consecutive firings; None when it is over an hour (no two
    firings in consecutive hours), or when the schedule never fires. ``days``: the days it fires
    on, when the caller has them already."""
    minutes = sorted(cron.values["minute"])
    hours = cron.values["hour"]
    days = _firing_days(cron) if days is None else days
    if not days:
        return None
    gaps = [later - earlier for earlier, later in pairwise(minutes)]
    # From the last minute of one hour to the first of the next, when both hours fire: within a
    # day, or from 23:xx to 00:xx of the next day when both days fire.
    across = 60 - minutes[-1] + minutes[0]
    if any(hour + 1 in hours for hour in hours) or (
        23 in hours and 0 in hours and any(day + timedelta(days=1) in days for day in days)
    ):
        gaps.append(across)
    return min(gaps) if gaps else None


def _firing_days(cron: Cron) -> set[date]:
    first = date(2000, 1, 1)
    days = (first + timedelta(days=n) for n in range(_CALENDAR_DAYS))
    return {
        day for day in days
        if day.day in cron.values["day_of_month"] and day.month in cron.values["month_of_year"]
        and (day.isoweekday() % 7) in cron.values["day_of_week"]
    }  # fmt: skip


def check_schedule(expression: str) -> dict[str, str]:
    """``expression`` as CrontabSchedule's keyword arguments, if it can be a task's schedule:
    readable, firing at all, and never twice within MIN_GAP_MINUTES."""
    cron = parse(expression)
    days = _firing_days(cron)
    if not days:
        raise CronError(_("This schedule never fires: no day matches its day of month, month and day of week."))
    gap = shortest_gap_minutes(cron, days)
    if gap is not None and gap < MIN_GAP_MINUTES:
        raise CronError(
            _("This schedule has firings %(gap)s minute(s) apart; a task repeats at most every %(min)s minutes.")
            % {"gap": gap, "min": MIN_GAP_MINUTES}
        )
    return cron.fields
