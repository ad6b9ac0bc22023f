/* live.js: the Generate page's live view, drawn in the browser from the run's step stream.

The server sends the run as lines of JSON (playground/live.py): a head, one array per step (numbered),
an end line with the final figures. They come two ways. Gradio delivers the stream's text to apply()
through a JavaScript-only .change; it only grows during a run, so each call reads the lines after the
last one read: O(new steps). When the head arrives, the page also opens the live channel (an
EventSource on ui/live_channel.py), which sends each step as the run makes it: Gradio's path adds about
100 ms (its handler coalesces, its SSE loop polls, its frontend fires .change in an animation frame)
and, while the channel reads, comes once a second as a backup. A step is drawn once, from whichever
path brings it first, in sequence order; a page whose channel is refused still gets every step.
Chips, the answer text, the token count, the metrics panel and the four charts (timeline, latency per
step, KV cache, top-k) are drawn here (a speculative run's chips coloured accepted / replaced / ordinary): chips at every update, charts at most every CHART_MS and with
at most four fifths of the main thread, one chart per task (so a chip never waits for a whole cycle);
while the run streams the charts are pictures (Plotly's staticPlot) with fixed margins, and the end
line's figures replace them, interactive.
A missing sequence number is said on the page and the stream is read again from its start. Token text
is set with textContent and escaped for Plotly (which reads <b>, <a>, <br>). Every figure a source
does not give (null) is labelled missing, never drawn as zero.
Left out: anything the server can tell better (the final figures come from charts/run.py). */
(function () {
  "use strict";
  const PREFILL = "#d97706", DECODE = "#2563eb", DECODE_ALT = "#60a5fa", FORMULA = "#6b7280", PALETTE = 6, CHART_MS = 160;
  const CONFIG = {displaylogo: false, responsive: true};   // hover, zoom, PNG export (the modebar)
  // while a run streams, pictures: no hover layer, drag layer or modebar to rebuild at every redraw (about a
  // quarter of a chart's cost); the final figures, and the top-k chart once the run is over, are interactive
  const STREAMING = {...CONFIG, staticPlot: true};
  const CHARTS = ["timeline", "latency", "kv", "topk"];
  const GAP = new Error("gap");
  const stats = {applied: 0, channelEvents: 0, channelSteps: 0, draws: 0, drawTimes: [], drawMs: [], applyMs: [], gaps: 0,
                 resyncs: 0, cycleWallMs: [], drawErrors: 0, chartMs: {timeline: [], latency: [], kv: [], topk: []}};
  let run = null;   // the run on screen
  let follow = true, scrollQueued = false;   // the chips box follows the newest chip (addChips)

  const $ = (id) => document.getElementById(id);
  // Plotly reads <b>, <a href>, <br> in text as markup and decodes &amp; &lt; &gt; (not &quot;): quotes stay
  const esc = (s) => String(s).replace(/[&<>]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;"}[c]));

  function formatBytes(n) {   // as run_view.format_bytes
    if (n < 1024) return `${n} B`;
    for (const unit of ["KiB", "MiB", "GiB"]) {
      n /= 1024;
      if (n < 1024 || unit === "GiB") return `${n.toFixed(1)} ${unit}`;
    }
  }
  const ms = (s) => (s == null ? "–" : `${Math.round(s * 1e3).toLocaleString("en-US")} ms`);

  // --- reading the stream

  function keep(list, value) {   // the last few thousand, for the tests and the bench
    list.push(value);
    if (list.length > 5000) list.splice(0, 1000);
  }

  function apply(text) {
    const began = performance.now();
    applyText(text);
    keep(stats.applyMs, performance.now() - began);
  }

  function applyText(text) {
    if (typeof text !== "string" || !text) return;
    stats.applied++;
    const nl = text.indexOf("\n");
    if (nl < 0) return;
    const headLine = text.slice(0, nl);
    if (!run || run.headLine !== headLine) {
      let head;
      try { head = JSON.parse(headLine); } catch (e) { return; }
      if (!head || !head.run || !Array.isArray(head.fields)) return;
      start(head, headLine);
    }
    if (text.length <= run.offset) return;   // nothing new (or an older, shorter copy of this run's stream)
    run.text = text;
    try {
      read(text);
    } catch (e) {
      if (e !== GAP) throw e;
      stats.gaps++;
      const missed = run.next;
      resync(text);   // says so itself if steps are missing from the stream
      if (!$("pg-notice") || !$("pg-notice").textContent) {
        notice(`An update skipped step ${missed}: the page read the stream again from its start.`);
      }
    }
    updated();
  }

  function read(text) {
    const end = text.lastIndexOf("\n") + 1;   // whole lines only
    const fresh = document.createDocumentFragment();
    takeLines(text.slice(run.offset, end).split("\n"), fresh, false);
    run.offset = end;
    addChips(fresh);
  }

  // Stream lines into the run (steps as chips in `fresh`, the end line). With `inOrder`, a step that is
  // not the next one is skipped (Gradio's updates fill a gap); else it is a gap (addStep throws GAP).
  // Returns the number of steps taken.
  function takeLines(lines, fresh, inOrder) {
    let taken = 0;
    for (const line of lines) {
      if (!line) continue;
      const rec = JSON.parse(line);
      if (Array.isArray(rec)) {
        if (inOrder && rec[run.F.seq] !== run.next) continue;
        const before = run.next;
        addStep(rec, fresh);
        taken += run.next > before;
      } else if (rec && "end" in rec) {
        run.end = rec;
      }
    }
    return taken;
  }

  function resync(text) {   // the whole stream again, from the line after the head
    const {head, headLine} = run;
    start(head, headLine);
    run.resyncing = true;
    stats.resyncs++;
    read(text);
    run.resyncing = false;
  }

  function addStep(rec, fresh) {
    const F = run.F, seq = rec[F.seq];
    if (seq < run.next) return;   // already drawn
    if (seq > run.next) {
      if (!run.resyncing) throw GAP;
      notice(`Steps ${run.next}–${seq - 1} are missing from the stream: the page skips them.`);
    }
    run.next = seq + 1;
    run.steps.push(rec);
    run.tokens += rec[F.tokens];
    const chip = document.createElement("span");
    // a speculative run colours by what verification made of the token: accepted, replaced, ordinary
    const draft = F.draft == null ? null : rec[F.draft];
    chip.className = (run.head.speculation ? `tok tok-${draft || "ordinary"}` : `tok tok-c${seq % PALETTE}`)
      + (rec[F.special] ? " tok-special" : "");
    if (draft === "accepted") run.accepted++;
    if (F.forward_pass != null && rec[F.forward_pass] != null) run.passes = rec[F.forward_pass] + 1;
    chip.textContent = rec[F.shown];
    chip.title = chipTitle(rec);
    chip.dataset.seq = String(seq);
    fresh.appendChild(chip);
    if (!rec[F.special]) run.answer += rec[F.text];
  }

  function chipTitle(rec) {   // as run_view.chip_title
    const F = run.F, prob = rec[F.prob], sampled = rec[F.sample_prob], kv = rec[F.kv_bytes];
    const parts = [`id ${rec[F.token_id] == null ? "?" : rec[F.token_id]}`,
      prob == null ? "model p missing" : `model p=${prob.toFixed(3)}`];
    if (sampled != null) parts.push(`sampled p=${sampled.toFixed(3)}`);
    if (rec[F.tokens] !== 1) parts.push(`${rec[F.tokens]} tokens in this event`);
    if (F.draft != null && rec[F.draft]) parts.push(`draft ${rec[F.draft]} (forward pass ${rec[F.forward_pass]})`);
    parts.push(`${(rec[F.latency] * 1e3).toFixed(1)} ms`, kv == null ? "KV not measured" : `KV ${formatBytes(kv)}`);
    return parts.join(" · ");
  }

  // --- a new run: clear what the last one drew

  function start(head, headLine) {
    if (run && run.timer > 0) clearTimeout(run.timer);
    if (run) closeChannel(run);
    const F = Object.fromEntries(head.fields.map((name, i) => [name, i]));
    run = {head, headLine, F, offset: headLine.length + 1, text: "", steps: [], next: 0, tokens: 0, answer: "",
           accepted: 0, passes: 0,
           end: null, drawn: {}, timer: null, lastDraw: 0, follow: true, selected: 0, topkShown: null,
           finalShown: false, logAxis: false, cycles: 0, busy: 0, channel: null};
    const box = $("pg-chips");
    follow = true;   // a new answer starts at the top, followed as it grows
    if (box) {
      box.replaceChildren();
      const cursor = document.createElement("span");
      cursor.className = "cursor";
      cursor.textContent = "▌";
      box.appendChild(cursor);
    }
    notice("");
    const answer = answerBox();
    if (answer) answer.value = "";
    for (const name of CHARTS) {
      const div = $(`pg-${name}`);
      if (!div) continue;
      if (window.Plotly && div.classList.contains("js-plotly-plot")) window.Plotly.purge(div);
      div.classList.add("pg-chart-empty");
      div.textContent = "waiting for the first token…";
    }
    const step = $("pg-step");
    if (step) { step.max = "0"; step.value = "0"; }
    openChannel(run);
  }

  // --- the live channel (ui/live_channel.py): the run's steps as they are made, beside Gradio's updates

  function openChannel(r) {
    if (typeof EventSource === "undefined" || !/^[0-9a-f]{16,64}$/.test(String(r.head.run))) return;
    const root = (window.gradio_config && window.gradio_config.root) || window.location.href;
    let url;
    try { url = new URL(`playground/live/${r.head.run}`, root.endsWith("/") ? root : `${root}/`); } catch (e) { return; }
    const source = new EventSource(url);
    r.channel = source;
    source.onmessage = (e) => fromChannel(r, e.data);
    source.onerror = () => { if (source.readyState === EventSource.CLOSED && r.channel === source) r.channel = null; };
  }

  function closeChannel(r) {
    if (r.channel) { r.channel.close(); r.channel = null; }
  }

  function fromChannel(r, data) {   // lines in order; a step out of order is left to Gradio's updates
    if (run !== r) { closeChannel(r); return; }
    const began = performance.now(), fresh = document.createDocumentFragment();
    stats.channelEvents++;
    stats.channelSteps += takeLines(data.split("\n"), fresh, true);
    addChips(fresh);
    updated();
    keep(stats.applyMs, performance.now() - began);
  }

  function notice(text) {
    const el = $("pg-notice");
    if (el) el.textContent = text;
  }

  const answerBox = () => document.querySelector("#answer textarea");

  // The chips box follows the newest chip unless the reader scrolled up. Reading its scroll position
  // right after a change would lay out the page at once, at every update; it is read in the next frame,
  // when the page is laid out anyway, once per frame.
  document.addEventListener("scroll", (event) => {
    const box = event.target;
    if (box && box.id === "pg-chips") follow = box.scrollTop + box.clientHeight >= box.scrollHeight - 40;
  }, {capture: true, passive: true});

  function addChips(fresh) {
    const box = $("pg-chips");
    if (!box || !fresh.childNodes.length) return;
    box.insertBefore(fresh, box.querySelector(".cursor"));
    if (follow && !scrollQueued) {
      scrollQueued = true;
      requestAnimationFrame(() => { scrollQueued = false; box.scrollTop = box.scrollHeight; });
    }
  }

  function updated() {
    const count = $("pg-count");
    if (count) count.textContent = String(run.next);
    if (run.end) {
      closeChannel(run);
      const cursor = document.querySelector("#pg-chips .cursor");
      if (cursor) cursor.remove();
      if (run.end.steps > run.next) notice(`The run ended with ${run.end.steps} steps; ${run.end.steps - run.next} never reached this page.`);
    }
    schedule();
  }

  // --- charts and metrics, at most every CHART_MS

  function schedule() {
    if (!run || run.timer) return;
    // at most every CHART_MS, and at most 4/5 of the main thread (a long run's charts cost more to redraw;
    // a run's first cycle, which creates the charts, does not count)
    const every = Math.max(CHART_MS, 1.25 * (run.busy || 0));
    run.timer = setTimeout(flush, Math.max(0, run.lastDraw + every - Date.now()));
  }

  function flush() {   // one chart per task, so chips (and the page) get the main thread between charts
    const r = run;
    r.timer = null;
    if (!window.Plotly) { r.timer = setTimeout(flush, 100); return; }
    if (r.end && !r.finalShown) { showFinal(r); return; }   // the run is over: straight to the final figures
    // the final figures hold every step (the server's own): a step read after them (Gradio's copy of the
    // stream, late) is not drawn into them; their traces are not the streaming ones (extendTraces threw)
    if (r.finalShown) { drawMetrics(r); return; }
    if (!r.steps.length) return;
    let busy = 0;
    const draws = [() => drawTimeline(r), () => drawLatency(r), () => drawKV(r),
      () => drawTopK(r, r.follow ? r.steps.length - 1 : r.selected), () => drawMetrics(r)];
    r.lastDraw = Date.now();
    r.timer = -1;   // a cycle is under way: schedule() waits for its end
    const next = (i) => {
      if (run !== r) return;   // a new run started meanwhile
      const began = performance.now();
      try { draws[i](); } catch (e) { stats.drawErrors++; console.error("live chart", i, e); }   // the others go on
      const took = performance.now() - began;
      busy += took;
      if (i < CHARTS.length) keep(stats.chartMs[CHARTS[i]], took);   // what each chart costs
      if (i + 1 < draws.length) {   // the metrics panel (a few text nodes) goes with the last chart
        if (i + 2 === draws.length) next(i + 1); else setTimeout(() => next(i + 1), 0);
        return;
      }
      stats.draws++;
      keep(stats.drawTimes, Date.now());
      keep(stats.drawMs, busy);   // the main thread's time on this cycle's charts
      keep(stats.cycleWallMs, Date.now() - r.lastDraw);   // from its first chart to its last, paints between included
      if (r.cycles++) r.busy = busy;
      r.timer = null;
      if (r.end && !r.finalShown) showFinal(r);
      else if (r.drawn.timeline < r.steps.length) schedule();   // steps came in during the cycle
    };
    next(0);
  }

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

  const label = (s) => esc(s);   // the visible text, escaped: Plotly reads markup in labels

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

  // While a run streams, steps are drawn as lines (one SVG path per trace): a Plotly bar is a path per
  // bar, redrawn at every extend, which costs a page tens of ms per chart; the final render has the bars.

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
    if (!from) {
      const first = r.steps[0], lay = layout("Timeline of the request", "time since request start (ms)", "", 220);
      lay.yaxis.showticklabels = false;
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
    }
    r.drawn.timeline = r.steps.length;
  }

  function logMsTicks(low, high) {   // as charts/run.py log_ms_ticks: 1, 2, 5 a decade, "20 ms"
    if (!(low > 0)) return {};
    const tickvals = [];
    for (let decade = 10 ** Math.floor(Math.log10(low)); decade <= high * 10; decade *= 10) {
      for (const m of [1, 2, 5]) { const v = m * decade; if (v >= low / 2.5 && v <= high * 2.5) tickvals.push(v); }
    }
    const ticktext = tickvals.map((v) => (v >= 1e3 ? `${+(v / 1e3).toPrecision(6)} s` : `${+v.toPrecision(6)} ms`));
    return {tickvals, ticktext};
  }

  function drawLatency(r) {
    const F = r.F, from = r.drawn.latency || 0, decode = r.steps.slice(Math.max(from, 1));
    const cols = {x: decode.map((s) => s[F.seq]), y: decode.map((s) => s[F.latency] * 1e3),
                  customdata: decode.map((s) => label(s[F.shown]))};
    const log = r.steps.length > 2;   // TTFT dwarfs decode steps: a log axis keeps both readable
    const seen = [r.steps[0][F.latency] * 1e3, ...cols.y];
    const low = Math.min(r.latLow ?? Infinity, ...seen), high = Math.max(r.latHigh ?? 0, ...seen);
    const widened = low < (r.latLow ?? Infinity) || high > (r.latHigh ?? 0);
    r.latLow = low; r.latHigh = high;
    if (!from) {
      const lay = layout("Latency per step", "output token (step)", "latency (ms)");
      if (log) Object.assign(lay.yaxis, {type: "log", ...logMsTicks(low, high)});
      plot(r, "latency", [
        {type: "bar", name: "prefill (TTFT)", x: [0], y: [r.steps[0][F.latency] * 1e3], marker: {color: PREFILL},
         hovertemplate: "TTFT %{y:.1f} ms<extra></extra>"},
        {type: "scatter", mode: "lines", name: "decode (ITL)", ...cols, line: {color: DECODE, width: 2, shape: "hvh"},
         hovertemplate: "step %{x} %{customdata}: %{y:.1f} ms<extra></extra>"}], lay);
      r.logAxis = log;
    } else if (decode.length) {
      extend("latency", {x: [cols.x], y: [cols.y], customdata: [cols.customdata]}, [1]);
      if (log && (!r.logAxis || widened)) {   // ticks again only when the range grows past them
        const ticks = logMsTicks(low, high);
        window.Plotly.relayout($("pg-latency"), {"yaxis.type": "log", "yaxis.tickvals": ticks.tickvals,
                                                 "yaxis.ticktext": ticks.ticktext});
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
    const p = chosen[F.prob] == null ? "" : ` (model p=${chosen[F.prob].toFixed(3)})`;
    const lay = layout(`Top-k at step ${index}: chose “${label(chosen[F.shown])}”${p}`, "probability", "");
    const cands = top.slice().reverse();   // best at the top of a horizontal bar chart
    // a long token is cut on its axis label (the id keeps labels apart) and shown whole on hover
    const short = (t) => ([...t].length > 24 ? `${[...t].slice(0, 23).join("")}…` : t);
    const texts = cands.map((c) => `${short(c[1])}  (id ${c[0]})`), labels = texts.map(label);
    const whole = cands.map((c) => `${label(c[1])}  (id ${c[0]})`);
    const data = [{type: "bar", name: "model p (softmax at T=1)", orientation: "h", x: cands.map((c) => c[2]), y: labels,
                   marker: {color: cands.map((c) => (c[0] === chosen[F.token_id] ? PREFILL : DECODE))},
                   text: cands.map((c) => c[2].toFixed(3)), textposition: "auto",
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

  function showAnswer(r) {   // the plain-text answer: rewritten whole, so at the charts' pace, not per step
    const answer = answerBox();
    if (answer && answer.value !== r.answer) answer.value = r.answer;
  }

  function drawMetrics(r) {   // as run_view.metrics_html, from the steps so far
    showAnswer(r);
    const panel = $("pg-live-metrics");
    if (!panel) return;
    const F = r.F, first = r.steps[0], last = r.steps[r.steps.length - 1];
    const ttft = first[F.time], e2e = last[F.time], span = e2e - ttft, after = r.tokens - first[F.tokens];
    const tpot = after > 0 ? span / after : null, tps = after > 0 && span > 0 ? after / span : null;
    const price = (id) => { const v = Number((document.querySelector(`#${id} input`) || {}).value); return Number.isFinite(v) ? v : 0; };
    const cost = (r.head.prompt_tokens * price("price-in") + r.tokens * price("price-out")) / 1e6;
    const cards = [["prompt tokens", r.head.prompt_tokens.toLocaleString("en-US")], ["output tokens", r.tokens.toLocaleString("en-US")],
      ["TTFT", ms(ttft)], ["TPOT", ms(tpot)], ["decode speed", tps == null ? "–" : `${tps.toFixed(1)} tok/s`],
      ["E2E", `${e2e.toFixed(2)} s`],
      ["KV cache now (measured)", last[F.kv_bytes] == null ? "not measured by this source" : formatBytes(last[F.kv_bytes])],
      ["cost (estimate)", `$${cost.toFixed(6)}`]];
    if (r.head.speculation && r.passes) {   // as run_view.speculation_html; acceptance and speedup come at the end
      cards.push(["tokens per forward pass (so far)", (r.tokens / r.passes).toFixed(2)],
                 ["drafts accepted (so far)", r.accepted.toLocaleString("en-US")]);
    }
    panel.replaceChildren(...cards.map(([k, v]) => {
      const card = document.createElement("div"), key = document.createElement("div"), value = document.createElement("div");
      card.className = "card"; key.className = "label"; value.className = "value";
      key.textContent = k; value.textContent = v;
      card.append(key, value);
      return card;
    }));
  }

  function showFinal(r) {   // the server's own figures (charts/run.py), built once at the end, interactive
    r.finalShown = true;
    showAnswer(r);
    r.topkShown = null;
    const figures = r.end.figures || {};
    for (const name of CHARTS) {
      const fig = figures[name];
      if (fig) plot(r, name, fig.data || [], {...(fig.layout || {}), template: r.end.template});
    }
    if (figures.topk) r.topkShown = r.steps.length - 1;
    if (r.follow && r.steps.length) drawTopK(r, r.steps.length - 1);
  }

  // --- the step picker: the top-k chart follows the last step until moved

  document.addEventListener("input", (event) => {
    if (!run || !event.target || event.target.id !== "pg-step" || !run.steps.length || !window.Plotly) return;
    run.selected = Number(event.target.value);
    run.follow = run.selected >= run.steps.length - 1 && !run.end;
    drawTopK(run, run.selected);
  });

  window.pgLive = {apply, stats, state: () => run};

  // a stream already on the page when this script ran (it loads after Gradio has started)
  const waiting = setInterval(() => {
    const box = document.querySelector("#stream textarea");
    if (!box) return;
    clearInterval(waiting);
    if (box.value && !run) apply(box.value);
  }, 200);
})();
