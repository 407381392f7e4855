// The chat page's behaviours that htmx does not cover: Enter sends (on a keyboard; on a touch
// screen it adds a new line), Send and Stop follow the turn (#turn-state, set by the server's
// frames), Esc stops, the message actions (copy, edit, retry, regenerate, show all; the copying
// itself is static/js/copy.js's), the side panels on a phone, the connection line, and keeping
// the newest message in view.
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
      window.ollmCopy.copy(rawText(message), button);
    } else if (composer) {
      turnAction(action, message);
    }
  });

  function rawText(message) {
    var raw = message.querySelector("template.raw");
    return raw ? raw.content.textContent : message.querySelector(".body").innerText;
  }

  // An append (data-append: a turn's first frame, messages written elsewhere) never shows a message
  // twice: the whole history can reach the page before it (a compression's event frame, or the page
  // itself rendered after the messages were stored), so what the history already holds is dropped.
  document.body.addEventListener("htmx:oobBeforeSwap", function (event) {
    var detail = event.detail || {};
    var fragment = detail.fragment;
    if (!detail.target || detail.target.id !== "history" || !fragment || !fragment.hasAttribute ||
        !fragment.hasAttribute("data-append")) { return; }
    Array.prototype.slice.call(fragment.children).forEach(function (child) {
      if (child.id && detail.target.querySelector("#" + CSS.escape(child.id))) { child.remove(); }
    });
  });

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
    document.querySelectorAll("#history [data-action=retry], #history [data-action=regenerate], #history [data-action=continue]").forEach(function (b) { b.remove(); });
    cancelEdit();
  });
  document.getElementById("turn-form").addEventListener("htmx:wsAfterSend", function () { setStreaming(true); });

  // A touch screen's keyboard has no Shift: there Enter adds a new line and the Send button sends,
  // and the placeholder says so (the template holds both wordings).
  var touch = window.matchMedia("(pointer: coarse)");
  function placeholder() {
    var area = text();
    area.placeholder = touch.matches ? area.dataset.touchPlaceholder : area.dataset.keyboardPlaceholder;
  }
  placeholder();
  touch.addEventListener("change", placeholder);

  document.addEventListener("keydown", function (event) {
    if (event.target && event.target.id === "composer-text" && event.key === "Enter" && !event.shiftKey && !event.isComposing && !touch.matches) {
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
    } else if (action === "retry" || action === "regenerate" || action === "continue") {
      document.getElementById("turn-action").value = action;
      document.getElementById("turn-form").requestSubmit();
    }
  }

  function cancelEdit() {
    document.getElementById("composer-action").value = "send";
    document.getElementById("composer-message-id").value = "";
    document.getElementById("editing").hidden = true;
  }

  // The composer sticks to the bottom of the screen, so scrolling the newest message "into view"
  // alone leaves it under the composer: scroll on until the lowest shown thing (the newest
  // message, or a status or progress line below it) ends above the composer's top.
  var GAP = 8;
  function lowestShown() {
    var history = document.getElementById("history");
    var candidates = [history && history.lastElementChild];
    ["chat-status", "connection", "progress", "model-banner"].forEach(function (id) { candidates.push(document.getElementById(id)); });
    var lowest = null, bottom = -Infinity;
    candidates.forEach(function (node) {
      if (!node || !node.getClientRects().length) { return; }  // absent or display: none
      var box = node.getBoundingClientRect();
      if (box.height > 0 && box.bottom > bottom) { lowest = node; bottom = box.bottom; }
    });
    return lowest;
  }
  function scrollToEnd() {
    var lowest = lowestShown();
    if (!lowest) { return; }
    lowest.scrollIntoView({block: "end"});
    var overlap = lowest.getBoundingClientRect().bottom - composer.getBoundingClientRect().top + GAP;
    if (overlap > 0) { window.scrollBy(0, overlap); }
  }
  // "Compress now" (a button in the composer) answers with its progress or its failure under the
  // history: keep that in view. The events fire on the button, or on #progress, swapped whole.
  document.body.addEventListener("htmx:afterSettle", function (event) {
    var detail = event.detail || {};
    var near = [detail.elt, detail.target, event.target].some(function (node) {
      return node && node.closest && (node.closest("#composer") || node.closest("#progress"));
    });
    if (near) { scrollToEnd(); }
  });
  document.body.addEventListener("htmx:wsOpen", function () {
    connection.textContent = "";
    document.body.dataset.socket = "open";
    // Whether a reply streams is the server's to say: a reply in flight catches the page up in the
    // socket's first frames (chat/web/live.py), and a page rendered during a reply that has ended since
    // gets the history and the idle state.
  });
  // The server closes with 4401 when the login is gone (a logout, here or in another tab) and 4404
  // when the session is not the user's: the socket does not come back then, so the page says why.
  var CLOSED_FOR_GOOD = {
    4401: "You are logged out, so this page no longer updates. What you typed stays here; ",
    4404: "This session is gone (deleted, or not yours): the page no longer updates."
  };
  document.body.addEventListener("htmx:wsClose", function (event) {
    var code = event.detail && event.detail.event ? event.detail.event.code : 0;
    document.body.dataset.socket = CLOSED_FOR_GOOD[code] ? "ended" : "closed";
    // Nothing can be sent or stopped meanwhile; a reply still streaming is joined again on reconnecting.
    setStreaming(false);
    connection.textContent = CLOSED_FOR_GOOD[code] ||
      "Connection lost: reconnecting… What you type is kept and sent once it is back.";
    if (code === 4401) {
      var login = document.createElement("a");
      login.href = connection.dataset.login + "?next=" + encodeURIComponent(location.pathname);
      login.textContent = "log in again";
      connection.append(login, ".");
    }
  });
  document.body.addEventListener("htmx:wsAfterMessage", function () {
    placeholder();  // a frame may bring the field anew (cleared, or a refused message handed back)
    follow();
    scrollToEnd();
  });
  follow();
  // A link to one message (#msg-42, from a search) stays on it: static/js/anchor.js opens and scrolls.
  if (!/^#msg-\d+$/.test(location.hash)) { scrollToEnd(); }
})();
