// Draws the metrics page's charts from the json_script element the server rendered.
(function () {
  "use strict";
  const source = document.getElementById("metrics-data");
  if (!source || typeof Chart === "undefined") return;
  const data = JSON.parse(source.textContent);
  const percent = (values) => values.map((v) => (v === null ? null : Math.round(v * 1000) / 10));
  const colours = ["#1f5fbf", "#17794a", "#b42318", "#9a6700"];

  function line(id, datasets, yTitle, max) {
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
          y: { beginAtZero: true, max: max, title: { display: true, text: yTitle } },
          ...(datasets.some((d) => d.axis === "y2")
            ? { y2: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false } } } : {}),
        },
      },
    });
  }

  line("chart-score", [
    { label: data.text.avg_score, values: data.avg_score, axis: "y2" },
    { label: data.text.success_rate, values: percent(data.success_rate) },
  ], "%", 100);
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
  // The browser test reads this to know the charts exist.
  document.documentElement.dataset.chartsReady = "true";
})();
