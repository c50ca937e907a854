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
  // The serve form's "longest that fits" fills the pool and the slots with
  // it, and the memory below is asked again as if they were typed.
  document.addEventListener("click", function (e) {
    var b = e.target.closest && e.target.closest("[data-fill-pool]");
    if (!b || !b.form) {
      return;
    }
    var pool = b.form.querySelector('input[name="ctx_pool"]');
    var slots = b.form.querySelector('input[name="slots"]');
    if (!pool || !slots) {
      return;
    }
    slots.value = b.dataset.fillSlots;
    pool.value = b.dataset.fillPool;
    pool.dispatchEvent(new Event("input", { bubbles: true }));
  });
  // Every command and snippet on a page gets a Copy button; its label
  // says when the text is on the clipboard.
  function copyButtons(root) {
    (root.querySelectorAll ? root : document).querySelectorAll("main pre").forEach(function (pre) {
      if (pre.querySelector("button.copy") || !pre.querySelector("code")) {
        return;
      }
      var b = document.createElement("button");
      b.type = "button";
      b.className = "copy secondary outline";
      b.dataset.testid = "copy";
      b.textContent = "Copy";
      b.setAttribute("aria-label", "Copy " + (pre.getAttribute("aria-label") || "the text"));
      pre.appendChild(b);
    });
  }
  // A Copy button copies its command, or with data-copy the text of the
  // element it names (the tokens page's new token), and says so.
  document.addEventListener("click", function (e) {
    var b = e.target.closest && e.target.closest("pre > button.copy, button[data-copy]");
    if (!b) {
      return;
    }
    var src = b.dataset.copy ? document.getElementById(b.dataset.copy) : b.parentElement.querySelector("code");
    if (!src) {
      return;
    }
    var text = src.innerText;
    var done = function () {
      b.textContent = "Copied";
      setTimeout(function () { b.textContent = "Copy"; }, 2000);
    };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(done, function () { b.textContent = "Select it and copy"; });
    } else {
      b.textContent = "Select it and copy";
    }
  });
  document.addEventListener("htmx:afterSettle", function (e) { copyButtons(e.target); });

  // A live section is swapped whole when it changes: a replica's details
  // an operator opened would close under them at the next figure. Those
  // opened stay open across swaps, by their id.
  var opened = {};
  document.addEventListener("toggle", function (e) {
    var d = e.target;
    if (d.tagName !== "DETAILS" || !d.id) {
      return;
    }
    if (d.open) {
      opened[d.id] = true;
    } else {
      delete opened[d.id];
    }
  }, true);
  function reopen() {
    Object.keys(opened).forEach(function (id) {
      var d = document.getElementById(id);
      if (d && d.tagName === "DETAILS" && !d.open) {
        d.open = true;
      }
    });
  }
  document.addEventListener("htmx:afterSwap", reopen);
  document.addEventListener("htmx:sseMessage", reopen);

  // A notice that holds until a replica is ready ("restarting") says it
  // is ready once the fleet's stream shows it so.
  function noticesReady() {
    document.querySelectorAll("[data-until-ready]").forEach(function (n) {
      var r = document.querySelector('[data-testid="replica"][data-replica="' + CSS.escape(n.dataset.untilReady) + '"]');
      if (r && r.dataset.state === "ready") {
        n.textContent = n.dataset.readyText;
        n.removeAttribute("data-until-ready");
      }
    });
  }
  document.addEventListener("htmx:sseMessage", noticesReady);

  // In the playground, Ctrl+Enter (Cmd+Enter) sends the message.
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Enter" || !(e.ctrlKey || e.metaKey) || !e.target.matches || !e.target.matches("#pg-message")) {
      return;
    }
    e.preventDefault();
    if (e.target.form) {
      e.target.form.requestSubmit();
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    copyButtons(document);
    if (document.getElementById("job-live")) {
      steps = stepStates();
    }
  });
})();

