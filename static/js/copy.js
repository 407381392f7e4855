// Copying to the clipboard, for every page: each code block's Copy button (data-action=copy-code,
// rendered by chat/web/rendering.py) copies its code, and chat.js copies whole messages through
// window.ollmCopy.
(function () {
  "use strict";

  function copy(value, button) {
    var done = function () { flash(button, "Copied"); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(value).then(done, function () { copyByHand(value) && done(); });
    } else if (copyByHand(value)) {
      done();
    }
  }

  // Without a secure context (plain http on a LAN address) the Clipboard API is absent.
  function copyByHand(value) {
    var area = document.createElement("textarea");
    area.value = value;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    area.remove();
    return ok;
  }

  function flash(button, label) {
    var span = button.querySelector("span") || button;
    var before = span.textContent;
    span.textContent = label;
    setTimeout(function () { span.textContent = before; }, 1500);
  }

  document.addEventListener("click", function (event) {
    var button = event.target instanceof Element && event.target.closest("[data-action=copy-code]");
    if (!button) { return; }
    var code = button.parentElement.querySelector("pre");
    if (code) { copy(code.textContent, button); }
  });

  window.ollmCopy = {copy: copy};
})();
