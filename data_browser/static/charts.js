/* The browser's charts (uPlot), shared by the training, compare and fit pages.

   Tick labels are compact (Charts.si(12000) == "12k", 1.2e6 -> "1.2M", 3.4e15 -> "3.4e15", 3e-4 -> "3e-4")
   and a y-axis is as wide as its longest label, so a tokens/s axis never reads "0,000" (uPlot's default
   axis is 50 px whatever its labels). Charts.line(el, {title, xLabel, series: [{label, color, points}],
   data: [xs, ys1, ys2, ...], xLog, yLog}) draws one chart into el and leaves the uPlot object on el.uplot; Charts.draw(el, spec) does the same
   for series that each carry their own x values. */
"use strict";
const Charts = (() => {
  const PREFIXES = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  const trim = (s) => (s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s);

  function si(v) {
    if (v === null || v === undefined || !isFinite(v)) return "";
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e15 || a < 1e-3) {
      const [mantissa, exponent] = v.toExponential(2).split("e");
      return trim(mantissa) + "e" + Number(exponent);
    }
    for (const [factor, prefix] of PREFIXES) if (a >= factor) return trim((v / factor).toPrecision(4)) + prefix;
    return trim(v.toPrecision(4));
  }

  const ticks = (u, splits) => splits.map(si);

  function axisSize(u, values, axisIdx, cycleNum) {
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size; // uPlot re-asks while it settles the layout: keep the first answer
    const longest = (values || []).reduce((a, v) => (v && v.length > a.length ? v : a), "");
    u.ctx.font = axis.font[0];
    return Math.ceil(axis.ticks.size + axis.gap + 8 + u.ctx.measureText(longest).width / devicePixelRatio);
  }

  function seriesOptions(s) {
    const opts = {label: s.label, stroke: s.color, width: s.points ? 0 : 1.5, spanGaps: true, dash: s.dash};
    if (s.points) {
      opts.paths = () => null;
      opts.points = {show: true, size: 8, fill: s.color, stroke: s.color};
    } else {
      opts.points = {show: false};
    }
    return opts;
  }

  function line(el, {title, xLabel, yLabel, series, data, width, maxWidth = 620, height = 260, xLog = false, yLog = false, legend = false}) {
    const room = el.parentElement ? el.parentElement.clientWidth - 24 : 560;
    const opts = {
      title,
      width: width || Math.max(200, Math.min(maxWidth, room)),
      height,
      legend: {show: legend},
      scales: {x: {time: false, distr: xLog ? 3 : 1}, y: {distr: yLog ? 3 : 1}},
      axes: [
        {label: xLabel, values: ticks, size: 44},
        {label: yLabel, values: ticks, size: axisSize},
      ],
      series: [{label: xLabel}, ...series.map(seriesOptions)],
    };
    el.uplot = new uPlot(opts, data, el);
    return el.uplot;
  }

  /* A chart from a spec whose series carry their own points: {title, xLabel, xLog, yLog,
     series: [{label, color, points, x: [...], y: [...]}]}; uPlot.join aligns them on one x. */
  function draw(el, spec, options = {}) {
    el.dataset.chart = spec.key || spec.title;
    return line(el, {...spec, ...options, data: uPlot.join(spec.series.map((s) => [s.x, s.y]))});
  }

  return {si, line, draw};
})();
