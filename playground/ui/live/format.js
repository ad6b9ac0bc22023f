/* format.js: the Generate page's figures as text, the same text the server writes after the run.

Each formatter here has a Python counterpart, and tests/ui/test_live_parity.py runs both on the same values:
  bytes        run_view.format_bytes      1536 -> "1.5 KiB"
  ms           run_view._ms               0.0424 -> "42 ms", null -> "–"
  fixed        f"{x:.Nf}"                 Python's rounding: the exact binary value, a tie to the even digit
  prob         f"{p:.3f}"                 a probability as chips, titles and top-k bars show it
  tokens       units.tokens               1 -> "1 token", 1024 -> "1,024 tokens"
  label        charts/run.py _label       the token as `shown` in the stream (tokens.visible), escaped for Plotly
  candidate    charts/run.py plot_top_k   a top-k candidate's label: "token  (id 42)", "(id ?)" without an id
  chipTitle    run_view.chip_title        what a chip's hover says
  logMsTicks   charts/run.py log_ms_ticks 1, 2, 5 a decade, "20 ms", "1 s"
  timeTicks    charts/run.py time_ticks   a linear time axis: "0 ms … 250 ms", "0 s … 20 s"
  metricCards  run_view.metrics_html      the metrics panel's cards, from the steps so far
JavaScript's own toFixed rounds a tie away from zero (0.0625 -> "0.063") where Python keeps the even digit
("0.062"), and Math.round takes 12.5 to 13 where Python writes 12: `fixed` turns every figure here into
decimals.
Left out: the DOM (metrics.js, stream.js) and charts (charts.js). */
(function () {
  "use strict";
  const L = (window.pgLive = window.pgLive || {});

  // Python's f"{x:.{digits}f}" for a finite x under 1e21: toFixed's text, except on an exact tie after an even
  // digit, which Python keeps (toFixed rounds every tie away from zero)
  function fixed(x, digits) {
    const text = x.toFixed(digits);
    if (!x.toFixed(digits + 1).endsWith("5")) return text;   // not a tie (a tie's next digit is an exact 5)
    const exact = Math.abs(x).toFixed(100);   // every digit of the binary value
    const cut = exact.indexOf(".") + 1 + digits;   // the first digit dropped
    const tie = exact[cut] === "5" && !/[1-9]/.test(exact.slice(cut + 1));
    if (!tie || Number(exact[digits ? cut - 1 : cut - 2]) % 2 === 1) return text;
    return (x < 0 ? "-" : "") + exact.slice(0, digits ? cut : cut - 1);
  }

  // thousands separated by commas, as Python's "{:,}"
  const grouped = (text) => text.replace(/^(-?)(\d+)/, (_, sign, whole) => sign + whole.replace(/\B(?=(\d{3})+$)/g, ","));
  const count = (n) => grouped(String(n));
  const tokens = (n) => `${count(n)} token${n === 1 ? "" : "s"}`;

  function bytes(n) {
    if (n < 1024) return `${n} B`;
    for (const unit of ["KiB", "MiB", "GiB"]) {
      n /= 1024;
      if (n < 1024 || unit === "GiB") return `${fixed(n, 1)} ${unit}`;
    }
  }

  const ms = (s) => (s == null ? "–" : `${grouped(fixed(s * 1e3, 0))} ms`);
  // a duration as run_view.format_seconds writes it: ms under a second, s under two minutes, then minutes
  const seconds = (s) => (s < 1 ? `${fixed(s * 1e3, 0)} ms` : s < 120 ? `${fixed(s, 1)} s` : `about ${fixed(s / 60, 0)} min`);
  const prob = (p) => fixed(p, 3);
  // how the prompt is read, as live/view.py prefill_words writes it (`chunk`: the engine loop's prefill chunk, or none)
  function prefill(tokens, chunk) {
    const head = `reading the prompt (prefill): ${count(tokens)} tokens`;
    if (!chunk) return `${head} in one pass…`;
    if (tokens > chunk) return `${head} in chunks of ${count(chunk)} tokens between other requests' steps…`;
    return `${head} in one chunk, when the engine's next iteration runs…`;
  }

  // Plotly reads <b>, <a href>, <br> in text as markup and decodes &amp; &lt; &gt; (not &quot;): quotes stay
  const esc = (s) => String(s).replace(/[&<>]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;"}[c]));
  const label = (shown) => esc(shown);   // the visible text (the stream's `shown`), escaped
  const candidate = (shown, id) => `${label(shown)}  (id ${id == null ? "?" : id})`;

  function chipTitle(F, rec) {
    const p = rec[F.prob], sampled = rec[F.sample_prob], kv = rec[F.kv_bytes];
    const parts = [`id ${rec[F.token_id] == null ? "?" : rec[F.token_id]}`,
      p == null ? "model p missing" : `model p=${prob(p)}`];
    if (sampled != null) parts.push(`sampled p=${prob(sampled)}`);
    if (rec[F.tokens] !== 1) parts.push(`${rec[F.tokens]} tokens in this event`);
    if (F.draft != null && rec[F.draft]) parts.push(`draft ${rec[F.draft]} (forward pass ${rec[F.forward_pass]})`);
    parts.push(`${fixed(rec[F.latency] * 1e3, 1)} ms`, kv == null ? "KV not measured" : `KV ${bytes(kv)}`);
    return parts.join(" · ");
  }

  const trimmed = (text) => (text.includes(".") ? text.replace(/\.?0+$/, "") : text);

  // Python's f"{v:g}": six significant digits, trailing zeros dropped, exponent form under 1e-4 or from 1e6
  function general(v) {
    const [mantissa, power] = v.toExponential(5).split("e"), exponent = Number(power);
    if (exponent < -4 || exponent >= 6) {
      return `${trimmed(mantissa)}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
    }
    return trimmed(fixed(v, 5 - exponent));
  }

  function timeTicks(spanMs) {   // a linear time axis from 0 over `spanMs`: values in ms, labels in s once a second
    if (!(spanMs > 0)) return {};
    const least = spanMs / 5, decade = 10 ** Math.floor(Math.log10(least));
    const step = [1, 2, 5, 10].map((m) => m * decade).find((v) => v >= least);
    const tickvals = [];
    for (let i = 0; i <= Math.ceil(spanMs / step - 1e-9); i++) tickvals.push(i * step);
    const seconds = tickvals[tickvals.length - 1] >= 1e3;
    return {tickvals, ticktext: tickvals.map((v) => (seconds ? `${general(v / 1e3)} s` : `${general(v)} ms`))};
  }

  function logMsTicks(valuesMs) {   // tick values and labels in ms for a log axis over `valuesMs`
    const positive = valuesMs.filter((v) => v > 0);
    if (!positive.length) return {};
    const low = Math.min(...positive), high = Math.max(...positive), tickvals = [];
    for (let decade = 10 ** Math.floor(Math.log10(low)); decade <= high * 10; decade *= 10) {
      for (const m of [1, 2, 5]) { const v = m * decade; if (v >= low / 2.5 && v <= high * 2.5) tickvals.push(v); }
    }
    const ticktext = tickvals.map((v) => (v >= 1e3 ? `${general(v / 1e3)} s` : `${general(v)} ms`));
    return {tickvals, ticktext};
  }

  // The metrics panel's cards from the steps so far (the stream's records, fields F) and the prices per million
  // tokens; a speculative run adds its figures so far (`speculation`: {passes, accepted}).
  function metricCards(F, steps, promptTokens, priceIn, priceOut, speculation = null) {
    const first = steps[0], last = steps[steps.length - 1], tokens = steps.reduce((n, s) => n + s[F.tokens], 0);
    const ttft = first[F.time], e2e = last[F.time], span = e2e - ttft, after = tokens - first[F.tokens];
    const tpot = after > 0 ? span / after : null, tps = after > 0 && span > 0 ? after / span : null;
    const cost = (promptTokens * priceIn + tokens * priceOut) / 1e6;
    const cards = [["prompt tokens", count(promptTokens)], ["output tokens", count(tokens)],
      ["TTFT", ms(ttft)], ["TPOT", ms(tpot)], ["decode speed", tps == null ? "–" : `${fixed(tps, 1)} tok/s`],
      ["E2E", `${fixed(e2e, 2)} s`],
      ["KV cache now (measured)", last[F.kv_bytes] == null ? "not measured by this source" : bytes(last[F.kv_bytes])],
      ["cost (estimate)", `$${fixed(cost, 6)}`]];
    if (speculation && speculation.passes) {   // acceptance and speedup come at the end (run_view.speculation_html)
      cards.push(["tokens per forward pass (so far)", fixed(tokens / speculation.passes, 2)],
                 ["drafts accepted (so far)", count(speculation.accepted)]);
    }
    return cards;
  }

  L.format = {fixed, grouped, count, tokens, bytes, ms, seconds, prob, prefill, esc, label, candidate, chipTitle, general, logMsTicks, timeTicks, metricCards};
})();
