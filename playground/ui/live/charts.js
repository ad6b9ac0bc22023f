/* charts.js: the Generate page's four streaming charts (timeline, latency per step, KV cache, top-k), drawn with
Plotly.js from the run's steps, and the top-k chart's step picker.

Each draw function takes the run (stream.js) and draws the steps it has not drawn yet: the first call plots
the chart, later ones extend its traces (one redraw). While a run streams the charts are pictures (Plotly's
staticPlot) with fixed margins: no hover or drag layer to rebuild, no automargin measuring labels in the
page; the final figures (redraw.js showFinal) are interactive. Steps are drawn as lines (one SVG path per
trace) where the final figures have bars: a Plotly bar is a path per bar, redrawn at every extend. Token
text is escaped for Plotly (format.js label); a figure the source does not give is labelled missing.
Left out: when to draw (redraw.js) and the server's final figures (charts/run.py builds them). */
(function () {
  "use strict";
  const L = (window.pgLive = window.pgLive || {});
  const {esc, label, candidate, prob, logMsTicks, timeTicks} = L.format;
  const PREFILL = "#d97706", DECODE = "#2563eb", DECODE_ALT = "#60a5fa", FORMULA = "#6b7280";
  const NAMES = ["timeline", "latency", "kv", "topk"];   // each chart's container is pg-<name>
  const CONFIG = {displaylogo: false, responsive: true};   // hover, zoom, PNG export (the modebar)
  // while a run streams, pictures: no hover layer, drag layer or modebar to rebuild at every redraw (about a
  // quarter of a chart's cost); the final figures, and the top-k chart once the run is over, are interactive
  const STREAMING = {...CONFIG, staticPlot: true};
  const $ = (id) => document.getElementById(id);

  function layout(title, xaxis, yaxis, height = 320) {   // as charts/run.py _figure (plotly_white)
    // fixed margins: automargin measures the tick labels and may redraw the chart a second time
    // and tick labels neither checked for overflow nor auto-angled: both measure every label in the page
    const axis = (text) => ({title: {text}, gridcolor: "#EBF0F8", zerolinecolor: "#EBF0F8", ticklabeloverflow: "allow",
                             tickangle: 0});
    // in presenter mode (presenter.js) the fonts are its sizes at once: a streaming chart is never relaid out
    const big = window.pgPresent && window.pgPresent.on(), size = big ? window.pgPresent.MIN : 16;
    const lay = {title: {text: title, x: 0.05}, xaxis: axis(xaxis),
                 yaxis: axis(yaxis), height, font: {size}, paper_bgcolor: "white", plot_bgcolor: "white",
                 margin: {l: 80, r: 20, t: 80, b: 60},   // the legend below the title
                 legend: {orientation: "h", y: 1.0, x: 1, xanchor: "right", yanchor: "bottom"}};
    if (big) lay.uniformtext = {minsize: size, mode: "show"};
    return lay;
  }

  function missing(lay, text) {
    lay.annotations = [{text: esc(text), showarrow: false, font: {size: 18}, xref: "paper", yref: "paper", x: 0.5, y: 0.5}];
    return lay;
  }

  let measure = null;
  function textWidth(text) {   // px of a tick label (Plotly's font at size 16), without a layout of the page
    if (!measure) { measure = document.createElement("canvas").getContext("2d"); measure.font = '16px "Open Sans", verdana, arial, sans-serif'; }
    return Math.ceil(measure.measureText(text).width);
  }

  function plot(r, name, data, lay) {   // a picture while `r` streams, interactive once its final figures are shown
    const div = $(`pg-${name}`);
    if (!div) return;
    if (div.classList.contains("pg-chart-empty")) { div.classList.remove("pg-chart-empty"); div.textContent = ""; }
    window.Plotly.react(div, data, lay, r.finalShown ? CONFIG : STREAMING);
  }

  function extend(name, update, traces) {
    const div = $(`pg-${name}`);
    if (div && div.data) window.Plotly.extendTraces(div, update, traces);
  }

  // a new run: the chart's container waits for its first step; `text`: what it says instead (no run on screen)
  function clear(name, text = "waiting for the first token…") {
    const div = $(`pg-${name}`);
    if (!div) return;
    if (window.Plotly && div.classList.contains("js-plotly-plot")) window.Plotly.purge(div);
    div.classList.add("pg-chart-empty");
    div.textContent = text;
  }

  function drawTimeline(r) {   // decode steps as thick segments, alternating two traces so each step shows
    const F = r.F, from = r.drawn.timeline || 0, decode = r.steps.slice(Math.max(from, 1));
    const parts = [0, 1].map((odd) => {
      const mine = decode.filter((s) => s[F.seq] % 2 === odd), x = [], y = [], customdata = [];
      for (const s of mine) {
        const point = [s[F.seq], label(s[F.shown]), s[F.latency] * 1e3];
        x.push((s[F.time] - s[F.latency]) * 1e3, s[F.time] * 1e3, null);
        y.push("request", "request", null);
        customdata.push(point, point, null);
      }
      return {x, y, customdata};
    });
    // the time axis's ticks in a person's unit (Plotly's own read "5k" for 5,000 ms), laid out again only once the
    // run passes the last of them
    const spanMs = r.steps[r.steps.length - 1][F.time] * 1e3, ticks = timeTicks(spanMs);
    if (!from) {
      const first = r.steps[0], lay = layout("Timeline of the request", "time since request start", "", 220);
      lay.yaxis.showticklabels = false;
      Object.assign(lay.xaxis, {tickmode: "array", ...ticks});
      r.timeTicksEnd = ticks.tickvals ? ticks.tickvals[ticks.tickvals.length - 1] : 0;
      lay.showlegend = true;
      const decodeTrace = (part, color, name, show) => ({type: "scatter", mode: "lines", name, showlegend: show,
        legendgroup: "decode", line: {color, width: 44}, ...part,
        hovertemplate: "step %{customdata[0]} %{customdata[1]}: %{customdata[2]:.1f} ms<extra></extra>"});
      plot(r, "timeline", [
        {type: "bar", name: "prefill (TTFT)", orientation: "h", y: ["request"], base: [0], x: [first[F.time] * 1e3],
         marker: {color: PREFILL}, hovertemplate: "prefill + first token: %{x:.1f} ms<extra></extra>"},
        decodeTrace(parts[0], DECODE, "decode", true), decodeTrace(parts[1], DECODE_ALT, "decode", false)], lay);
    } else if (decode.length) {
      extend("timeline", {x: parts.map((p) => p.x), y: parts.map((p) => p.y), customdata: parts.map((p) => p.customdata)},
             [1, 2]);
      if (spanMs > (r.timeTicksEnd || 0) && ticks.tickvals) {
        window.Plotly.relayout($("pg-timeline"), {"xaxis.tickvals": ticks.tickvals, "xaxis.ticktext": ticks.ticktext});
        r.timeTicksEnd = ticks.tickvals[ticks.tickvals.length - 1];
      }
    }
    r.drawn.timeline = r.steps.length;
  }

  function drawLatency(r) {
    const F = r.F, from = r.drawn.latency || 0, decode = r.steps.slice(Math.max(from, 1));
    const cols = {x: decode.map((s) => s[F.seq]), y: decode.map((s) => s[F.latency] * 1e3),
                  customdata: decode.map((s) => label(s[F.shown]))};
    const log = r.steps.length > 2;   // TTFT dwarfs decode steps: a log axis keeps both readable
    // the lowest and highest positive latency so far: the log axis's ticks (a zero has no place on it)
    const seen = [r.steps[0][F.latency] * 1e3, ...cols.y].filter((v) => v > 0);
    const low = Math.min(r.latLow ?? Infinity, ...seen), high = Math.max(r.latHigh ?? 0, ...seen);
    const widened = low < (r.latLow ?? Infinity) || high > (r.latHigh ?? 0);
    r.latLow = low; r.latHigh = high;
    const ticks = () => logMsTicks(Number.isFinite(low) ? [low, high] : []);
    if (!from) {
      const lay = layout("Latency per step", "output token (step)", "latency (ms)");
      if (log) Object.assign(lay.yaxis, {type: "log", ...ticks()});
      plot(r, "latency", [
        {type: "bar", name: "prefill (TTFT)", x: [0], y: [r.steps[0][F.latency] * 1e3], marker: {color: PREFILL},
         hovertemplate: "TTFT %{y:.1f} ms<extra></extra>"},
        {type: "scatter", mode: "lines", name: "decode (ITL)", ...cols, line: {color: DECODE, width: 2, shape: "hvh"},
         hovertemplate: "step %{x} %{customdata}: %{y:.1f} ms<extra></extra>"}], lay);
      r.logAxis = log;
    } else if (decode.length) {
      extend("latency", {x: [cols.x], y: [cols.y], customdata: [cols.customdata]}, [1]);
      if (log && (!r.logAxis || widened)) {   // ticks again only when the range grows past them
        const {tickvals, ticktext} = ticks();
        window.Plotly.relayout($("pg-latency"), {"yaxis.type": "log", "yaxis.tickvals": tickvals,
                                                 "yaxis.ticktext": ticktext});
        r.logAxis = true;
      }
    }
    r.drawn.latency = r.steps.length;
  }

  function drawKV(r) {
    const F = r.F, from = r.drawn.kv || 0, fresh = r.steps.slice(from), shape = r.head.kv;
    const measured = fresh.filter((s) => s[F.kv_bytes] != null), known = fresh.filter((s) => s[F.seq_len] != null);
    const formula = (n) => 2 * shape[0] * shape[1] * shape[2] * n * shape[3] / 2 ** 20;
    if (!from) {
      r.kvMeasured = measured.length > 0;
      r.kvFormula = Boolean(shape) && known.length > 0;
      const lay = layout("KV-cache size per step", "output token (step)", "KV cache (MiB)"), data = [];
      if (r.kvMeasured) {
        data.push({type: "scatter", name: "measured", mode: "lines", line: {color: DECODE, width: 3},
                   x: measured.map((s) => s[F.seq]), y: measured.map((s) => s[F.kv_bytes] / 2 ** 20),
                   customdata: measured.map((s) => s[F.seq_len]),
                   hovertemplate: "step %{x}: %{y:.3f} MiB (%{customdata} tokens)<extra></extra>"});
      } else {
        missing(lay, `missing: ${r.head.backend} does not give measured KV-cache bytes`);
      }
      if (r.kvFormula) {
        data.push({type: "scatter", name: `formula (estimate): 2×${shape[0]}×${shape[1]}×${shape[2]}×seq_len×${shape[3]}`,
                   mode: "lines", line: {color: FORMULA, dash: "dash", width: 2}, x: known.map((s) => s[F.seq]),
                   y: known.map((s) => formula(s[F.seq_len])), customdata: known.map((s) => s[F.seq_len]),
                   hovertemplate: "formula: %{y:.3f} MiB<extra></extra>"});
      }
      plot(r, "kv", data, lay);
    } else {   // one extendTraces (one redraw) for both traces
      const update = {x: [], y: [], customdata: []}, traces = [];
      if (r.kvMeasured && measured.length) {
        update.x.push(measured.map((s) => s[F.seq]));
        update.y.push(measured.map((s) => s[F.kv_bytes] / 2 ** 20));
        update.customdata.push(measured.map((s) => s[F.seq_len]));
        traces.push(0);
      }
      if (r.kvFormula && known.length) {
        update.x.push(known.map((s) => s[F.seq]));
        update.y.push(known.map((s) => formula(s[F.seq_len])));
        update.customdata.push(known.map((s) => s[F.seq_len]));
        traces.push(r.kvMeasured ? 1 : 0);
      }
      if (traces.length) extend("kv", update, traces);
    }
    r.drawn.kv = r.steps.length;
  }

  function drawTopK(r, index) {
    const F = r.F, n = r.steps.length;
    index = Math.max(0, Math.min(index, n - 1));
    const picker = $("pg-step"), pickerLabel = $("pg-step-label");
    if (picker) { picker.max = String(Math.max(n - 1, 0)); picker.value = String(index); }
    if (pickerLabel) pickerLabel.textContent = r.follow ? `the last (${index})` : String(index);
    if (r.topkShown === index) return;
    r.topkShown = index;
    const chosen = r.steps[index], top = chosen[F.top];
    if (!top) {
      plot(r, "topk", [], missing(layout(`Top-k at step ${index}`, "probability", ""),
                               `missing: ${r.head.backend} does not give top-k probabilities`));
      return;
    }
    const p = chosen[F.prob] == null ? "" : ` (model p=${prob(chosen[F.prob])})`;
    const lay = layout(`Top-k at step ${index}: chose “${label(chosen[F.shown])}”${p}`, "probability", "");
    const cands = top.slice().reverse();   // best at the top of a horizontal bar chart
    // the chosen token: by id, or by its text where the source named it only by its text (charts/run.py)
    const id = chosen[F.token_id], picked = (c) => (id != null ? c[0] === id : c[1] === chosen[F.shown]);
    // a long token is cut on its axis label (the id keeps labels apart) and shown whole on hover
    const short = (t) => ([...t].length > 24 ? `${[...t].slice(0, 23).join("")}…` : t);
    const texts = cands.map((c) => `${short(c[1])}  (id ${c[0] == null ? "?" : c[0]})`), labels = texts.map(label);
    const whole = cands.map((c) => candidate(c[1], c[0]));
    const data = [{type: "bar", name: "model p (softmax at T=1)", orientation: "h", x: cands.map((c) => c[2]), y: labels,
                   marker: {color: cands.map((c) => (picked(c) ? PREFILL : DECODE))},
                   text: cands.map((c) => prob(c[2])), textposition: "auto",
                   customdata: whole, hovertemplate: "%{customdata}: model p=%{x:.4f}<extra></extra>"}];
    if (!r.head.greedy && cands.some((c) => c[3] != null)) {
      data.push({type: "bar", name: "sampled with (after temperature, top-k, top-p)", orientation: "h", y: labels,
                 x: cands.map((c) => c[3] || 0), marker: {color: FORMULA}, opacity: 0.6,
                 customdata: whole, hovertemplate: "%{customdata}: sampling p=%{x:.4f}<extra></extra>"});
    }
    // the picked bar's colour in the legend: a trace with no bar of its own (x null on a label it shares)
    data.push({type: "bar", name: "picked token", orientation: "h", x: [null], y: labels.slice(0, 1),
               marker: {color: PREFILL}, hoverinfo: "skip"});
    lay.uniformtext = {minsize: Math.max(14, (lay.uniformtext || {}).minsize || 0), mode: "show"};
    lay.xaxis.range = [0, 1];
    // the labels' room measured on a canvas: automargin would measure them in the page and draw twice
    lay.margin.l = Math.min(Math.max(...texts.map(textWidth)) + 24, 360);
    lay.barmode = "group";
    lay.showlegend = true;
    plot(r, "topk", data, lay);
  }

  // the step picker: the top-k chart follows the last step until moved
  document.addEventListener("input", (event) => {
    const run = L.state && L.state();
    if (!run || !event.target || event.target.id !== "pg-step" || !run.steps.length || !window.Plotly) return;
    run.selected = Number(event.target.value);
    run.follow = run.selected >= run.steps.length - 1 && !run.end;
    drawTopK(run, run.selected);
  });

  L.charts = {NAMES, plot, clear, drawTimeline, drawLatency, drawKV, drawTopK};
})();
