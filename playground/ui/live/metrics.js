/* metrics.js: the Generate page's metrics panel and answer text while a run streams.

The panel (#pg-live-metrics, ui/live/view.py) holds the cards run_view.metrics_html sends at the end of a
run, computed here from the steps so far (format.js metricCards) with the prices the page's inputs hold;
the answer box gets the run's text, rewritten whole, so at the charts' pace (redraw.js) rather than per step.
Left out: the figures' text (format.js) and when to draw (redraw.js). */
(function () {
  "use strict";
  const L = (window.pgLive = window.pgLive || {});
  const {metricCards} = L.format;

  const answerBox = () => document.querySelector("#answer textarea");

  function showAnswer(r) {   // the plain-text answer
    const answer = answerBox();
    if (answer && answer.value !== r.answer) answer.value = r.answer;
  }

  function price(id) {   // USD per million tokens from the page's input `id` (0 when empty or not a number)
    const v = Number((document.querySelector(`#${id} input`) || {}).value);
    return Number.isFinite(v) ? v : 0;
  }

  function drawMetrics(r) {
    showAnswer(r);
    const panel = document.getElementById("pg-live-metrics");
    if (!panel) return;
    const speculation = r.head.speculation ? {passes: r.passes, accepted: r.accepted} : null;
    const cards = metricCards(r.F, r.steps, r.head.prompt_tokens, price("price-in"), price("price-out"), speculation);
    panel.replaceChildren(...cards.map(([k, v]) => {
      const card = document.createElement("div"), key = document.createElement("div"), value = document.createElement("div");
      card.className = "card"; key.className = "label"; value.className = "value";
      key.textContent = k; value.textContent = v;
      card.append(key, value);
      return card;
    }));
  }

  // The client's side of the first token beside the server's: from this page's click to the first token shown
  // here, against the server's TTFT from the request's arrival (#pg-wait's data-ttft, run_view.metrics_html); the
  // difference is the page's own part, submit and delivery, derived (Gradio's queue and handler, the network, this
  // page). The server's
  // panel comes in the same update as the run's end, so it is looked for a few times.
  function clientSays(r, tries = 20) {
    if (r.clickedAt == null || r.firstShownAt == null || L.state() !== r) return;
    const wait = document.getElementById("pg-wait");
    if (!wait || wait.dataset.ttft == null) {
      if (tries > 0) setTimeout(() => clientSays(r, tries - 1), 100);
      return;
    }
    if (document.getElementById("pg-client-ttft")) return;
    const client = (r.firstShownAt - r.clickedAt) / 1e3, server = Number(wait.dataset.ttft);
    const line = document.createElement("span");
    line.id = "pg-client-ttft";
    line.textContent = ` In this browser: your first token showed ${L.format.seconds(client)} after your click; the `
      + `server's ${L.format.seconds(server)} above leaves ${L.format.seconds(Math.max(0, client - server))} for `
      + "submit and delivery (derived: this browser's TTFT less the server's parts; Gradio's queue, the network, "
      + "this page).";
    wait.appendChild(line);
  }

  L.metrics = {answerBox, showAnswer, drawMetrics, clientSays};
})();
