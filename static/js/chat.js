// The chat page's few behaviours that htmx does not cover: Enter sends, Stop,
// the connection line, and keeping the newest message in view.
(function () {
  "use strict";
  var composer = document.getElementById("composer");
  if (!composer) { return; }
  var connection = document.getElementById("connection");

  document.addEventListener("keydown", function (event) {
    if (event.target && event.target.id === "composer-text" && event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (event.target.value.trim()) { composer.requestSubmit(); }
    }
  });
  document.getElementById("stop-button").addEventListener("click", function () {
    document.getElementById("stop-form").requestSubmit();
  });

  function scrollToEnd() {
    var history = document.getElementById("history");
    if (history) { history.lastElementChild && history.lastElementChild.scrollIntoView({block: "end"}); }
  }
  document.body.addEventListener("htmx:wsOpen", function () {
    connection.textContent = "";
    document.body.dataset.socket = "open";
  });
  document.body.addEventListener("htmx:wsClose", function () {
    document.body.dataset.socket = "closed";
    connection.textContent = "Connection lost: reconnecting… What you type is kept and sent once it is back.";
  });
  document.body.addEventListener("htmx:wsAfterMessage", scrollToEnd);
  // A link to one message (#msg-42, from a search) stays on it: static/js/anchor.js opens and scrolls.
  if (!/^#msg-\d+$/.test(location.hash)) { scrollToEnd(); }
})();
