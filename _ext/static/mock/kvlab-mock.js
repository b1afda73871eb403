/* The mock interviews (_ext/kvlab_mock.py writes the page; this file makes it an interview).
 * Without this script every part shows, its model answer folded in a <details>. With it: a timer
 * (started and stopped by the reader), the notes box kept in localStorage (where the browser
 * allows it), the follow-ups revealed one at a time by a button, a checkbox per point, and the
 * score per part and overall, announced in a live region. No library, nothing fetched. */
(function () {
  "use strict";

  function store(action, key, value) {
    // localStorage may be missing or throw (private windows, storage turned off): notes then
    // simply are not kept
    try {
      if (action === "get") { return window.localStorage.getItem(key); }
      window.localStorage.setItem(key, value);
    } catch (e) { /* not kept */ }
    return null;
  }

  function clock(seconds) {
    var m = Math.floor(seconds / 60), s = seconds % 60;
    return m + ":" + (s < 10 ? "0" : "") + s;
  }

  function points(word, n) { return n + " " + word + (n === 1 ? "" : "s"); }

  function setUp(root) {
    var id = root.id;
    var parts = Array.prototype.slice.call(root.querySelectorAll(".kvlab-mock-part"));
    var tools = root.querySelector(".kvlab-mock-tools");
    var controls = root.querySelector(".kvlab-mock-controls");
    var next = root.querySelector(".kvlab-mock-next");
    var live = root.querySelector(".kvlab-mock-score");
    var notes = root.querySelector(".kvlab-mock-notes textarea");
    root.classList.add("kvlab-mock-ready");

    // the timer: off until the reader starts it; counts whole seconds of running time
    var timer = root.querySelector(".kvlab-mock-timer");
    var face = root.querySelector(".kvlab-mock-clock");
    var spent = 0, since = null, tick = null;
    function elapsed() { return spent + (since === null ? 0 : Date.now() - since); }
    function show() { face.textContent = clock(Math.floor(elapsed() / 1000)); }
    timer.addEventListener("click", function () {
      if (since === null) {
        since = Date.now();
        tick = window.setInterval(show, 250);
        timer.textContent = "Stop the timer";
        timer.classList.add("kvlab-mock-running");
      } else {
        spent = elapsed();
        since = null;
        window.clearInterval(tick);
        show();
        timer.textContent = "Start the timer";
        timer.classList.remove("kvlab-mock-running");
      }
    });
    tools.hidden = false;

    // the notes: kept in this browser, per interview
    var key = "kvlab-mock-notes:" + id;
    var saved = store("get", key);
    if (saved) { notes.value = saved; }
    notes.addEventListener("input", function () { store("set", key, notes.value); });
    var hint = document.createElement("span");
    hint.className = "kvlab-mock-hint";
    hint.textContent = " (kept in this browser only)";
    root.querySelector(".kvlab-mock-notes label").appendChild(hint);

    // a checkbox per point; a score line per part
    parts.forEach(function (part, n) {
      var items = part.querySelectorAll(".kvlab-mock-points > li");
      Array.prototype.forEach.call(items, function (li, i) {
        var box = document.createElement("input");
        box.type = "checkbox";
        box.id = id + "-p" + n + "-" + i;
        var label = document.createElement("label");
        label.htmlFor = box.id;
        while (li.firstChild) { label.appendChild(li.firstChild); }
        li.appendChild(box);
        li.appendChild(label);
        box.addEventListener("change", function () { score(n); });
      });
      var line = document.createElement("p");
      line.className = "kvlab-mock-part-score";
      part.querySelector(".kvlab-mock-reveal").appendChild(line);
    });

    function count(part) {
      var boxes = part.querySelectorAll(".kvlab-mock-points input[type=checkbox]");
      var ticked = part.querySelectorAll(".kvlab-mock-points input[type=checkbox]:checked");
      return [ticked.length, boxes.length];
    }

    function name(n) { return n === 0 ? "The question" : "Follow-up " + n; }

    // Each shown part's score, and the total over the parts shown so far; ``changed`` is the part
    // whose box was just ticked (its score is announced first).
    function score(changed) {
      var sum = 0, total = 0, shown = 0;
      parts.forEach(function (part) {
        var c = count(part);
        part.querySelector(".kvlab-mock-part-score").textContent =
          "Covered " + c[0] + " of " + points("point", c[1]) + ".";
        if (!part.hidden) { sum += c[0]; total += c[1]; shown += 1; }
      });
      var pct = total ? Math.round(100 * sum / total) : 0;
      var overall = "Overall, over " + points("part", shown) + " so far: " + sum + " of " +
        points("point", total) + " (" + pct + " %).";
      if (changed !== undefined) {
        var c = count(parts[changed]);
        overall = name(changed) + ": " + c[0] + " of " + c[1] + ". " + overall;
      }
      live.textContent = overall;
    }

    // the follow-ups, one at a time
    var shownUpTo = 0;
    parts.forEach(function (part, n) { part.hidden = n > shownUpTo; });
    function updateNext() {
      var left = parts.length - 1 - shownUpTo;
      next.disabled = left === 0;
      next.textContent = left === 0 ? "No follow-ups left" :
        "Next follow-up (" + left + " left)";
    }
    next.addEventListener("click", function () {
      if (shownUpTo >= parts.length - 1) { return; }
      shownUpTo += 1;
      var part = parts[shownUpTo];
      part.hidden = false;
      var ask = part.querySelector(".kvlab-mock-ask");
      if (ask) { ask.focus(); }
      updateNext();
      score();
    });
    controls.hidden = false;
    updateNext();
    score();
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll(".kvlab-mock"), function (root) {
      try { setUp(root); } catch (e) {
        // a part missing from the page: leave it readable as it is, and say why in the console
        if (window.console) { window.console.warn("kvlab-mock: " + e); }
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
