// Live traffic (scowl.ui.traffic): poll /ui/traffic.json every second, keep the last 2 minutes,
// draw one uPlot chart per measure with a series per event type, and fill the table.
(function () {
  "use strict";
  var POLL_MS = 1000, KEEP = 120;
  var types = JSON.parse(document.getElementById("traffic-events").textContent);
  var palette = ["#2f5bd3", "#d9822b", "#3f9a5a", "#8e44ad", "#d64545", "#0e9aa7", "#7a6c5d", "#c71585"];
  var measures = [
    ["chart-events", "events_per_s"], ["chart-p50", "p50_ms"], ["chart-p99", "p99_ms"], ["chart-late", "late_per_s"]
  ];
  var xs = [], data = {}, charts = {};
  measures.forEach(function (m) { data[m[1]] = types.map(function () { return []; }); });

  function width(el) { return Math.max(320, el.parentNode.clientWidth - 18); }
  measures.forEach(function (m) {
    var el = document.getElementById(m[0]);
    var series = [{}].concat(types.map(function (t, i) {
      return { label: t, stroke: palette[i % palette.length], width: 1.6, spanGaps: false };
    }));
    charts[m[1]] = new uPlot({
      width: width(el), height: 190, series: series,
      scales: { x: { time: true }, y: { range: function (u, lo, hi) { return [0, Math.max(hi || 0, 0.01) * 1.15]; } } },
      axes: [{}, { size: 50 }],
      legend: { live: false }
    }, [xs].concat(data[m[1]]), el);
  });

  function fmt(v, digits) { return v === null || v === undefined ? "—" : Number(v).toFixed(digits); }

  function tick() {
    fetch("/ui/traffic.json", { credentials: "same-origin", headers: { "accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (j) {
        if (!j) { return; }
        var rows = {};
        j.event_types.forEach(function (r) { rows[r.event_type] = r; });
        if (j.interval_s) {
          xs.push(j.time);
          measures.forEach(function (m) {
            types.forEach(function (t, i) { data[m[1]][i].push(rows[t] ? rows[t][m[1]] : null); });
          });
          if (xs.length > KEEP) {
            xs.shift();
            measures.forEach(function (m) { data[m[1]].forEach(function (s) { s.shift(); }); });
          }
          measures.forEach(function (m) { charts[m[1]].setData([xs].concat(data[m[1]])); });
        }
        types.forEach(function (t) {
          var tr = document.querySelector('tr[data-event-type="' + t + '"]'), r = rows[t];
          if (!tr || !r) { return; }
          tr.querySelector(".events_per_s").textContent = fmt(r.events_per_s, 1);
          tr.querySelector(".p50_ms").textContent = fmt(r.p50_ms, 2);
          tr.querySelector(".p99_ms").textContent = fmt(r.p99_ms, 2);
          tr.querySelector(".late_per_s").textContent = fmt(r.late_per_s, 2);
          tr.querySelector(".out_of_order_per_s").textContent = fmt(r.out_of_order_per_s, 2);
          tr.querySelector(".dry_runs_per_s").textContent = fmt(r.dry_runs_per_s, 2);
          tr.querySelector(".events_total").textContent = r.events_total.toLocaleString("en");
          tr.querySelector(".late_total").textContent = r.late_total.toLocaleString("en");
        });
        document.body.setAttribute("data-traffic-polls", String((+document.body.getAttribute("data-traffic-polls") || 0) + 1));
      })
      .catch(function () {})
      .then(function () { setTimeout(tick, POLL_MS); });
  }
  window.addEventListener("resize", function () {
    measures.forEach(function (m) {
      var el = document.getElementById(m[0]);
      charts[m[1]].setSize({ width: width(el), height: 190 });
    });
  });
  tick();
})();
