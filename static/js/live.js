// What keeps a live page live without making its HTML change with the clock (so the server can
// answer an unchanged run's poll 304, unrendered): a live run's working time, time waited for
// people and waterfall span are computed here from the data attributes the page holds (its start
// and its waits, in ms since the epoch) and moved every second; and a poll whose answer is the
// same as its last one (a 304 the browser turned back into its stored copy) is not swapped in
// again, so nothing on the page flickers or loses what a person was typing.
(function () {
  "use strict";

  // The server's clock minus this browser's, from the X-Server-Time header of htmx answers (a
  // 304's too: the browser updates the stored answer's headers with it); 0 until the first.
  var offset = 0;
  var sentAt = new WeakMap();

  function now() {
    return Date.now() + offset;
  }

  document.addEventListener("htmx:beforeSend", function (event) {
    sentAt.set(event.detail.xhr, Date.now());
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var xhr = event.detail.xhr;
    var server = parseInt(xhr.getResponseHeader("X-Server-Time"), 10);
    // Stamped while the request was on its way: take the middle of its round trip.
    if (!isNaN(server) && sentAt.has(xhr)) offset = server - (sentAt.get(xhr) + Date.now()) / 2;
  });

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

  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:load", tick);
  setInterval(tick, 1000);

  // The last answer of each poller, by its id (it replaces itself with an element of the same id).
  var lastAnswer = {};
  document.addEventListener("htmx:beforeSwap", function (event) {
    var poller = event.detail.elt;
    if (event.detail.isError || !poller.id || (poller.getAttribute("hx-trigger") || "").indexOf("every ") !== 0) return;
    var text = event.detail.xhr.responseText;
    if (lastAnswer[poller.id] === text) event.detail.shouldSwap = false;
    lastAnswer[poller.id] = text;
  });
})();
