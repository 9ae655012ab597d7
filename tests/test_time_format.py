"""The <time> element tables draw: the same text the ``date`` filter wrote, at a tenth of the cost."""

from datetime import UTC, date, datetime

from django.template import engines
from django.utils import timezone

from feedback.templatetags.time_format import SHOWN

DATE_FILTER = {"day": "Y-m-d", "minute": "Y-m-d H:i", "second": "Y-m-d H:i:s", "clock": "H:i:s"}


def _render(source: str, **context) -> str:
    return engines["django"].from_string("{% load time_format %}" + source).render(context)


def test_it_writes_what_the_date_filter_wrote_in_the_active_time_zone():
    moment = datetime(
        2026, 3, 29, 1, 59, 7, 123456, tzinfo=UTC
    )  # 03:59:07 in Paris, an hour after its clocks went forward
    assert set(SHOWN) == set(DATE_FILTER)
    with timezone.override("Europe/Paris"):
        for shown, format_ in DATE_FILTER.items():
            old = _render("<time datetime=\"{{ m|date:'c' }}\">{{ m|date:f }}</time>", m=moment, f=format_)
            assert _render("{% time_element m shown %}", m=moment, shown=shown) == old
        assert _render("{% time_element m %}", m=moment) == (
            '<time datetime="2026-03-29T03:59:07.123456+02:00">2026-03-29 03:59:07</time>'
        )


def test_a_day_and_no_moment():
    assert _render('{% time_element d "day" %}', d=date(2026, 12, 7)) == (
        '<time datetime="2026-12-07">2026-12-07</time>'
    )
    assert _render("{% time_element m %}", m=None) == ""
