/* redraw.js: when the Generate page redraws its charts and metrics while a run streams, and the final figures.

Chips go in at every update (stream.js); the charts and the metrics panel are redrawn at most every CHART_MS
and with at most four fifths of the main thread, one chart per task, so a chip never waits for a whole
cycle. When the end line arrives, the server's own figures (charts/run.py, in the end line) replace the
streaming charts, interactive. What each cycle costs goes into pgLive.stats (for the tests and the bench).
Left out: drawing itself (charts.js, metrics.js) and reading the stream (stream.js). */
(function () {
  "use strict";
  const L = (window.pgLive = window.pgLive || {});
  const CHART_MS = 160;
  const charts = L.charts, metrics = L.metrics;

  function schedule() {
    const run = L.state();
    if (!run || run.timer) return;
    // at most every CHART_MS, and at most 4/5 of the main thread (a long run's charts cost more to redraw;
    // a run's first cycle, which creates the charts, does not count)
    const every = Math.max(CHART_MS, 1.25 * (run.busy || 0));
    run.timer = setTimeout(flush, Math.max(0, run.lastDraw + every - Date.now()));
  }

  function flush() {   // one chart per task, so chips (and the page) get the main thread between charts
    const r = L.state(), stats = L.stats;
    r.timer = null;
    if (!window.Plotly) { r.timer = setTimeout(flush, 100); return; }
    if (r.end && !r.finalShown) { showFinal(r); return; }   // the run is over: straight to the final figures
    // the final figures hold every step (the server's own): a step read after them (Gradio's copy of the
    // stream, late) is not drawn into them; their traces are not the streaming ones (extendTraces threw)
    if (r.finalShown) { metrics.drawMetrics(r); return; }
    if (!r.steps.length) return;
    let busy = 0;
    const draws = [() => charts.drawTimeline(r), () => charts.drawLatency(r), () => charts.drawKV(r),
      () => charts.drawTopK(r, r.follow ? r.steps.length - 1 : r.selected), () => metrics.drawMetrics(r)];
    r.lastDraw = Date.now();
    r.timer = -1;   // a cycle is under way: schedule() waits for its end
    const next = (i) => {
      if (L.state() !== r) return;   // a new run started meanwhile
      const began = performance.now();
      try { draws[i](); } catch (e) { stats.drawErrors++; console.error("live chart", i, e); }   // the others go on
      const took = performance.now() - began;
      busy += took;
      if (i < charts.NAMES.length) L.keep(stats.chartMs[charts.NAMES[i]], took);   // what each chart costs
      if (i + 1 < draws.length) {   // the metrics panel (a few text nodes) goes with the last chart
        if (i + 2 === draws.length) next(i + 1); else setTimeout(() => next(i + 1), 0);
        return;
      }
      stats.draws++;
      L.keep(stats.drawTimes, Date.now());
      L.keep(stats.drawMs, busy);   // the main thread's time on this cycle's charts
      L.keep(stats.cycleWallMs, Date.now() - r.lastDraw);   // from its first chart to its last, paints between included
      if (r.cycles++) r.busy = busy;
      r.timer = null;
      if (r.end && !r.finalShown) showFinal(r);
      else if (r.drawn.timeline < r.steps.length) schedule();   // steps came in during the cycle
    };
    next(0);
  }

  function showFinal(r) {   // the server's own figures (charts/run.py), built once at the end, interactive
    r.finalShown = true;
    metrics.showAnswer(r);
    r.topkShown = null;
    const figures = r.end.figures || {};
    for (const name of charts.NAMES) {
      const fig = figures[name];
      if (fig) charts.plot(r, name, fig.data || [], {...(fig.layout || {}), template: r.end.template});
    }
    if (figures.topk) r.topkShown = r.steps.length - 1;
    if (r.follow && r.steps.length) charts.drawTopK(r, r.steps.length - 1);
    metrics.clientSays(r);
  }

  L.redraw = {schedule};
})();
