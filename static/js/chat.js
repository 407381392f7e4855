// The chat page's behaviours that htmx does not cover: Enter sends, Send and Stop follow the turn
// (#turn-state, set by the server's frames), Esc stops, the message actions (copy, edit, retry,
// regenerate, show all), the side panels on a phone, the connection line, and keeping the newest
// message in view.
(function () {
  "use strict";
  var page = document.getElementById("chat-page");
  if (!page) { return; }
  var composer = document.getElementById("composer");
  var text = function () { return document.getElementById("composer-text"); };
  var connection = document.getElementById("connection");

  // Page-wide behaviours, for read-only pages too.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-action]");
    if (!button) { return; }
    var action = button.dataset.action;
    var message = button.closest(".msg");
    if (action === "toggle-side") {
      var open = page.classList.toggle("side-open");
      page.querySelectorAll("[data-action=toggle-side]").forEach(function (b) { b.setAttribute("aria-expanded", String(open)); });
    } else if (action === "expand" && message) {
      if (!button.dataset.label) { button.dataset.label = button.textContent; }
      var expanded = message.querySelector(".body").classList.toggle("expanded");
      button.textContent = expanded ? "Show less" : button.dataset.label;
    } else if (action === "copy" && message) {
      copy(rawText(message), button);
    } else if (composer) {
      turnAction(action, message);
    }
  });

  function rawText(message) {
    var raw = message.querySelector("template.raw");
    return raw ? raw.content.textContent : message.querySelector(".body").innerText;
  }

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

  if (!composer) { return; }
  var send = document.getElementById("send-button");
  var stop = document.getElementById("stop-button");

  function streaming() {
    var state = document.getElementById("turn-state");
    return !!state && state.dataset.streaming === "1";
  }

  function setStreaming(on) {
    document.getElementById("turn-state").dataset.streaming = on ? "1" : "0";
    follow();
  }

  // Send is off and Stop on while a reply comes; the buttons that start a turn go with it.
  function follow() {
    var on = streaming();
    send.disabled = on;
    stop.disabled = !on;
    page.classList.toggle("streaming", on);
  }

  function submit() {
    if (streaming() || !text().value.trim()) { return; }
    composer.requestSubmit();
  }

  composer.addEventListener("htmx:wsAfterSend", function () {
    setStreaming(true);
    // A reply to this turn makes the older Retry and Regenerate buttons stale.
    document.querySelectorAll("#history [data-action=retry], #history [data-action=regenerate]").forEach(function (b) { b.remove(); });
    cancelEdit();
  });
  document.getElementById("turn-form").addEventListener("htmx:wsAfterSend", function () { setStreaming(true); });

  document.addEventListener("keydown", function (event) {
    if (event.target && event.target.id === "composer-text" && event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    } else if (event.key === "Escape" && streaming()) {
      event.preventDefault();
      document.getElementById("stop-form").requestSubmit();
    }
  });
  composer.addEventListener("submit", function (event) {
    if (streaming()) { event.preventDefault(); event.stopImmediatePropagation(); }
  }, true);
  stop.addEventListener("click", function () { document.getElementById("stop-form").requestSubmit(); });

  function turnAction(action, message) {
    if (action === "cancel-edit") { cancelEdit(); return; }
    if (streaming() || !message) { return; }
    if (action === "edit") {
      document.getElementById("composer-action").value = "edit";
      document.getElementById("composer-message-id").value = message.dataset.message;
      document.getElementById("editing-position").textContent = message.querySelector("header .muted").textContent.split(" ")[0];
      document.getElementById("editing").hidden = false;
      text().value = rawText(message);
      text().focus();
    } else if (action === "retry" || action === "regenerate") {
      document.getElementById("turn-action").value = action;
      document.getElementById("turn-form").requestSubmit();
    }
  }

  function cancelEdit() {
    document.getElementById("composer-action").value = "send";
    document.getElementById("composer-message-id").value = "";
    document.getElementById("editing").hidden = true;
  }

  function scrollToEnd() {
    var history = document.getElementById("history");
    if (history) { history.lastElementChild && history.lastElementChild.scrollIntoView({block: "end"}); }
  }
  document.body.addEventListener("htmx:wsOpen", function () {
    connection.textContent = "";
    document.body.dataset.socket = "open";
    setStreaming(false);  // a new socket has no turn of its own; one cut off is in the history
  });
  document.body.addEventListener("htmx:wsClose", function () {
    document.body.dataset.socket = "closed";
    connection.textContent = "Connection lost: reconnecting… What you type is kept and sent once it is back.";
  });
  document.body.addEventListener("htmx:wsAfterMessage", function () {
    follow();
    scrollToEnd();
  });
  follow();
  // A link to one message (#msg-42, from a search) stays on it: static/js/anchor.js opens and scrolls.
  if (!/^#msg-\d+$/.test(location.hash)) { scrollToEnd(); }
})();
