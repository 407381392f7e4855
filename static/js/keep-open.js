// A part of a page that htmx swaps anew (the aging timeline every few seconds, the chat page's
// meter after each frame) comes back with every <details> closed, so what the user opened would
// close under them: remember the open ones before a swap and open them again right after it,
// before the browser paints. A <details> is known by its id, else by the nearest ancestor with
// an id, its class and its place among its kind there (the server renders the same structure).
(function () {
  "use strict";
  var open = {};  // key: open when last swapped out

  function key(details) {
    if (details.id) { return "#" + details.id; }
    var anchor = details.parentElement && details.parentElement.closest("[id]");
    var scope = anchor || document;
    var same = Array.prototype.filter.call(scope.querySelectorAll("details"), function (other) {
      return other.className === details.className;
    });
    return (anchor ? "#" + anchor.id : "") + " " + details.className + " " + same.indexOf(details);
  }

  function inside(target) {
    if (!target || !target.querySelectorAll) { return []; }
    var found = Array.prototype.slice.call(target.querySelectorAll("details"));
    if (target.tagName === "DETAILS") { found.push(target); }
    return found;
  }

  // Closed ones are remembered too (never cleared): a request's out-of-band parts swap between
  // its beforeSwap and its afterSwap, and one closed since must not open again on a later swap.
  function remember(event) {
    inside(event.detail && event.detail.target).forEach(function (details) {
      if (details.hasAttribute("data-close-on-swap")) { return; }  // a form that closes once saved
      open[key(details)] = details.open;
    });
  }

  function restore() {
    document.querySelectorAll("details:not([open])").forEach(function (details) {
      if (open[key(details)] === true) { details.open = true; }
    });
  }

  function swapped() {
    restore();
    // Tells a test (and nothing else) that a swap has come and gone: it waits on this, never on time.
    document.body.dataset.swaps = String(Number(document.body.dataset.swaps || 0) + 1);
  }

  // A page that refreshes itself (data-refresh) waits while the user has text of it selected: the
  // swap would drop the selection they are about to copy.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-refresh")) { return; }
    var selection = window.getSelection();
    if (selection && !selection.isCollapsed && elt.contains(selection.anchorNode)) { event.preventDefault(); }
  });

  document.addEventListener("htmx:beforeSwap", remember);
  document.addEventListener("htmx:oobBeforeSwap", remember);
  document.addEventListener("htmx:afterSwap", swapped);
  document.addEventListener("htmx:oobAfterSwap", swapped);
})();
