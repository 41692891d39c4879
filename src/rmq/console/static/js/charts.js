// Chart.js set-ups of the topic page: time series over the last hour and a priority bar.
"use strict";

const RMQCharts = (() => {
  const { fmt } = RMQ;
  const MIN_SPAN_MS = 60 * 1000;

  function base(yTitle, options) {
    return {
      type: "line",
      data: { datasets: [] },
      options: Object.assign({
        animation: false, responsive: true, maintainAspectRatio: false, normalized: true,
        interaction: { mode: "index", intersect: false },
        elements: { point: { radius: 0, hitRadius: 6 }, line: { borderWidth: 2, tension: 0.2 } },
        scales: {
          x: { type: "linear", grid: { color: "#eef1f5" },
               ticks: { maxTicksLimit: 8, callback: (v) => fmt.time(v).slice(0, 5) } },
          y: { beginAtZero: true, grid: { color: "#eef1f5" },
               title: { display: Boolean(yTitle), text: yTitle, color: "#637083" } },
        },
        plugins: {
          legend: { position: "bottom", labels: { boxWidth: 12, boxHeight: 12, usePointStyle: false } },
          tooltip: { callbacks: { title: (items) => (items.length ? fmt.time(items[0].parsed.x) : "") } },
        },
      }, options || {}),
    };
  }

  function series(columns, name, color, label, extra) {
    const data = columns.at.map((x, i) => ({ x, y: columns[name][i] }));
    return Object.assign({ label, data, borderColor: color, backgroundColor: color + "33",
                           spanGaps: false }, extra || {});
  }

  // The x range: the last hour at most, at least a minute, as much as there is data.
  function xRange(history, columns) {
    const first = columns.at.length ? columns.at[0] : history.now;
    const span = Math.max(MIN_SPAN_MS, history.now - first);
    return { min: Math.max(history.since, history.now - span), max: history.now };
  }

  const STEPS = [10, 15, 30, 60, 120, 300, 600, 900].map((s) => s * 1000);

  function update(chart, datasets, range, yMax) {
    chart.data.datasets = datasets;
    const x = chart.options.scales.x;
    x.min = range.min;
    x.max = range.max;
    // ticks on round times, about six of them
    const step = STEPS.find((s) => (range.max - range.min) / s <= 7) || STEPS[STEPS.length - 1];
    x.ticks.stepSize = step;
    x.ticks.callback = (v) => (v % step ? null : fmt.time(v).slice(0, step < 60000 ? 8 : 5));
    x.afterBuildTicks = (scale) => {
      const first = Math.ceil(range.min / step) * step;
      scale.ticks = [];
      for (let v = first; v <= range.max; v += step) scale.ticks.push({ value: v });
    };
    if (yMax !== undefined) chart.options.scales.y.max = yMax;
    chart.update("none");
  }

  function rates(canvas) { return new Chart(canvas, base("msg/s")); }

  function backlog(canvas) {
    const config = base("messages");
    config.options.scales.y.stacked = true;
    return new Chart(canvas, config);
  }

  function merge(canvas) {
    const config = base("%");
    config.options.plugins.legend.display = false;
    config.options.plugins.tooltip.callbacks.label = (item) => ` merged: ${item.parsed.y.toFixed(1)}%`;
    return new Chart(canvas, config);
  }

  function priorities(canvas) {
    return new Chart(canvas, {
      type: "bar",
      data: { labels: [], datasets: [{ label: "ready", data: [], backgroundColor: [] }] },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        plugins: { legend: { display: false } },
        scales: { y: { beginAtZero: true, grid: { color: "#eef1f5" } }, x: { grid: { display: false } } },
      },
    });
  }

  function showRates(chart, history, columns) {
    const C = RMQ.COLORS;
    update(chart, [
      series(columns, "sent", C.sent, "sent"),
      series(columns, "merged", C.merged, "merged"),
      series(columns, "acked", C.acked, "acked"),
      series(columns, "retried", C.retried, "retried"),
      series(columns, "dead", C.dead_lettered, "dead-lettered"),
    ], xRange(history, columns));
  }

  function showBacklog(chart, history, columns) {
    const C = RMQ.COLORS;
    let first = true;
    const area = (name, color, label) => {
      const fill = first ? "origin" : "-1";  // stacked: each state fills down to the one below
      first = false;
      return series(columns, `backlog_${name}`, color, label, { fill, backgroundColor: color + "40" });
    };
    update(chart, [area("ready", C.ready, "ready"), area("delayed", C.delayed, "delayed"),
                   area("in_flight", C.in_flight, "in flight"), area("dead", C.dead, "dead")],
           xRange(history, columns));
  }

  function showMerge(chart, history, columns) {
    const percent = Object.assign({}, columns, {
      merge_pct: columns.merge_rate.map((v) => (v === null ? null : 100 * v)) });
    update(chart, [series(percent, "merge_pct", RMQ.COLORS.merged, "merge rate",
                          { fill: true, backgroundColor: RMQ.COLORS.merged + "22" })],
           xRange(history, columns), 100);
  }

  function showPriorities(chart, byPriority) {
    const entries = Object.entries(byPriority || {}).map(([p, n]) => [Number(p), n])
      .sort((a, b) => b[0] - a[0]);
    chart.data.labels = entries.map(([p]) => RMQ.priorityName(p));
    chart.data.datasets[0].data = entries.map(([, n]) => n);
    chart.data.datasets[0].backgroundColor = entries.map(([p]) => RMQ.priorityColor(p));
    chart.update("none");
  }

  return { rates, backlog, merge, priorities, showRates, showBacklog, showMerge, showPriorities };
})();
