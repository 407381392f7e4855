// Light or dark: the system's choice (prefers-color-scheme, through CSS's color-scheme), unless the
// top bar's toggle chose one, kept in localStorage. Loaded in <head>, before the body is painted,
// so a page chosen dark never flashes light (an inline script would be refused by the CSP).
(function () {
  "use strict";
  var KEY = "ollm-theme";
  var NEXT = {auto: "dark", dark: "light", light: "auto"};
  var LABEL = {auto: "◐ Auto", dark: "☾ Dark", light: "☀ Light"};
  var TITLE = {auto: "Theme: as the system says", dark: "Theme: dark", light: "Theme: light"};
  var root = document.documentElement;

  function stored() {
    var value = null;
    try { value = localStorage.getItem(KEY); } catch (e) { value = null; }  // storage off: follow the system
    return value === "dark" || value === "light" ? value : "auto";
  }

  function apply(theme) {
    if (theme === "auto") { delete root.dataset.theme; } else { root.dataset.theme = theme; }
    document.querySelectorAll("[data-theme-toggle]").forEach(function (button) {
      button.textContent = LABEL[theme];
      button.title = TITLE[theme] + " (click for " + NEXT[theme] + ")";
      button.dataset.theme = theme;
      button.setAttribute("aria-label", TITLE[theme]);
    });
  }

  apply(stored());
  document.addEventListener("DOMContentLoaded", function () { apply(stored()); });
  document.addEventListener("click", function (event) {
    var button = event.target instanceof Element && event.target.closest("[data-theme-toggle]");
    if (!button) { return; }
    var theme = NEXT[stored()];
    try {
      if (theme === "auto") { localStorage.removeItem(KEY); } else { localStorage.setItem(KEY, theme); }
    } catch (e) { /* not kept: this page still switches */ }
    apply(theme);
  });
})();
