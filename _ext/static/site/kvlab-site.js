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
