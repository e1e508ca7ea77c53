// The lineage graph (scowl.ui.topology.lineage): preset positions from the server, cytoscape draws.
// A click (tap) on a feature node opens its page; ?focus=<node id> selects and centres one node.
(function () {
  "use strict";
  var css = getComputedStyle(document.documentElement);
  function color(name) { return css.getPropertyValue(name).trim(); }
  var elements = JSON.parse(document.getElementById("lineage-data").textContent);
  var container = document.getElementById("cy");
  var cy = cytoscape({
    container: container,
    elements: elements,
    layout: { name: "preset", padding: 30 },
    minZoom: 0.1,
    maxZoom: 3,
    style: [
      { selector: "node[width]", style: {
          "shape": "round-rectangle", "width": "data(width)", "height": 24, "label": "data(label)",
          "font-size": 11, "text-valign": "center", "text-halign": "center", "color": "#fff",
          "background-color": color("--scalar"), "border-width": 0 } },
      { selector: "node[kind = 'input']", style: { "background-color": color("--input") } },
      { selector: "node[kind = 'aggregate']", style: { "background-color": color("--aggregate") } },
      { selector: "node[?inline]", style: { "background-color": "#fff", "color": "#7a4a12",
          "border-width": 2, "border-style": "dashed", "border-color": color("--aggregate") } },
      { selector: "node[kind = 'event']", style: {
          "shape": "round-rectangle", "background-color": "#f4f6fa", "background-opacity": 1,
          "border-width": 1, "border-color": "#d0d5dd", "label": "data(label)", "color": "#344054",
          "font-size": 13, "font-weight": "bold", "text-valign": "top", "text-halign": "left",
          "text-margin-x": 60, "text-margin-y": -4, "padding": 16 } },
      { selector: "node:selected", style: { "border-width": 3, "border-color": "#101828", "border-style": "solid" } },
      { selector: "edge", style: {
          "width": 1.2, "line-color": "#b7bfcc", "target-arrow-color": "#b7bfcc",
          "target-arrow-shape": "triangle", "arrow-scale": 0.8, "curve-style": "bezier" } },
      { selector: "edge[kind = 'scope']", style: {
          "width": 2, "line-color": color("--scope"), "target-arrow-color": color("--scope"),
          "line-style": "dashed", "curve-style": "unbundled-bezier", "control-point-distances": [40],
          "control-point-weights": [0.5] } },
      { selector: ".faded", style: { "opacity": 0.25 } }
    ]
  });
  cy.on("tap", "node", function (evt) {
    var href = evt.target.data("href");
    if (href) { window.location.href = href; }
  });
  cy.on("mouseover", "node", function (evt) {
    if (!evt.target.data("href")) { return; }
    container.style.cursor = "pointer";
    var hood = evt.target.closedNeighborhood();
    cy.elements().not(hood).not(hood.parents()).addClass("faded");
  });
  cy.on("mouseout", "node", function () { container.style.cursor = ""; cy.elements().removeClass("faded"); });
  var focus = new URLSearchParams(window.location.search).get("focus");
  if (focus) {
    var n = cy.getElementById(focus);
    if (n.nonempty()) { n.select(); cy.zoom(1.1); cy.center(n); }
  }
  window.scowlCy = cy;
  container.setAttribute("data-ready", "1");
})();
