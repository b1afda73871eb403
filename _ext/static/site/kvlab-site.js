/* Small fixes to the site's behaviour (see _ext/kvlab_site.py). */
(function () {
  "use strict";
  // A dropdown's title opens it. sphinx-exercise writes a solution's title as a link to its
  // exercise, and following that link jumped away instead of opening the answer; the title's
  // own click handler (sphinx-togglebutton) still runs, so the click opens the dropdown.
  document.addEventListener("click", function (ev) {
    var link = ev.target.closest && ev.target.closest(".dropdown > .admonition-title a");
    if (link) { ev.preventDefault(); }
  }, true);
})();
