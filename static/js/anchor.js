// A link to one message (#msg-42, from a search result) opens the compressed
// group around it and scrolls it into view.
(function () {
  "use strict";
  function reveal() {
    if (!/^#msg-\d+$/.test(location.hash)) { return; }
    var target = document.getElementById(location.hash.slice(1));
    if (!target) { return; }
    for (var node = target.parentElement; node; node = node.parentElement) {
      if (node.tagName === "DETAILS") { node.open = true; }
    }
    target.scrollIntoView({block: "center"});
  }
  window.addEventListener("hashchange", reveal);
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", reveal); } else { reveal(); }
})();

// A button with data-print prints the page (instead of an inline onclick, which the
// Content-Security-Policy forbids).
document.addEventListener("click", function (event) {
  "use strict";
  var target = event.target;
  if (target instanceof Element && target.closest("[data-print]")) { window.print(); }
});
