// collabui trace viewer: step navigation (left/right arrows, step links, #anchors) and
// read-marker highlighting. Reads only the page's own markup; no network, no eval.
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  var steps = Array.prototype.slice.call(document.querySelectorAll("section.step"));
  var current = -1;

  function episodeOf(el) { return el.closest("section.episode"); }

  function show(k, scroll) {
    if (!steps.length) { return; }
    k = Math.max(0, Math.min(steps.length - 1, k));
    var step = steps[k];
    var ep = episodeOf(step);
    ep.querySelectorAll("section.step").forEach(function (s) { s.classList.toggle("current", s === step); });
    ep.querySelectorAll(".step-link").forEach(function (a) {
      a.classList.toggle("current", a.getAttribute("data-step-id") === step.id);
    });
    document.querySelectorAll("section.episode").forEach(function (e) { e.classList.toggle("active", e === ep); });
    current = k;
    document.body.setAttribute("data-current-step", step.id);
    var pos = document.getElementById("position");
    if (pos) { pos.textContent = "step " + (k + 1) + " of " + steps.length + " (" + step.id + ")"; }
    if (scroll) { ep.scrollIntoView({ block: "start" }); }
  }

  function indexOfId(id) {
    for (var k = 0; k < steps.length; k++) {
      if (steps[k].id === id) { return k; }
    }
    var el = id ? document.getElementById(id) : null;
    if (el && el.matches("section.episode")) {
      var first = el.querySelector("section.step");
      return first ? steps.indexOf(first) : -1;
    }
    return -1;
  }

  function fromHash(scroll) {
    var k = indexOfId(decodeURIComponent(window.location.hash.slice(1)));
    if (k >= 0) { show(k, scroll); return true; }
    return false;
  }

  // Every episode starts on its first step; the page on the first step overall (or the #anchor).
  document.querySelectorAll("section.episode").forEach(function (ep) {
    var first = ep.querySelector("section.step");
    if (first) { first.classList.add("current"); }
  });
  if (!fromHash(false)) { show(0, false); }
  window.addEventListener("hashchange", function () { fromHash(true); });

  document.addEventListener("keydown", function (ev) {
    if (ev.altKey || ev.ctrlKey || ev.metaKey || ev.shiftKey) { return; }
    var tag = ev.target && ev.target.tagName;
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT") { return; }
    if (ev.key === "ArrowRight") { show(current + 1, true); ev.preventDefault(); }
    else if (ev.key === "ArrowLeft") { show(current - 1, true); ev.preventDefault(); }
  });

  document.querySelectorAll(".step-link").forEach(function (a) {
    a.addEventListener("click", function (ev) {
      var k = indexOfId(a.getAttribute("data-step-id"));
      if (k >= 0) { ev.preventDefault(); show(k, false); }
    });
  });

  // Hovering a matrix cell outlines the cells it read (predecessors this round, own last round).
  // Its incoming arrows are drawn bold meanwhile.
  document.querySelectorAll(".matrix .cell").forEach(function (cell) {
    var base = cell.id.replace(/-a\d+-r\d+$/, "");
    var targets = (cell.getAttribute("data-reads") || "").split(" ").filter(Boolean).map(function (ar) {
      var p = ar.split(":");
      return document.getElementById(base + "-a" + p[0] + "-r" + p[1]);
    }).filter(Boolean);
    var to = cell.getAttribute("data-agent") + ":" + cell.getAttribute("data-round");
    var arrows = Array.prototype.filter.call(cell.closest(".matrix").querySelectorAll(".read-arrow"),
      function (g) { return g.getAttribute("data-to") === to; });
    function mark(on) {
      cell.classList.toggle("reader", on);
      targets.forEach(function (t) { t.classList.toggle("read-target", on); });
      arrows.forEach(function (g) { g.classList.toggle("active", on); });
    }
    cell.addEventListener("mouseenter", function () { mark(true); });
    cell.addEventListener("mouseleave", function () { mark(false); });
  });
}());
