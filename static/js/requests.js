// What a person sees when an htmx request fails. htmx swaps no 4xx or 5xx answer into the page
// (so a fragment never turns into an error page); this says what happened in the banner at the
// top of the page instead, and clears it once a request succeeds again (a poll that recovers).
(function () {
  "use strict";

  function banner() {
    return document.getElementById("request-error");
  }

  function show(kind) {
    var box = banner();
    if (!box) return;
    box.querySelector(".request-error-text").textContent = box.dataset[kind];
    box.hidden = false;
  }

  document.addEventListener("htmx:responseError", function (event) {
    show(event.detail.xhr.status === 403 ? "forbidden" : "failed");
  });
  document.addEventListener("htmx:sendError", function () {
    show("offline");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var box = banner();
    if (box && event.detail.successful) box.hidden = true;
  });
  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-reload]")) window.location.reload();
  });
})();
