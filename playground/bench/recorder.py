"""The JS recorder a browser run injects into the app's page: when each chip entered the DOM, and what the charts showed.

    page.evaluate(RECORDER)            # before Generate; afterwards:
    record = page.evaluate("window.pgRecord")   # {chips: {seq: ms since epoch}, samples: [{chips, timeline, ...}]}

The bench's ui row (bench/ui.py) times chips against their steps' wall-clock stamps with it, and the browser
tests (tests/ui/test_browser.py) check what the charts drew while the run streamed.
"""
from __future__ import annotations

# When each chip entered the DOM (by its data-seq), and every 50 ms how many steps each chart showed
# (live.js draws a timeline step as a segment: 2 x values).
RECORDER = """() => {
  const rec = window.pgRecord = {chips: {}, samples: []};
  new MutationObserver((changes) => {
    const now = Date.now();
    for (const change of changes) for (const node of change.addedNodes)
      if (node.dataset && node.dataset.seq !== undefined && !(node.dataset.seq in rec.chips)) rec.chips[node.dataset.seq] = now;
  }).observe(document.getElementById('pg-chips'), {childList: true});
  const points = (id, traces) => { const d = document.getElementById(id);   // drawn x values, gaps (null) left out
    return d && d.data ? traces.reduce((n, i) => n + (d.data[i] ? d.data[i].x.filter((x) => x !== null).length : 0), 0) : 0; };
  const title = (id) => { const d = document.getElementById(id); return d && d.layout && d.layout.title ? d.layout.title.text : ''; };
  setInterval(() => rec.samples.push({chips: document.querySelectorAll('#pg-chips .tok').length,
    timeline: points('pg-timeline', [1, 2]) / 2, latency: points('pg-latency', [1]), kv: points('pg-kv', [0]),
    topk: title('pg-topk'),
    running: document.querySelector('#status').innerText.includes('generating')}), 50);
}"""
