/* presenter.js: presenter mode for a projector, on every tab (ui/presenter.py adds the switch).

body.present (the switch, or ?present=1 in the URL, both read here) hides the page header and the model line and sets
the page's text sizes (presenter.py's CSS). Plotly figures are drawn by Gradio's own Plotly and by
ui/live/charts.js; here every figure on the page is checked once a second while presenting, and one whose fonts
are under MIN px (titles and subtitles, ticks, axis titles, legend, annotations such as subplot titles,
value labels) gets a relayout with MIN (titles TITLE; a text with a <sup> or <sub> line more, so that
line reaches MIN too) and margins that grow to fit (automargin); a legend under the plot moves down out
of the grown axis labels' way (one held at the figure's bottom edge gets a bottom margin that holds both); the lesson's first figure (FIT) is made short enough to end inside the
window, so a step's heading, takeaway and first chart show together without scrolling. The values it
replaced are kept on the figure's div and put back when presenter mode is switched off.
The Watch view's figures (LIVE), redrawn every few seconds, get the same fonts before they are drawn (beforeDraw), and
start from the margins their last drawing grew to (keepMargins), presenting or not.
Left out: ui/live/charts.js's streaming charts size their own fonts while presenting (pgPresent.on()), so a
chart redrawn many times a second is not relaid out after each redraw. */
(function () {
  "use strict";
  const MIN = 18, TITLE = 22;
  const on = () => document.body.classList.contains("present");
  const AXIS = /^[xy]axis\d*$/;
  // the size a text needs for all of it to be at least MIN (or `size`): Plotly draws <sup> and <sub> at 70 %
  const least = (text, size = MIN) => (/<su[bp]>/i.test(text || "") ? Math.max(size, Math.ceil(MIN / 0.7)) : size);

  // the relayout (and restyle) a figure needs for presenter fonts, or null when it has them already
  function needed(gd) {
    const L = gd._fullLayout;
    if (!L || !L.font) return null;
    const lay = {}, traces = [];
    if (L.font.size < MIN) lay["font.size"] = MIN;
    let taller = 0;   // how much the title and its subtitle grow: the top margin grows with them
    if (L.title && L.title.text && L.title.font && L.title.font.size < least(L.title.text, TITLE)) {
      lay["title.font.size"] = least(L.title.text, TITLE);
      taller += lay["title.font.size"] - L.title.font.size;
    }
    const sub = L.title && L.title.subtitle;
    if (sub && sub.text && sub.font && sub.font.size < MIN) {
      lay["title.subtitle.font.size"] = MIN;
      taller += MIN - sub.font.size;
    }
    if (taller && L.margin) lay["margin.t"] = L.margin.t + Math.ceil(2 * taller);   // the title is centred in it
    if (L.legend && L.legend.font && L.legend.font.size < MIN) lay["legend.font.size"] = MIN;
    for (const key of Object.keys(L)) {
      if (!AXIS.test(key) || !L[key] || !L[key].tickfont) continue;
      const axis = L[key];
      if (axis.tickfont.size < MIN) lay[`${key}.tickfont.size`] = MIN;
      const t = axis.title;
      if (t && t.text && t.font && t.font.size < least(t.text)) lay[`${key}.title.font.size`] = least(t.text);
    }
    (L.annotations || []).forEach((a, i) => {
      if (a.font && a.font.size < least(a.text)) lay[`annotations[${i}].font.size`] = least(a.text);
    });
    const labelled = (gd._fullData || []).filter((t) => t.visible !== false && t.text != null && t.textfont);
    labelled.forEach((t) => { if ((t.textfont.size || 0) < MIN) traces.push(t.index); });
    if (labelled.length && !(L.uniformtext && L.uniformtext.minsize >= MIN)) {
      lay["uniformtext.minsize"] = MIN;   // bar labels: never shrunk below MIN to fit inside a bar
      lay["uniformtext.mode"] = "show";
    }
    if (!Object.keys(lay).length && !traces.length) return null;
    for (const key of Object.keys(L)) if (AXIS.test(key) && L[key] && L[key].tickfont) lay[`${key}.automargin`] = true;
    return {lay, traces};
  }

  function read(obj, path) {   // gd.layout's own value at "a.b[2].c" (undefined when the figure left it out)
    return path.replace(/\[(\d+)\]/g, ".$1").split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);
  }

  function enlarge(gd) {
    const want = needed(gd);
    if (!want || !window.Plotly) return;
    const kept = gd.__presentKept || {lay: {}, traces: []};
    for (const key of Object.keys(want.lay)) if (!(key in kept.lay)) kept.lay[key] = read(gd.layout, key) ?? null;
    for (const i of want.traces) if (!kept.traces.some((t) => t[0] === i)) kept.traces.push([i, read(gd.data[i] || {}, "textfont.size") ?? null]);
    gd.__presentKept = kept;
    try {
      if (want.traces.length) window.Plotly.restyle(gd, {"textfont.size": MIN}, want.traces);
      window.Plotly.relayout(gd, want.lay);
    } catch (e) { console.warn("presenter fonts", e); }   // a figure mid-redraw: tried again in a second
  }

  function restore(gd) {
    const kept = gd.__presentKept;
    if (!kept || !window.Plotly) return;
    delete gd.__presentKept;
    try {
      for (const [i, size] of kept.traces) if (gd.data[i]) window.Plotly.restyle(gd, {"textfont.size": size}, [i]);
      window.Plotly.relayout(gd, kept.lay);
    } catch (e) { console.warn("presenter fonts", e); }
  }

  // a figure that must fit in the window under what is above it (the lesson's first chart), down to FIT_MIN px
  const FIT = "#lesson-figure0 .js-plotly-plot", FIT_MIN = 230;
  function fit(gd) {
    if (!gd.matches(FIT) || !gd._fullLayout) return;
    const top = gd.getBoundingClientRect().top + window.scrollY, room = Math.floor(window.innerHeight - top - 8);
    const height = gd._fullLayout.height, want = Math.max(FIT_MIN, room);
    if (height > want + 1) {
      gd.__presentKept = gd.__presentKept || {lay: {}, traces: []};
      if (!("height" in gd.__presentKept.lay)) gd.__presentKept.lay.height = gd.layout.height ?? null;
      try { window.Plotly.relayout(gd, {height: want}); } catch (e) { console.warn("presenter fit", e); }
    }
  }

  // a legend under the plot moves down when the x axes' labels and titles, grown, reach into it; one held at the
  // figure's bottom edge (yref "container") gets a bottom margin that holds it and them
  const X_TEXT = ".xtitle, .x2title, .x3title, .xtick text, .x2tick text, .x3tick text";
  function clearLegend(gd) {
    const L = gd._fullLayout, legend = gd.querySelector(".legend");
    const bottomed = L && L.legend && L.legend.yref === "container" && L.legend.y === 0 && L.legend.yanchor === "bottom";
    if (!L || !L.legend || !(L.legend.y < 0 || bottomed) || !legend || !L._size) return;
    const top = Math.min(...[...legend.querySelectorAll(".legendtext")].map((t) => t.getBoundingClientRect().top));
    const low = Math.max(...[...gd.querySelectorAll(X_TEXT)].map((t) => t.getBoundingClientRect())
      .filter((r) => r.width).map((r) => r.bottom));
    if (!isFinite(top) || !isFinite(low) || top >= low + 2) return;
    const key = bottomed ? "margin.b" : "legend.y";
    gd.__presentKept = gd.__presentKept || {lay: {}, traces: []};
    if (!(key in gd.__presentKept.lay)) gd.__presentKept.lay[key] = read(gd.layout, key) ?? null;
    const value = bottomed ? L.margin.b + Math.ceil(low + 6 - top) : L.legend.y - (low + 6 - top) / L._size.h;
    try { window.Plotly.relayout(gd, {[key]: value}); } catch (e) { console.warn("presenter legend", e); }
  }

  // A figure Gradio redraws every few seconds (LIVE: the Serve tab's Watch view) gets its presenter fonts before it is
  // drawn: Plotly.react, wrapped, enlarges the layout it is given, so the figure is drawn once, not drawn and then
  // relaid out by the pass (two whole redraws each update). Its next update draws it as it came when presenting ends.
  const LIVE = "#serve-clients";
  function fontOf(obj, key, size) {   // obj[key].size raised to `size`; the amount it grew, where it was set smaller
    const had = obj[key] && obj[key].size;
    obj[key] = Object.assign({}, obj[key]);
    if (!(had >= size)) obj[key].size = size;
    return had && had < size ? size - had : 0;
  }
  function beforeDraw(data, layout) {
    layout.font = Object.assign({}, layout.font);
    if (!(layout.font.size >= MIN)) layout.font.size = MIN;
    let taller = 0;
    if (layout.title && typeof layout.title === "object") {
      const title = layout.title = Object.assign({}, layout.title);
      taller += fontOf(title, "font", least(title.text, TITLE));
      if (title.subtitle && title.subtitle.text) {
        title.subtitle = Object.assign({}, title.subtitle);
        taller += fontOf(title.subtitle, "font", MIN);
      }
    }
    if (taller && layout.margin && layout.margin.t != null) layout.margin = Object.assign({}, layout.margin, {t: layout.margin.t + Math.ceil(2 * taller)});
    if (layout.legend) { layout.legend = Object.assign({}, layout.legend); fontOf(layout.legend, "font", MIN); }
    for (const key of Object.keys(layout)) {
      if (!AXIS.test(key) || !layout[key]) continue;
      const axis = layout[key] = Object.assign({}, layout[key], {automargin: true});
      fontOf(axis, "tickfont", MIN);
      if (axis.title && typeof axis.title === "object") {
        axis.title = Object.assign({}, axis.title);
        fontOf(axis.title, "font", least(axis.title.text));
      }
    }
    if (layout.annotations) layout.annotations = layout.annotations.map((a) => { a = Object.assign({}, a); fontOf(a, "font", least(a.text)); return a; });
    let labelled = false;
    (data || []).forEach((t) => { if (t.text != null && t.mode !== "markers") { labelled = true; fontOf(t, "textfont", MIN); } });
    if (labelled) layout.uniformtext = {minsize: MIN, mode: "show"};
  }
  // the margins automargin grew the figure's last drawing to (its axis labels, its legend): the next drawing starts
  // from them, so Plotly draws it once instead of drawing it, growing the margins and drawing it again
  function keepMargins(gd, layout) {
    const size = gd._fullLayout && gd._fullLayout._size;
    if (!size) return;
    const margin = Object.assign({}, layout.margin);
    for (const side of ["l", "r", "t", "b"]) if (size[side] > (margin[side] || 0)) margin[side] = Math.ceil(size[side]);
    layout.margin = margin;
  }
  function wrapReact() {   // window.Plotly may be replaced (Gradio's own Plotly loads after the page's): each pass looks
    const P = window.Plotly;
    if (!P || P.__presentWrapped) return;
    const react = P.react;
    P.react = function (gd, data, layout, config) {
      if (layout && gd && gd.closest && gd.closest(LIVE)) {
        try {
          if (on()) beforeDraw(data, layout);
          keepMargins(gd, layout);
        } catch (e) { console.warn("presenter fonts", e); }
      }
      return react.apply(this, arguments);
    };
    P.__presentWrapped = true;
  }

  // the switch shows body.present: Gradio draws it unticked and may draw it again (its value is never set)
  const SWITCH = "#present input";
  function sync() {
    const box = document.querySelector(SWITCH);
    if (box && box.checked !== on()) box.checked = on();
    return box;
  }

  const plots = () => [...document.querySelectorAll(".js-plotly-plot")].filter((gd) => gd.offsetParent !== null);
  function pass() { sync(); wrapReact(); if (on()) plots().forEach((gd) => { enlarge(gd); clearLegend(gd); fit(gd); }); }
  setInterval(pass, 1000);

  function set(value) {
    document.body.classList.toggle("present", Boolean(value));
    sync();
    if (value) pass(); else document.querySelectorAll(".js-plotly-plot").forEach(restore);
    window.dispatchEvent(new Event("resize"));   // figures take the page's new width
  }

  // the switch's clicks, heard here rather than through a Gradio event: on Gradio 6.17 the page reset the
  // value a load event gave the switch (?present=1 was off again at once)
  document.addEventListener("change", (e) => { if (e.target.matches && e.target.matches(SWITCH)) set(e.target.checked); });
  // ?present=1: on from the first paint; the switch is ticked as soon as Gradio has drawn it
  if (new URLSearchParams(window.location.search).get("present") === "1") {
    const start = () => {
      set(true);
      const first = setInterval(() => { if (sync()) clearInterval(first); }, 100);
    };
    if (document.body) start(); else document.addEventListener("DOMContentLoaded", start);
  }

  window.pgPresent = {on, set, needed, least, MIN, TITLE};
})();
