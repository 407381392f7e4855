// The chat page's conversations (templates/chat/_sidebar.html): "☰ Chats" and × show and hide them
// (on a wide screen the choice is remembered; on a phone they open as a drawer, closed by ×, Esc or
// a tap beside it), and the filter hides the titles that do not hold what is typed (a branch that
// matches keeps its parents in view).
(function () {
  "use strict";
  var sidebar = document.getElementById("sidebar");
  if (!sidebar) { return; }
  var KEY = "ollm-sidebar";
  var phone = window.matchMedia("(max-width: 60rem)");
  var body = document.body;

  function shown() {
    return phone.matches ? body.classList.contains("sidebar-open") : !body.classList.contains("sidebar-collapsed");
  }
  function sync() {
    document.querySelectorAll("[data-sidebar-toggle].sidebar-toggle").forEach(function (b) {
      b.setAttribute("aria-expanded", String(shown()));
    });
  }
  function set(open) {
    if (phone.matches) {
      body.classList.toggle("sidebar-open", open);
    } else {
      body.classList.toggle("sidebar-collapsed", !open);
      try { localStorage.setItem(KEY, open ? "open" : "closed"); } catch (e) { /* private mode */ }
    }
    sync();
    if (open) { (document.getElementById("new-chat") || sidebar).focus(); }
  }
  try { if (localStorage.getItem(KEY) === "closed") { body.classList.add("sidebar-collapsed"); } } catch (e) { /* none */ }
  sync();
  phone.addEventListener("change", function () { body.classList.remove("sidebar-open"); sync(); });

  document.addEventListener("click", function (event) {
    var toggle = event.target.closest && event.target.closest("[data-sidebar-toggle]");
    if (toggle) { set(!shown()); return; }
    if (phone.matches && shown() && !sidebar.contains(event.target)) { set(false); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && phone.matches && shown()) { set(false); }
  });

  function filter() {
    var input = document.getElementById("sidebar-filter");
    var list = document.getElementById("sidebar-list");
    if (!input || !list) { return; }
    var query = input.value.trim().toLowerCase();
    var items = Array.prototype.slice.call(list.querySelectorAll(".sidebar-item"));
    var visible = 0;
    // From the end: a branch that matches keeps its parents (the nearest items above it of lower depth) in view.
    var need = -1;
    for (var i = items.length - 1; i >= 0; i--) {
      var item = items[i];
      var depth = parseInt((item.className.match(/depth-(\d)/) || [0, "0"])[1], 10);
      var show = !query || item.dataset.title.indexOf(query) !== -1 || need > depth;
      if (show) { need = depth; }
      if (depth === 0) { need = -1; }
      item.hidden = !show;
      if (show) { visible++; }
    }
    var none = list.querySelector(".sidebar-none");
    if (none) { none.hidden = visible > 0 || !items.length; }
  }
  document.addEventListener("input", function (event) { if (event.target.id === "sidebar-filter") { filter(); } });
  // The list is swapped anew (the title written, Show archived): the filter still applies.
  document.body.addEventListener("htmx:afterSwap", filter);
})();
