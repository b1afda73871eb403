/* Small fixes to the site's behaviour (see _ext/kvlab_site.py). */
(function () {
  "use strict";
  // A dropdown's title opens it. sphinx-exercise writes a solution's title as a link to its
  // exercise: following it jumped away, and sphinx-togglebutton's handler, given the link as the
  // click's target, found no dropdown to open. A click on the link becomes a click on the title.
  document.addEventListener("click", function (ev) {
    var link = ev.target.closest && ev.target.closest(".dropdown > .admonition-title a");
    if (!link) { return; }
    ev.preventDefault();
    ev.stopPropagation();
    link.closest(".admonition-title").click();
  }, true);
})();

// The sidebar buttons. The page has two .primary-toggle buttons (the top bar's, shown on phones,
// and the article header's) and two .secondary-toggle buttons; pydata-sphinx-theme 0.17.1 binds
// only the first of each, which is hidden, so the buttons a reader sees did nothing
// (pydata/pydata-sphinx-theme#2451, executablebooks/sphinx-book-theme#988). Every one is handled
// here, before the theme's own handlers (which are stopped, so a theme that binds them too does not
// act twice): on a wide screen the primary button hides or shows the sidebar; otherwise a button
// opens its sidebar as a drawer (the theme's <dialog>, filled with the sidebar's content while it
// is open), which a tap beside it or Escape closes.
(function () {
  "use strict";
  var WIDE = "(min-width: 960px)";
  var PAIRS = {
    "primary-toggle": ["pst-primary-sidebar", "pst-primary-sidebar-modal"],
    "secondary-toggle": ["pst-secondary-sidebar", "pst-secondary-sidebar-modal"]
  };

  function move(from, to) {
    Array.from(from.childNodes).forEach(function (n) { to.appendChild(n); });
    Array.from(from.classList).forEach(function (c) {
      from.classList.remove(c);
      to.classList.add(c);
    });
  }

  function wire(dialog, sidebar) {
    if (dialog.dataset.kvlabDrawer) { return; }
    dialog.dataset.kvlabDrawer = "1";
    dialog.addEventListener("click", function (ev) {
      if (!dialog.open || ev.target !== dialog) { return; }
      var r = dialog.getBoundingClientRect();
      var inside = ev.clientX >= r.left && ev.clientX <= r.right &&
                   ev.clientY >= r.top && ev.clientY <= r.bottom;
      if (!inside) { dialog.close(); }
    });
    dialog.addEventListener("keydown", function (ev) {
      if (ev.key === "Escape" && dialog.open) {
        ev.preventDefault();
        dialog.close();
      }
    });
    // back to the sidebar when closed (a no-op where the theme's own handler already did it)
    dialog.addEventListener("close", function () { move(dialog, sidebar); });
  }

  function open(button, sidebar, dialog) {
    if (dialog.open) { dialog.close(); return; }
    wire(dialog, sidebar);
    move(sidebar, dialog);
    dialog.showModal();
    button.setAttribute("aria-expanded", "true");
    dialog.addEventListener("close", function () {
      button.setAttribute("aria-expanded", "false");
      if (button.focus) { button.focus({ preventScroll: true }); }
    }, { once: true });
  }

  document.addEventListener("click", function (ev) {
    var button = ev.target.closest && ev.target.closest(".primary-toggle, .secondary-toggle");
    if (!button) { return; }
    var kind = button.classList.contains("primary-toggle") ? "primary-toggle" : "secondary-toggle";
    var sidebar = document.getElementById(PAIRS[kind][0]);
    var dialog = document.getElementById(PAIRS[kind][1]);
    if (!sidebar || !dialog) { return; }  // not this theme's layout: leave the click alone
    ev.preventDefault();
    ev.stopPropagation();
    button.blur();
    if (kind === "primary-toggle" && window.matchMedia(WIDE).matches) {
      var hidden = sidebar.classList.toggle("pst-sidebar-hidden");
      button.setAttribute("aria-expanded", hidden ? "false" : "true");
      return;
    }
    open(button, sidebar, dialog);
  }, true);
})();

// A diagram opens full size on a click: each card diagram (img.kvlab-diagram) is wrapped in a link
// to its own SVG, which the browser shows at its full size and lets a reader zoom.
(function () {
  "use strict";
  function link() {
    document.querySelectorAll("img.kvlab-diagram").forEach(function (img) {
      if (img.closest("a")) { return; }
      var a = document.createElement("a");
      a.href = img.getAttribute("src");
      a.className = "kvlab-diagram-link";
      a.title = "Open the diagram full size";
      img.parentNode.insertBefore(a, img);
      a.appendChild(img);
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", link);
  } else { link(); }
})();

// A table wider than the text column scrolls inside it (kvlab-site.css); a line above it says so,
// since a phone shows no scroll bar until the table is touched. The line comes and goes with the
// window's width.
(function () {
  "use strict";
  var SEL = ".bd-article .pst-scrollable-table-container, .bd-article .table-wrapper";
  function mark() {
    document.querySelectorAll(SEL).forEach(function (box) {
      var wide = box.scrollWidth > box.clientWidth + 1;
      var cue = box.previousElementSibling;
      var has = cue && cue.classList.contains("kvlab-scroll-cue");
      if (wide && !has) {
        cue = document.createElement("p");
        cue.className = "kvlab-scroll-cue";
        cue.textContent = "The table is wider than the page: scroll it sideways for more \u2192";
        box.parentNode.insertBefore(cue, box);
      } else if (!wide && has) {
        cue.remove();
      }
      box.classList.toggle("kvlab-scrolls", wide);
    });
  }
  function start() {
    mark();
    var t = null;
    window.addEventListener("resize", function () { clearTimeout(t); t = setTimeout(mark, 150); });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else { start(); }
})();
