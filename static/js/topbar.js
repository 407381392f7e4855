// On a phone the top bar's links are behind a menu button (the CSS hides them there): the button
// opens and closes them; Esc or a tap elsewhere closes them again.
(function () {
  "use strict";
  var bar = document.getElementById("topbar");
  var button = bar && bar.querySelector("[data-menu-toggle]");
  if (!button) { return; }
  function set(open) {
    bar.classList.toggle("menu-open", open);
    button.setAttribute("aria-expanded", String(open));
  }
  button.addEventListener("click", function () { set(!bar.classList.contains("menu-open")); });
  document.addEventListener("click", function (event) {
    if (!bar.contains(event.target)) { set(false); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && bar.classList.contains("menu-open")) { set(false); button.focus(); }
  });
})();
