// Attach a text file to the next message (issue 47, item 9): the file is read here, refused at once when
// it is larger than the page's limit or not text (a NUL byte, or not UTF-8), and otherwise its name and
// text go into the composer's hidden fields, sent with the message (the server checks them again), and
// its chip shows it until the message is stored (the socket's frame then empties them) or × removes it.
(function () {
  "use strict";
  var input = document.getElementById("attach-input");
  if (!input) { return; }
  var max = Number(input.dataset.maxBytes);
  var error = document.getElementById("attachment-error");

  function byId(id) { return document.getElementById(id); }
  function clear() {
    byId("attachment-name").value = "";
    byId("attachment-text").value = "";
    byId("attachment-chip").hidden = true;
    input.value = "";
  }
  function refuse(text) {
    error.textContent = text;
    error.hidden = false;
    input.value = "";
  }
  input.addEventListener("change", function () {
    var file = input.files && input.files[0];
    error.hidden = true;
    if (!file) { return; }
    if (file.size > max) {
      refuse(file.name + " is " + file.size.toLocaleString("en") + " bytes; an attached file can be at most " +
        max.toLocaleString("en") + " bytes. Nothing was attached: attach a smaller file or paste the part you need.");
      return;
    }
    file.arrayBuffer().then(function (buffer) {
      var bytes = new Uint8Array(buffer);
      var text;
      try {
        if (bytes.indexOf(0) !== -1) { throw new Error("NUL"); }
        text = new TextDecoder("utf-8", {fatal: true}).decode(bytes);
      } catch (e) {
        refuse(file.name + " is not a text file (it holds binary data). Attach plain text, markdown, code, CSV or JSON; nothing was attached.");
        return;
      }
      byId("attachment-name").value = file.name;
      byId("attachment-text").value = text;
      byId("attachment-label").textContent = file.name;
      byId("attachment-chip").hidden = false;
    });
  });
  document.addEventListener("click", function (event) {
    if (event.target && event.target.id === "attachment-remove") { clear(); }
  });
})();
