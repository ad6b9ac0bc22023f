/* stream.js: the Generate page's reader of the run's step stream; it draws the chips and the token count.

The server sends the run as lines of JSON (playground/step_stream.py): a head, one array per step (numbered),
an end line with the final figures. They come two ways. Gradio delivers the stream's text to apply()
through a JavaScript-only .change; it only grows during a run, so each call reads the lines after the
last one read: O(new steps). When the head arrives, the page also opens the live channel (an
EventSource on live/channel.py), which sends each step as the run makes it: Gradio's path adds about
100 ms (its handler coalesces, its SSE loop polls, its frontend fires .change in an animation frame)
and, while the channel reads, comes once a second as a backup. A step is drawn once, from whichever
path brings it first, in sequence order; a page whose channel is refused still gets every step.
Until the first step the status says the prompt is being read (prefill), with its tokens and the
seconds so far; then it counts the tokens. Each step becomes a chip at once (a speculative run's chips
coloured accepted / replaced / ordinary, its text set with textContent); the charts and metrics follow at
redraw.js's pace. A missing sequence number is said on the page and the stream is read again from its
start.
window.pgLive.apply(text) reads a stream, .state() is the run on screen, .stats what reading and drawing
cost (for the tests and the bench).
Left out: anything the server can tell better (the final figures come from charts/run.py). */
(function () {
  "use strict";
  const L = (window.pgLive = window.pgLive || {});
  const {chipTitle, fixed, prefill, tokens: tokenCount} = L.format;
  const PALETTE = 6;   // chip colours by position (tokens/chips.py PALETTE_SIZE)
  const GAP = new Error("gap");
  const stats = {applied: 0, channelEvents: 0, channelSteps: 0, draws: 0, drawTimes: [], drawMs: [], applyMs: [], gaps: 0,
                 resyncs: 0, cycleWallMs: [], drawErrors: 0, chartMs: {timeline: [], latency: [], kv: [], topk: []}};
  let run = null;   // the run on screen
  let follow = true, scrollQueued = false;   // the chips box follows the newest chip (addChips)

  const $ = (id) => document.getElementById(id);

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
    if (text === "" && run) { empty(); return; }   // a click refused before its run: no earlier run stays drawn
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
    const {head, headLine, clickedAt, firstShownAt} = run;
    start(head, headLine);
    Object.assign(run, {clickedAt, firstShownAt});
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
    if (run.firstShownAt == null) run.firstShownAt = Date.now();
    run.steps.push(rec);
    const chip = document.createElement("span");
    // a speculative run colours by what verification made of the token: accepted, replaced, ordinary
    const draft = F.draft == null ? null : rec[F.draft];
    chip.className = (run.head.speculation ? `tok tok-${draft || "ordinary"}` : `tok tok-c${seq % PALETTE}`)
      + (rec[F.special] ? " tok-special" : "");
    if (draft === "accepted") run.accepted++;
    if (F.forward_pass != null && rec[F.forward_pass] != null) run.passes = rec[F.forward_pass] + 1;
    chip.textContent = rec[F.shown];
    chip.title = chipTitle(F, rec);
    chip.dataset.seq = String(seq);
    fresh.appendChild(chip);
    if (!rec[F.special]) run.answer += rec[F.text];
  }

  // --- no run on screen: the view as the page first drew it (ui/live/view.py CHIPS_HTML, chart_html)

  function empty() {
    if (run.timer > 0) clearTimeout(run.timer);
    closeChannel(run);
    clearInterval(run.prefillTimer);
    run = null;
    const box = $("pg-chips");
    if (box) {
      const note = document.createElement("p");
      note.className = "tok-note";
      note.textContent = "Output tokens appear here.";
      box.replaceChildren(note);
    }
    notice("");
    const answer = L.metrics.answerBox();
    if (answer) answer.value = "";
    for (const name of L.charts.NAMES) L.charts.clear(name, "Generate to see this chart");
  }

  // --- a new run: clear what the last one drew

  function start(head, headLine) {
    if (run && run.timer > 0) clearTimeout(run.timer);
    if (run) { closeChannel(run); clearInterval(run.prefillTimer); }
    const F = Object.fromEntries(head.fields.map((name, i) => [name, i]));
    const clickedAt = L.clickedAt;   // this page's click, if it started this run (live/metrics.js clientSays)
    L.clickedAt = null;
    run = {head, headLine, F, offset: headLine.length + 1, text: "", steps: [], next: 0, answer: "",
           clickedAt, firstShownAt: null,
           accepted: 0, passes: 0,
           end: null, drawn: {}, timer: null, lastDraw: 0, follow: true, selected: 0, topkShown: null,
           finalShown: false, logAxis: false, cycles: 0, busy: 0, channel: null, prefillTimer: 0};
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
    const answer = L.metrics.answerBox();
    if (answer) answer.value = "";
    for (const name of L.charts.NAMES) L.charts.clear(name);
    const step = $("pg-step");
    if (step) { step.max = "0"; step.value = "0"; }
    openChannel(run);
    prefilling(run);
  }

  // Until the first token the status says the prompt is being read (one forward pass over all of it, or in the
  // engine loop in chunks of the head's prefill_chunk between other requests' steps: a long prompt takes seconds)
  // and for how long; then it counts the tokens (live/view.py's two statuses). Checked
  // twice a second too, so a status the server sends again (Gradio redraws it) reads right within 0.5 s.
  function prefilling(r) {
    const began = performance.now(), words = prefill(r.head.prompt_tokens || 0, r.head.prefill_chunk);
    const tick = () => {
      if (run !== r || r.end) { clearInterval(r.prefillTimer); return; }
      const phase = $("pg-phase");
      if (phase && r.next === 0) {
        phase.textContent = `${words} ${fixed((performance.now() - began) / 1e3, 0)} s so far`;
      } else if (phase) {
        counting();
        const n = $("pg-count");
        if (n && n.textContent !== soFar(r.next)) n.textContent = soFar(r.next);
      }
    };
    r.prefillTimer = setInterval(tick, 500);
  }

  function counting() {   // the status counts tokens once the first has come (whichever path brought it)
    const phase = $("pg-phase");
    if (!phase || $("pg-count") || run.next === 0 || run.end) return;
    const n = document.createElement("span");
    n.id = "pg-count";
    n.textContent = soFar(run.next);
    phase.replaceChildren("generating… ", n);
  }

  // the count as the page has it: the server's status (live/view.py's RUNNING_STATUS) carries none, so a status
  // Gradio sends again never takes it back to an older figure
  const soFar = (n) => `${tokenCount(n)} so far`;

  // --- the live channel (live/channel.py): the run's steps as they are made, beside Gradio's updates

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
    counting();
    const count = $("pg-count");
    if (count) count.textContent = soFar(run.next);
    if (run.end) {
      closeChannel(run);
      const cursor = document.querySelector("#pg-chips .cursor");
      if (cursor) cursor.remove();
      if (run.end.steps > run.next) notice(`The run ended with ${run.end.steps} steps; ${run.end.steps - run.next} never reached this page.`);
    }
    L.redraw.schedule();
  }

  Object.assign(L, {apply, stats, keep, state: () => run});
  // the client-side TTFT starts at the click on Generate: caught before Gradio's own handler (capture phase),
  // which sends the request
  document.addEventListener("click", (e) => {
    if (e.target instanceof Element && e.target.closest("#generate")) L.clickedAt = Date.now();
  }, true);

  // a stream already on the page when this script ran (it loads after Gradio has started)
  const waiting = setInterval(() => {
    const box = document.querySelector("#stream textarea");
    if (!box) return;
    clearInterval(waiting);
    if (box.value && !run) apply(box.value);
  }, 200);
})();
