// Keyboard shortcuts, listed in a dialog that "?" opens (templates/base.html holds it). Single keys
// act only while no field has the focus, so typing is never taken for a shortcut; Esc (stop a reply)
// and Enter are chat.js's.
(function () {
  "use strict";
  var dialog = document.getElementById("shortcuts");

  function typing(target) {
    return target instanceof Element && !!target.closest("input, textarea, select, [contenteditable=true]");
  }

  function focus(selector) {
    var field = document.querySelector(selector);
    if (!field) { return false; }
    field.focus();
    return true;
  }

  var KEYS = {
    "?": function () { if (dialog && !dialog.open) { dialog.showModal(); } return !!dialog; },
    "/": function () { return focus(".topsearch input[name=q]"); },
    "c": function () { return focus("#composer-text"); },
    "n": function () {
      if (focus("#new-session input[name=title]")) { return true; }
      location.href = "/#new-session";
      return true;
    },
    "r": function () {
      var buttons = document.querySelectorAll("#history [data-action=regenerate]");
      if (!buttons.length) { return false; }
      buttons[buttons.length - 1].click();
      return true;
    }
  };

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing || typing(event.target)) { return; }
    var action = KEYS[event.key];
    if (action && action()) { event.preventDefault(); }
  });
  document.addEventListener("click", function (event) {
    if (event.target instanceof Element && event.target.closest("[data-shortcuts]") && dialog) { dialog.showModal(); }
  });
  // "n" from another page lands on the sessions list's new-session form, its title ready to type.
  // After "load": the browser's own move to the #fragment, earlier, would take the focus back.
  window.addEventListener("load", function () {
    if (location.hash === "#new-session") { focus("#new-session input[name=title]"); }
  });
})();
