// modelserve's own script, on top of htmx and its SSE extension. Every page
// works without it; it says what a live page cannot say for itself.
//
// A page whose stream is cut kept showing its last figures as if they were
// current ("▶ running", a rate, a time left). While the stream is down the
// page says so, and the time left stops; the first event after the stream
// is back redraws the figures.
(function () {
  "use strict";

  var lost = "connection lost — reconnecting";

  function statuses() {
    return document.querySelectorAll("[data-live-status]");
  }

  document.addEventListener("htmx:sseError", function (e) {
    var live = e.target.closest && e.target.closest("[data-live]");
    if (!live) {
      return;
    }
    document.body.classList.add("offline");
    statuses().forEach(function (s) {
      if (!s.dataset.liveText) {
        s.dataset.liveText = s.textContent;
      }
      s.textContent = lost;
      s.classList.add("lost");
    });
    // A time left worked out from a rate that is no longer measured is a
    // guess: it stops until the stream is back.
    live.querySelectorAll('[data-testid="left"]').forEach(function (el) {
      el.textContent = "—";
    });
  });

  document.addEventListener("htmx:sseOpen", function (e) {
    if (!document.body.classList.contains("offline")) {
      return;
    }
    document.body.classList.remove("offline");
    statuses().forEach(function (s) {
      s.textContent = s.dataset.liveText || "";
      s.classList.remove("lost");
    });
  });

  // The job page's live region is swapped whole at every event; announcing
  // it whole read the page out again at each byte count. Only the steps
  // whose state changed are announced, in a region of their own.
  var steps = null;
  function stepStates() {
    var out = {};
    document.querySelectorAll('#job-live [data-testid="step"]').forEach(function (li) {
      out[li.dataset.step] = li.dataset.state;
    });
    return out;
  }
  document.addEventListener("htmx:afterSettle", function (e) {
    var region = document.querySelector("[data-announce]");
    if (!region || !e.target || e.target.id !== "job-live") {
      return;
    }
    var now = stepStates();
    if (steps) {
      var changed = [];
      Object.keys(now).forEach(function (name) {
        if (steps[name] !== now[name]) {
          changed.push(name + ": " + now[name]);
        }
      });
      if (changed.length) {
        region.textContent = changed.join("; ");
      }
    }
    steps = now;
  });
  document.addEventListener("DOMContentLoaded", function () {
    if (document.getElementById("job-live")) {
      steps = stepStates();
    }
  });
})();

// A button with data-copy copies the text of the element it names (the
// tokens page's new token) and says so on itself.
document.addEventListener("click", function (e) {
  var b = e.target.closest && e.target.closest("[data-copy]");
  var el = b && document.getElementById(b.dataset.copy);
  if (!el || !navigator.clipboard) {
    return;
  }
  navigator.clipboard.writeText(el.textContent).then(function () {
    b.textContent = "Copied";
  });
});
