// The trace's small behaviours: lay out the waterfall, copy a step as JSON, show a clamped
// payload in full, and fold or unfold a sub-agent run. Delegated from the document, so steps
// appended by htmx work without re-binding.
(function () {
  "use strict";

  function within(root, selector) {
    var found = Array.prototype.slice.call(root.querySelectorAll(selector));
    return root.matches && root.matches(selector) ? [root].concat(found) : found;
  }

  // The waterfall's numbers come as data attributes (the Content-Security-Policy refuses style
  // attributes and <style> elements in the HTML); set through the CSSOM, which it allows, they
  // become the custom properties app.css lays the bars out with: each bar's own --at and --ms,
  // and each trace's --span (its scale, replaced out of band while the run goes on).
  function layOut(root) {
    within(root, "[data-span][data-trace]").forEach(function (scale) {
      var trace = document.getElementById(scale.dataset.trace);
      if (trace) trace.style.setProperty("--span", scale.dataset.span);
    });
    within(root, ".bar[data-at]").forEach(function (bar) {
      bar.style.setProperty("--at", bar.dataset.at);
      bar.style.setProperty("--ms", bar.dataset.ms);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { layOut(document); });
  // Every piece htmx puts in (appended steps, a sub-agent's trace, the scale swapped out of band).
  document.addEventListener("htmx:load", function (event) { layOut(event.target); });

  function fallback(link, text) {
    // No clipboard access (plain http, old browser, denied): show the JSON selected, so
    // Ctrl+C / Cmd+C copies it.
    var box = document.createElement("textarea");
    box.className = "copy-fallback";
    box.value = text;
    box.rows = 8;
    box.setAttribute("aria-label", texts(link).copyFallback || "Step JSON: press Ctrl+C to copy");
    link.insertAdjacentElement("afterend", box);
    box.focus();
    box.select();
  }

  function texts(link) {
    // The translated words live once on the trace, not on every step.
    var holder = link.closest("[data-copied]");
    return holder ? holder.dataset : {};
  }

  function say(link, message) {
    link.textContent = message;
    link.setAttribute("aria-live", "polite");
  }

  document.addEventListener("click", function (event) {
    var link = event.target.closest("[data-copy-json]");
    if (link) {
      event.preventDefault();
      var label = link.textContent;
      fetch(link.href, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (r) { return r.text(); })
        .then(function (text) {
          if (!navigator.clipboard || !window.isSecureContext) return fallback(link, text);
          return navigator.clipboard.writeText(text).then(
            function () { say(link, texts(link).copied || "Copied"); setTimeout(function () { say(link, label); }, 1500); },
            function () { fallback(link, text); }
          );
        });
      return;
    }
    // A sub-agent run's fold: htmx loads its trace on the first click ("click once"); every click
    // folds or unfolds it, and aria-expanded tells a screen reader which.
    var toggle = event.target.closest("[data-child-toggle]");
    if (toggle) {
      var body = document.getElementById(toggle.getAttribute("aria-controls"));
      var open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", open ? "true" : "false");
      if (body) body.hidden = !open;
      return;
    }
    var button = event.target.closest("[data-show-all]");
    if (button) {
      var pre = button.previousElementSibling;
      pre.classList.toggle("clamp");
      button.hidden = true;
    }
  });
})();
