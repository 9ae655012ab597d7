// What moves a live page between its polls: a live run's working time, time waited for people and
// waterfall span are computed here from the data attributes the page holds (its start, its waits
// and the server's time, in ms since the epoch) and moved every second; and a poll whose answer is
// the same as its last one is not swapped in again, so nothing on the page flickers or loses what
// a person was typing.
(function () {
  "use strict";

  // The server's clock minus this browser's, from the server's time each live summary holds
  // (data-clock-now, stamped as it was rendered); 0 until the first.
  var offset = 0;

  function now() {
    return Date.now() + offset;
  }

  function setClock() {
    var stamped = document.querySelector("[data-clock-now]");
    if (stamped && !stamped.dataset.clockRead) {
      offset = Number(stamped.dataset.clockNow) - Date.now();
      stamped.dataset.clockRead = "1";
    }
  }

  // As traces.working_and_waited_seconds: the union of the waits is time waited, and a wait still
  // pending lasts until now, so while the run waits its working time stands still.
  function split(started, end, waits) {
    var spans = waits
      .map(function (wait) {
        return [Math.max(wait[0], started), Math.min(wait[1] === null ? end : wait[1], end)];
      })
      .sort(function (a, b) {
        return a[0] - b[0] || a[1] - b[1];
      });
    var waited = 0;
    var until = started;
    spans.forEach(function (span) {
      var begin = Math.max(span[0], until);
      if (span[1] > begin) {
        waited += span[1] - begin;
        until = span[1];
      }
    });
    return { working: Math.max(0, Math.max(0, end - started) - waited), waited: waited };
  }

  var format = null;

  function seconds(ms) {
    // One decimal, no grouping, in the page's language: as Django's floatformat writes an ended
    // run's times.
    if (!format) {
      var options = { minimumFractionDigits: 1, maximumFractionDigits: 1, useGrouping: false };
      format = new Intl.NumberFormat(document.documentElement.lang || undefined, options);
    }
    return format.format(ms / 1000) + " s";
  }

  function tick() {
    var at = now();
    document.querySelectorAll("[data-clock-started]").forEach(function (facts) {
      var times = split(Number(facts.dataset.clockStarted), at, JSON.parse(facts.dataset.clockWaits || "[]"));
      facts.querySelectorAll("[data-clock]").forEach(function (shown) {
        shown.textContent = seconds(times[shown.dataset.clock]);
      });
    });
    // The waterfall's scale of a live run grows with it (an ended run's is fixed: trace.js).
    document.querySelectorAll("[data-span-from][data-trace]").forEach(function (scale) {
      var trace = document.getElementById(scale.dataset.trace);
      if (trace) trace.style.setProperty("--span", Math.max(1, Math.ceil(at - Number(scale.dataset.spanFrom))));
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    setClock();
    tick();
  });
  document.addEventListener("htmx:load", function () {
    setClock();
    tick();
  });
  setInterval(tick, 1000);

  // What of an answer differs at each render without anything having changed: the CSRF tokens
  // (masked afresh each time) and the server's time stamped on a live run's clock.
  function unchanging(text) {
    return text
      .replace(/name="csrfmiddlewaretoken" value="[^"]*"/g, "")
      .replace(/data-clock-now="[^"]*"/g, "");
  }

  // The last answer of each poller, by its id (it replaces itself with an element of the same id).
  var lastAnswer = {};
  document.addEventListener("htmx:beforeSwap", function (event) {
    var poller = event.detail.elt;
    if (event.detail.isError || !poller.id || (poller.getAttribute("hx-trigger") || "").indexOf("every ") !== 0) return;
    var text = unchanging(event.detail.xhr.responseText);
    if (lastAnswer[poller.id] === text) event.detail.shouldSwap = false;
    lastAnswer[poller.id] = text;
  });
})();
