// A link to one message (#msg-42, from a search result) opens the compressed
// group around it, scrolls it to just below the chat page's sticky meter (which
// would otherwise cover it) and marks it with .target until another one is chosen.
(function () {
  "use strict";
  var GAP = 8;
  function headerBottom() {
    var header = document.getElementById("meter-sticky");
    if (!header || getComputedStyle(header).position !== "sticky") { return 0; }
    return header.getBoundingClientRect().height;
  }
  function reveal() {
    if (!/^#msg-\d+$/.test(location.hash)) { return; }
    var target = document.getElementById(location.hash.slice(1));
    if (!target) { return; }
    for (var node = target.parentElement; node; node = node.parentElement) {
      if (node.tagName === "DETAILS") { node.open = true; }
    }
    document.querySelectorAll(".msg.target").forEach(function (old) { old.classList.remove("target"); });
    target.classList.add("target");
    // The meter's height follows the viewport's width (compact on a phone): measured, not assumed.
    target.style.scrollMarginTop = (headerBottom() + GAP) + "px";
    target.scrollIntoView({block: "start"});
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
