// Draws the metrics page's charts from the json_script element the server rendered.
(function () {
  "use strict";
  const source = document.getElementById("metrics-data");
  if (!source || typeof Chart === "undefined") return;
  const data = JSON.parse(source.textContent);
  const percent = (values) => values.map((v) => (v === null ? null : Math.round(v * 1000) / 10));
  const colours = ["#1f5fbf", "#17794a", "#b42318", "#9a6700"];

  // max (left axis) and y2Max (right axis) fix an axis's top: a score or a rate has a known
  // range, so a 0.60 score is drawn at 60% of the height, not at the top of an axis that
  // follows the data. An axis without one (cost, counts) follows the data from zero.
  function line(id, datasets, yTitle, max, y2Max) {
    const canvas = document.getElementById(id);
    if (!canvas) return;
    new Chart(canvas, {
      type: "line",
      data: {
        labels: data.labels,
        datasets: datasets.map((d, i) => ({
          label: d.label, data: d.values, borderColor: colours[i], backgroundColor: colours[i],
          spanGaps: true, tension: 0.2, yAxisID: d.axis || "y",
        })),
      },
      options: {
        maintainAspectRatio: false, animation: false,
        scales: {
          y: { beginAtZero: true, min: 0, max: max, title: { display: true, text: yTitle } },
          ...(datasets.some((d) => d.axis === "y2")
            ? { y2: { beginAtZero: true, min: 0, max: y2Max, position: "right", grid: { drawOnChartArea: false } } } : {}),
        },
      },
    });
  }

  line("chart-score", [
    { label: data.text.avg_score, values: data.avg_score, axis: "y2" },
    { label: data.text.success_rate, values: percent(data.success_rate) },
  ], "%", 100, 1);
  line("chart-repeated", [
    { label: data.text.repeated_rate, values: percent(data.repeated_rate) },
    { label: data.text.repeated_per_run, values: data.repeated_per_run, axis: "y2" },
  ], "%", 100);
  line("chart-intervention", [
    { label: data.text.intervention_rate, values: percent(data.intervention_rate) },
  ], "%", 100);
  line("chart-cost", [
    { label: data.text.cost, values: data.cost },
    { label: data.text.cost_per_run, values: data.cost_per_run, axis: "y2" },
  ], "USD");

  const tools = document.getElementById("chart-tools");
  if (tools) {
    new Chart(tools, {
      type: "bar",
      data: {
        labels: data.tools.names,
        datasets: [
          { label: data.text.p50, data: data.tools.p50_ms, backgroundColor: colours[0] },
          { label: data.text.p95, data: data.tools.p95_ms, backgroundColor: colours[3] },
        ],
      },
      options: { maintainAspectRatio: false, animation: false, scales: { y: { beginAtZero: true, title: { display: true, text: data.text.ms } } } },
    });
  }
  // The browser tests read these: that the charts exist, and each axis's range as drawn.
  window.feedbackCharts = Object.fromEntries(
    Object.values(Chart.instances).map((c) => [c.canvas.id, c]));
  document.documentElement.dataset.chartsReady = "true";
})();
