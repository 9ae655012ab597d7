"""The trace's waterfall in real Chromium: each bar laid out on its track from its step's own times
against the run's span, and a live run's span and elapsed time moving with the browser's clock."""

import math
from datetime import timedelta

import pytest
from django.template.defaultfilters import floatformat
from django.utils import timezone
from playwright.sync_api import expect

from feedback.models import Run, Step

from ..factories import make_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BARS = """(id) => [...document.querySelectorAll(`#trace-${id} > li.step > .waterfall`)].map((track) => {
  const t = track.getBoundingClientRect(), b = track.querySelector(".bar").getBoundingClientRect();
  return {trackLeft: t.left, trackRight: t.right, trackWidth: t.width, left: b.left, right: b.right, width: b.width};
})"""
SPAN = "(id) => getComputedStyle(document.getElementById(`trace-${id}`)).getPropertyValue('--span').trim()"
ELAPSED = "() => parseFloat(document.getElementById('run-elapsed').textContent)"


def _steps(run: Run, times: list[tuple[int, int]]) -> None:
    for index, (at, ms) in enumerate(times):
        Step.objects.create(run=run, index=index, kind=Step.Kind.THOUGHT, thought=f"step {index}",
                            started_at=run.started_at + timedelta(milliseconds=at), duration_ms=ms)  # fmt: skip


def test_bars_lie_on_their_track_where_their_steps_ran(page, live_server, demo):
    start = timezone.now() - timedelta(minutes=5)
    run = make_run(status=Run.Status.SUCCEEDED, started_at=start, finished_at=start + timedelta(seconds=10))
    # An ordinary step, an instant one, one that ends at the run's end, one past it and one that
    # starts after it (a worker's clock ahead of the web's): none may leave the track.
    times = [(0, 1000), (2000, 2500), (5000, 0), (7000, 3000), (9990, 2000), (10500, 100)]
    _steps(run, times)
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator(f"#trace-{run.pk} > li.step")).to_have_count(len(times))
    assert page.evaluate(SPAN, run.pk) == "10000"
    bars = page.evaluate(BARS, run.pk)
    for (at, ms), bar in zip(times, bars, strict=True):
        assert bar["left"] >= bar["trackLeft"] - 0.5 and bar["right"] <= bar["trackRight"] + 0.5, (at, ms, bar)
        assert bar["width"] >= 2  # even an instant step shows
        if at + ms <= 10_000:  # within the span: exactly where and as long as the step ran
            assert bar["left"] - bar["trackLeft"] == pytest.approx(at / 10_000 * bar["trackWidth"], abs=1)
            assert bar["width"] == pytest.approx(max(ms / 10_000, 0.004) * bar["trackWidth"], abs=1)
    lefts = [bar["left"] for bar in bars]
    assert lefts == sorted(lefts)  # a later step's bar is never left of an earlier one's


def test_a_live_runs_scale_and_elapsed_time_move_with_the_clock_and_settle_when_it_ends(page, live_server, demo):
    start = timezone.now() - timedelta(seconds=20)
    run = make_run(status=Run.Status.RUNNING, started_at=start, step_count=1)
    _steps(run, [(0, 4000)])
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator(f"#trace-tail-{run.pk}.live")).to_have_count(1)
    elapsed, span, (bar,) = page.evaluate(ELAPSED), int(page.evaluate(SPAN, run.pk)), page.evaluate(BARS, run.pk)
    assert 20 <= elapsed < 40 and 20_000 <= span < 40_000
    # The page holds when the run started; the browser moves both every second (live.js), while
    # the trace's tail polls (answered 304: the run's state has not changed).
    page.wait_for_function(f"() => ({ELAPSED})() >= {elapsed + 2}")
    page.wait_for_function(f"() => parseInt(({SPAN})({run.pk})) >= {span + 2000}")
    # The bar and the scale read in one go: the clock moves the scale every second.
    (later,), scale = page.evaluate(f"(id) => [({BARS})(id), ({SPAN})(id)]", run.pk)
    assert later["width"] < bar["width"]  # the same step, on a longer scale
    assert later["width"] == pytest.approx(4000 / int(scale) * later["trackWidth"], abs=1.5)

    finished = timezone.now()
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED, finished_at=finished, final_output="Done.")
    expect(page.locator("#run-status")).to_have_text("Answered")
    expect(page.locator(f"#trace-tail-{run.pk}")).to_have_count(0)  # ended: the polling stops
    final_ms = math.ceil((finished - start).total_seconds() * 1000)
    # The fixed scale is laid out once htmx settles the swap that removed the tail (a few ms
    # later); from then on it stays, through the clock's next ticks.
    page.wait_for_function(f"() => parseInt(({SPAN})({run.pk})) === {final_ms}")
    page.wait_for_timeout(1100)
    assert int(page.evaluate(SPAN, run.pk)) == final_ms
    expect(page.locator("#run-elapsed")).to_have_text(f"{floatformat((finished - start).total_seconds(), 1)} s")
    (last,) = page.evaluate(BARS, run.pk)
    assert last["width"] == pytest.approx(4000 / final_ms * last["trackWidth"], abs=1)
