// PopuLoRA league dashboard: charts (uPlot), with evolution steps drawn as dashed vertical lines.
"use strict";

(() => {
  const D = window.dashboard;
  const { state, STEP_INCRS, PALETTE } = D;

  // -- charts (uPlot); evolution steps drawn as dashed vertical lines
  function chart(name, box, opts, data, markers) {
    const width = Math.max(320, box.clientWidth || 640);
    const axes = (opts.axes || [{}, {}]).map((a, i) => (i === 0 ? { incrs: STEP_INCRS, ...a } : a));
    const plot = new uPlot({
      width, height: opts.height || 300, series: opts.series, scales: { x: { time: false }, ...(opts.scales || {}) },
      axes, cursor: { points: { size: 6 } }, legend: { live: true },
      plugins: markers && markers.length ? [markerPlugin(markers)] : [],
    }, data, box);
    box.dataset.series = String(opts.series.length - 1);
    state.charts[name] = plot;
    return plot;
  }
  function markerPlugin(steps) {
    return { hooks: { draw: [(u) => {
      const ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = "#888";
      ctx.fillStyle = "#666";
      ctx.setLineDash([4, 4]);
      ctx.lineWidth = 1;
      ctx.font = `${11 * devicePixelRatio}px sans-serif`;
      for (const step of steps) {
        const x = Math.round(u.valToPos(step, "x", true));
        if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
        ctx.fillText("evolve", x + 3, u.bbox.top + 12 * devicePixelRatio);
      }
      ctx.restore();
    }] } };
  }
  function colorOf(i) { return PALETTE[i % PALETTE.length]; }

  Object.assign(D, { chart, colorOf });
})();
