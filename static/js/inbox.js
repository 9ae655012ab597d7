// The inbox's keyboard shortcuts: j/k next/previous item, c claim (give back, take over),
// s or Enter save & next, ? the help. Each one presses a link or button that is on the page
// anyway, so the page works the same without JavaScript; the listener is on the document, so
// it survives htmx swapping the inbox's body. No inline handlers: the CSP allows none.
(function () {
  "use strict";

  function typing(target) {
    // A radio or checkbox takes no text: shortcuts still apply when one has the focus.
    return target.closest(
      "textarea, select, [contenteditable], input:not([type=radio]):not([type=checkbox]):not([type=submit])"
    ) !== null;
  }

  function help() {
    return document.getElementById("inbox-help");
  }

  function move(step) {
    var rows = Array.prototype.slice.call(document.querySelectorAll("[data-inbox-row]"));
    if (!rows.length) return;
    var at = -1;
    rows.forEach(function (row, i) {
      if (row.getAttribute("aria-current") === "true") at = i;
    });
    var target = at < 0 ? rows[0] : rows[Math.min(rows.length - 1, Math.max(0, at + step))];
    var link = target.querySelector("[data-inbox-link]");
    if (link && target !== rows[at]) link.click();
  }

  function press(selector) {
    var control = document.querySelector(selector);
    if (control) control.click();
  }

  function save() {
    var form = document.querySelector("form[data-inbox-decide]");
    if (!form) return;
    // requestSubmit checks the form's constraints (a decision chosen, a score given) as a click would.
    if (form.requestSubmit) form.requestSubmit();
    else press("[data-inbox-save]");
  }

  document.addEventListener("keydown", function (event) {
    if (!document.querySelector("[data-inbox]")) return;
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    var dialog = help();
    if (dialog && dialog.open) return; // Escape and its Close button close it
    if (typing(event.target)) return;
    switch (event.key) {
      case "j":
        move(1);
        break;
      case "k":
        move(-1);
        break;
      case "c":
        press("[data-inbox-claim]");
        break;
      case "s":
        save();
        break;
      case "Enter":
        // On a link or a button Enter keeps its own meaning (follow it, press it).
        if (event.target.closest("a, button, summary, [role=button]")) return;
        save();
        break;
      case "?":
        if (dialog) dialog.showModal();
        break;
      default:
        return;
    }
    event.preventDefault();
  });

  // Said on the page, so a test (or a curious person) knows the keys are listened to.
  document.documentElement.dataset.inboxKeys = "ready";

  document.addEventListener("click", function (event) {
    var dialog = help();
    if (dialog && event.target.closest("[data-inbox-help-open]")) dialog.showModal();
  });
})();
