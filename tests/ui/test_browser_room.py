"""Ready for a room (Chromium, tiny model): after a run on each tab, at 1400x1000 and 1024x768, no visible
text overflows its box and no Plotly title or label falls outside its figure; the console logs no error;
presenter mode (?present=1) hides the header, sets text >= 20 px and chart fonts >= 18 px, and puts a
lesson step's heading, takeaway and first chart above the fold at 1024x768, with every chart the takeaway
names (steps 4, 6, 7 and 8) and its legend whole; Next on a fresh page shows step 1."""
from __future__ import annotations

import json
import re

import pytest

from playground.lesson import STEPS
from tests.browser import generate

pytestmark = [pytest.mark.browser]

# Visible text cut by its own box (a scrolling box is fine: tables and chip views scroll) or spilling out
# of its component's box, a label squeezed onto more than two lines, and Plotly text outside its figure
# or a legend over an axis title.
# Left out: screen-reader-only text, sliders' range inputs, Gradio's 1-px copies of the tab buttons
# (measured for its overflow menu), icons (an accordion's arrow sits in its box's padding).
OVERFLOWS = """() => {
  const out = [];
  const lines = (el) => {   // how many lines the element's own text takes
    const tops = new Set();
    for (const n of el.childNodes) {
      if (n.nodeType !== 3 || !n.textContent.trim()) continue;
      const range = document.createRange();
      range.selectNodeContents(n);
      for (const r of range.getClientRects()) tops.add(Math.round(r.top));
    }
    return tops.size;
  };
  const scrolls = (el) => /(auto|scroll)/.test(getComputedStyle(el).overflowX + getComputedStyle(el).overflowY);
  for (const el of document.querySelectorAll('.gradio-container *')) {
    if (el.offsetParent === null || el.clientHeight < 4 || el.closest('svg, .sr-only, .icon')) continue;
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!(own || (el.tagName === 'INPUT' && el.type !== 'range' && el.type !== 'checkbox'))) continue;
    if (scrolls(el) || el.tagName === 'TEXTAREA') continue;
    const what = `${el.tagName}#${el.id}.${el.className} "${(el.value || el.textContent).trim().slice(0, 40)}"`;
    if (el.scrollWidth > el.clientWidth + 1) out.push(`wide ${what} ${el.scrollWidth}>${el.clientWidth}`);
    else if (el.scrollHeight > el.clientHeight + 1) out.push(`tall ${what} ${el.scrollHeight}>${el.clientHeight}`);
    const block = el.closest('.block'), r = el.getBoundingClientRect();
    let inside = el.parentElement;   // a box that scrolls between the text and its component may hold it
    while (inside && inside !== block && !scrolls(inside)) inside = inside.parentElement;
    if (block && inside === block) {
      const b = block.getBoundingClientRect(), pad = getComputedStyle(block);   // its content box
      const left = b.left + parseFloat(pad.paddingLeft), right = b.right - parseFloat(pad.paddingRight);
      if (r.left < left - 1 || r.right > right + 1) out.push(`spills ${what} ${r.left}..${r.right} outside ${left}..${right}`);
    }
    if (el.closest('label, [data-testid="block-info"]') && lines(el) > 2) out.push(`cramped ${what}: ${lines(el)} lines`);
  }
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    if (gd.offsetParent === null) continue;
    const box = gd.getBoundingClientRect();
    for (const t of gd.querySelectorAll('.gtitle, .annotation-text, .legendtext, .xtitle, .ytitle, .bartext')) {
      const r = t.getBoundingClientRect();
      if (r.width && (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1))
        out.push(`plot ${(gd.closest('[id]') || {}).id} ${t.getAttribute('class')} "${t.textContent.slice(0, 40)}"`);
    }
    for (const entry of gd.querySelectorAll('.legendtext')) {   // a legend entry drawn over an axis title
      const l = entry.getBoundingClientRect();
      for (const t of l.width ? gd.querySelectorAll('.xtitle, .ytitle') : []) {
        const r = t.getBoundingClientRect();
        if (r.width && r.left < l.right - 1 && l.left < r.right - 1 && r.top < l.bottom - 1 && l.top < r.bottom - 1)
          out.push(`plot ${(gd.closest('[id]') || {}).id} "${entry.textContent.slice(0, 30)}" over "${t.textContent.slice(0, 30)}"`);
      }
    }
    const label = gd.closest('.block') && gd.closest('.block').querySelector('[data-testid="block-label"]');
    const title = gd.querySelector('.gtitle');   // Gradio's label box floats over the figure's top-left corner
    if (label && title && label.offsetParent !== null && !label.classList.contains('sr-only')) {
      const l = label.getBoundingClientRect(), r = title.getBoundingClientRect();
      if (r.width && r.left < l.right - 1 && l.left < r.right - 1 && r.top < l.bottom - 1 && l.top < r.bottom - 1)
        out.push(`plot ${(gd.closest('[id]') || {}).id}: its label "${label.textContent.trim().slice(0, 30)}" over its title`);
    }
  }
  return out;
}"""
# The smallest font of the visible text outside charts, and of the text inside them: each text node's own
# element, so a <tspan> line drawn smaller than its <text> (a subtitle, a <sup>) is measured too
FONTS = """() => {
  const px = (el) => parseFloat(getComputedStyle(el).fontSize);
  const shown = (el) => el.offsetParent !== null && el.getBoundingClientRect().height >= 4;
  const own = (el) => [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  const body = [...document.querySelectorAll('.gradio-container *')].filter((el) => shown(el) && !el.closest('svg, .sr-only')
    && own(el));
  const small = body.filter((el) => px(el) < 20).map((el) => `${el.tagName}.${el.className} "${el.textContent.trim().slice(0, 30)}" ${px(el)}`);
  const chart = [...document.querySelectorAll('.js-plotly-plot text, .js-plotly-plot tspan')].filter((t) => own(t)
    && t.getBoundingClientRect().width && t.closest('.js-plotly-plot').offsetParent !== null);
  const tiny = chart.filter((t) => px(t) < 18).map((t) => `${(t.closest('[id]') || {}).id} "${t.textContent.slice(0, 30)}" ${px(t)}`);
  return {small: small.slice(0, 8), body: Math.min(...body.map(px)), chart: Math.min(...chart.map(px)), charts: chart.length,
          tiny: tiny.slice(0, 8)};
}"""


def open_page(browser_app, width: int, height: int, query: str = ""):
    """A new page of the app's browser at this size, logging the console's errors into page.errors."""
    first, url = browser_app
    page = first.context.browser.new_page(viewport={"width": width, "height": height})
    page.errors = []
    page.on("console", lambda message: page.errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda exc: page.errors.append(f"page error: {exc}"))
    page.goto(f"{url}{query}")
    # attached, not visible: a deep link (?lesson=2) opens another tab, which can hide Generate before this looks
    page.wait_for_selector("#generate", state="attached", timeout=60_000)
    page.wait_for_function("!document.querySelector('#model-info').innerText.includes('Loading')", timeout=120_000)
    return page


def enlarged(page, timeout_s: float = 10) -> dict:
    """The fonts (FONTS) once presenter.js's pass (once a second) has enlarged what was just drawn, measured by
    the wait itself: a chart redrawn between a wait and a second measurement shows Plotly's own 16 px until
    the next pass. On a timeout, the fonts as they are, for the caller's asserts to report."""
    ready = (f"() => {{ const f = ({FONTS})(); "
             "return f.small.length === 0 && f.tiny.length === 0 && f.body >= 20 && f.chart >= 18 ? f : null; }")
    try:
        return page.wait_for_function(ready, timeout=timeout_s * 1000).json_value()
    except Exception:   # noqa: BLE001 - playwright's TimeoutError: the caller's asserts report the fonts
        return page.evaluate(FONTS)


def settle(page, check: str, timeout_s: float = 5) -> None:
    """Wait until `check` (a function returning a list of problems) finds none; a timeout leaves the
    assertion after it to list them."""
    try:
        page.wait_for_function(f"({check})().length === 0", timeout=timeout_s * 1000)
    except Exception:   # noqa: BLE001 - playwright's TimeoutError: the caller's assert lists what is wrong
        pass


def lesson_step(page, n: int) -> None:
    page.wait_for_function(f"document.querySelector('#lesson-title').innerText.includes('Step {n} of {len(STEPS)}') && "
                           "document.querySelector('#lesson-takeaway').innerText.length > 40", timeout=120_000)


def run_tabs(page):
    """Each tab after a run: yields the tab's name once its results are drawn."""
    generate(page)
    yield "Generate"
    page.get_by_role("tab", name="Tokens").click()
    page.wait_for_selector(".tok-title", timeout=30_000)
    page.wait_for_function("(() => { const mine = document.querySelector('#tokens-prompt textarea').value;"   # its own
                           " return mine !== '' && mine === document.querySelector('#prompt textarea').value; })()",
                           timeout=10_000)   # box, in step with Generate's
    page.wait_for_function("document.querySelector('#tokens-legend').innerText.includes('a tab')", timeout=10_000)
    yield "Tokens"
    page.get_by_role("tab", name="Compare").click()
    page.locator("#compare-run").click()
    page.wait_for_function("document.querySelector('#compare-status').innerText.includes('finished')", timeout=120_000)
    yield "Compare"
    page.get_by_role("tab", name="Experiments").click()
    page.locator("#experiment-run").click()
    page.wait_for_function("document.querySelector('#experiment-status').innerText.includes('finished')",
                           timeout=120_000)
    yield "Experiments"
    page.get_by_role("tab", name="Lesson").click()
    for n in (1, 2, 3):
        page.locator("#lesson-next").click()
        lesson_step(page, n)
    yield "Lesson"
    page.get_by_role("tab", name="Serve").click()
    page.locator("#serve-requests input[type=number]").fill("4")
    page.locator("#serve-run").click()
    page.wait_for_function("(document.querySelector('#serve-status').innerText.match(/: done/g) || []).length >= 2",
                           timeout=300_000)
    yield "Serve"


@pytest.mark.parametrize("width,height,query", [(1400, 1000, ""), (1024, 768, ""), (1024, 768, "?present=1")])
def test_nothing_is_cut_off_and_the_console_stays_clean(browser_app, width, height, query):
    """Every tab after a run, at both sizes and in presenter mode (where every text is >= 20 px and every
    chart text >= 18 px too)."""
    page = open_page(browser_app, width, height, query)
    try:
        for tab in run_tabs(page):
            if query:
                fonts = enlarged(page)
                assert fonts["small"] == [] and fonts["tiny"] == [] and fonts["body"] >= 20, f"{tab}: {fonts}"
            settle(page, OVERFLOWS)   # the charts' last redraw
            assert page.evaluate(OVERFLOWS) == [], f"{tab} at {width}x{height}{query}"
        assert page.errors == []
    finally:
        page.close()


# A lesson step's first visual: its first chart, else step 2's replay of the answer, else step 1's chips
FIRST_VISUAL = """() => [document.querySelector('#lesson-figure0 .js-plotly-plot'), document.querySelector('#lesson-replay'),
  document.querySelector('#lesson-body .tok-view')].find((el) => el && el.offsetParent !== null && el.getBoundingClientRect().height > 0)"""
# The step on one screen: heading, takeaway and first visual inside the window, in that order, the page unscrolled
ON_ONE_SCREEN = f"""() => {{
  const visual = ({FIRST_VISUAL})(), box = (sel) => document.querySelector(sel).getBoundingClientRect();
  if (!visual) return false;
  const title = box('#lesson-title'), takeaway = box('#lesson-takeaway'), first = visual.getBoundingClientRect();
  return scrollY === 0 && title.top >= 0 && title.bottom <= takeaway.top && takeaway.bottom <= first.top + 1
    && first.bottom <= innerHeight;
}}"""

# The charts a step's takeaway names, by the label over each one's panel in the step's first figure: step 4's KV
# cache and its run without it, step 6's two schedulers, step 7's runs without and with the prefix cache and under a
# KV budget, step 8's conversation with the model's template and with the rewriting one (one figure, one legend: a
# chart each did not fit 1024x768, side by side their legends were cut)
NAMED = {4: ("Its size per step", "Step latency: "), 6: ("One at a time", "With continuous batching"),
         7: ("Without prefix cache", "With prefix cache", "KV budget: "),
         8: ("The model's own template", "A reasoning template")}
# Each named panel (its label, plot area, tick labels) inside the window, and the figure's legend whole: inside the
# figure and the window, clear of every panel's plot area and tick labels
NAMED_SHOWN = """(labels) => {
  const out = [], gd = document.querySelector('#lesson-figure0 .js-plotly-plot');
  if (!gd || gd.offsetParent === null || !gd._fullLayout) return ['no first figure'];
  const L = gd._fullLayout, fig = gd.getBoundingClientRect();
  const inside = (r, box) => r.top >= box.top - 1 && r.bottom <= box.bottom + 1 && r.left >= box.left - 1
    && r.right <= box.right + 1;
  const meet = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const screen = {top: 0, left: 0, bottom: innerHeight, right: innerWidth};
  const texts = [...gd.querySelectorAll('.annotation-text')];
  const taken = [];   // every named panel's plot area and tick labels: the legend stays clear of them
  const flat = (text) => (text || '').replace(/<br>/g, ' '), bare = (text) => text.replace(/\s|<br>/g, '');
  const drawn = [];   // each named panel's label as drawn: clear of the others, of the title and of every axis title
  for (const label of labels) {
    const k = L.annotations.findIndex((a) => flat(a.text).startsWith(label));
    if (k < 0) { out.push(`no panel "${label}"`); continue; }
    const x = L.annotations[k].x, xa = Object.keys(L).filter((key) => /^xaxis\d*$/.test(key)).map((key) => L[key])
      .find((axis) => axis.domain[0] <= x && x <= axis.domain[1]);
    if (!xa) { out.push(`"${label}": over no panel`); continue; }
    const ya = L[xa.anchor.replace('y', 'yaxis')];
    const area = {left: fig.left + xa._offset, right: fig.left + xa._offset + xa._length, top: fig.top + ya._offset,
                  bottom: fig.top + ya._offset + ya._length};
    const ticks = [...gd.querySelectorAll(`.${xa._id}tick text`)].map((t) => t.getBoundingClientRect())
      .filter((r) => r.width);
    const text = texts.find((t) => bare(t.textContent).startsWith(bare(label)));
    if (text) drawn.push([label, text.getBoundingClientRect()]);
    for (const [what, r] of [['its label', text && text.getBoundingClientRect()], ['its plot', area],
                             ...ticks.map((r) => ['a tick label', r])]) {
      if (!r) out.push(`"${label}": ${what} not drawn`);
      else if (!inside(r, screen)) out.push(`"${label}": ${what} ${Math.round(r.top)}..${Math.round(r.bottom)} outside the window`);
    }
    taken.push(area, ...ticks);
  }
  const others = [...gd.querySelectorAll('.gtitle, .xtitle, .ytitle, [class^="x"][class$="title"], [class^="y"][class$="title"]')]
    .map((t) => [t.textContent, t.getBoundingClientRect()]).filter(([, r]) => r.width);
  drawn.forEach(([label, r], i) => {
    for (const [what, o] of [...drawn.slice(i + 1), ...others])
      if (meet(r, o)) out.push(`"${label}" runs into "${what.slice(0, 30)}"`);
  });
  const legend = gd.querySelector('.legend .bg'), box = legend && legend.getBoundingClientRect();
  if (!box || !box.height) out.push('no legend');
  else {
    if (!inside(box, fig)) out.push(`the legend ${Math.round(box.top)}..${Math.round(box.bottom)} cut by its figure ${Math.round(fig.top)}..${Math.round(fig.bottom)}`);
    if (!inside(box, screen)) out.push(`the legend ${Math.round(box.top)}..${Math.round(box.bottom)} outside the window`);
    for (const entry of gd.querySelectorAll('.legendtext')) {
      const r = entry.getBoundingClientRect();
      if (!inside(r, box)) out.push(`legend entry "${entry.textContent.slice(0, 30)}" cut`);
      if (taken.some((t) => meet(r, t))) out.push(`legend entry "${entry.textContent.slice(0, 30)}" over a panel`);
    }
  }
  return out;
}"""


def named_charts_shown(page, n: int, tmp_path) -> None:
    """Step n's takeaway's charts (NAMED) and their legend, whole, inside the window: waited for (presenter.js fits
    and enlarges once a second), then asserted with a screenshot to look at."""
    check = f"() => ({NAMED_SHOWN})({json.dumps(NAMED[n])})"
    settle(page, check, timeout_s=10)
    page.screenshot(path=str(tmp_path / f"lesson-step{n}-charts-1024x768.png"))
    assert page.evaluate(check) == [], f"step {n}'s charts ({tmp_path})"


WHERE = f"""() => ({{bottoms: [document.querySelector('#lesson-title'), document.querySelector('#lesson-takeaway'),
  ({FIRST_VISUAL})()].map((el) => el && Math.round(el.getBoundingClientRect().bottom)), scrollY, innerHeight}})"""


def test_presenter_mode_fits_every_lesson_step_in_1024x768(browser_app, tmp_path):
    """The lesson walked from a fresh page with Next, as a room sees it: each of the eight steps shows its
    heading, takeaway and first chart (steps 1 and 2: chips, the replayed answer) without scrolling, in
    text >= 20 px and chart text >= 18 px."""
    page = open_page(browser_app, 1024, 768, "?present=1")
    try:
        page.wait_for_function("document.body.classList.contains('present')", timeout=10_000)
        page.locator("#page-header").wait_for(state="hidden", timeout=10_000)
        page.locator("#model-info").wait_for(state="hidden", timeout=10_000)
        page.get_by_role("tab", name="Lesson").click()
        for n in STEPS:   # on a fresh page Next shows step 1, not step 2
            page.locator("#lesson-next").click()
            lesson_step(page, n)
            try:
                page.wait_for_function(ON_ONE_SCREEN, timeout=10_000)   # presenter.js fits the chart within a second
            except Exception:   # noqa: BLE001 - playwright's TimeoutError: the assert below says where things are
                pass
            page.screenshot(path=str(tmp_path / f"lesson-step{n}-presenter-1024x768.png"))
            if n in (7, 8):   # on torch steps 7 and 8 say what is missing, with no chart (on ONNX: the tests after this)
                assert page.evaluate(WHERE)["bottoms"][1] <= 768 and not page.evaluate(FIRST_VISUAL)
            else:
                assert page.evaluate(ON_ONE_SCREEN), f"step {n} is not on one screen: {page.evaluate(WHERE)} ({tmp_path})"
            if n in (4, 6):
                named_charts_shown(page, n, tmp_path)
            fonts = enlarged(page)
            assert fonts["small"] == [] and fonts["body"] >= 20, f"step {n}: {fonts}"
            assert fonts["tiny"] == [] and (n < 3 or fonts["chart"] >= 18), f"step {n}: {fonts}"
            assert "est_cost_usd" not in page.locator("body").inner_text()   # words, never a result's raw key
        assert page.locator("#lesson-figure0 .js-plotly-plot").count() == 0   # step 8 on torch: none, it says why
        page.get_by_role("tab", name="Generate").click()   # a tab drawn by ui/live/*.js, in presenter mode too
        generate(page)
        fonts = enlarged(page)
        assert fonts["small"] == [] and fonts["charts"] > 0 and fonts["chart"] >= 18
        page.locator("#present input").uncheck()   # off again: the header is back
        page.locator("#page-header").wait_for(state="visible", timeout=10_000)
        assert page.errors == []
    finally:
        page.close()


@pytest.fixture(scope="module")
def onnx_app(browser_app, tiny_engine, tiny_onnx_engine):
    """(page, url): browser_app's Chromium on an app over the tiny model on ONNX Runtime (our batching: step 7's
    runs) and on torch."""
    from playground.registry import SourceRegistry
    from playground.ui import build_demo
    from tests.browser import launch
    sources = {"onnx": tiny_onnx_engine, "torch": tiny_engine}
    demo = build_demo(SourceRegistry(lambda name, progress: sources[name], list(sources), default="onnx"))
    yield browser_app[0], launch(demo)
    demo.close()


def test_presenter_mode_shows_every_chart_step_seven_names_on_our_batching(onnx_app, tmp_path):
    """Step 7 on our batching at 1024x768, opened by a deep link: its takeaway names the runs without and with the
    prefix cache and the run under a KV budget; all three, their labels and ticks, and their one legend, whole, show
    under the takeaway without scrolling."""
    page = open_page(onnx_app, 1024, 768, "?present=1&lesson=7")
    try:
        lesson_step(page, 7)
        page.wait_for_function("document.querySelector('#lesson-takeaway').innerText.includes('preemption')",
                               timeout=120_000)
        takeaway = page.locator("#lesson-takeaway").inner_text()
        assert "Caching a shared " in takeaway and "KV positions needed" in takeaway
        named_charts_shown(page, 7, tmp_path)
        assert page.evaluate(ON_ONE_SCREEN), page.evaluate(WHERE)
        fonts = enlarged(page)
        assert fonts["tiny"] == [] and fonts["chart"] >= 18, fonts
        assert page.errors == []
    finally:
        page.close()


def test_presenter_mode_shows_both_ribbons_step_eight_names_on_our_batching(onnx_app, tmp_path):
    """Step 8 on our batching at 1024x768, opened by a deep link: its takeaway names the cached share with the model's
    template and with the rewriting one, and the miss; both runs' ribbons, their labels and ticks, and their one
    legend, whole, show under the takeaway without scrolling, in text >= 20 px and chart text >= 18 px."""
    page = open_page(onnx_app, 1024, 768, "?present=1&lesson=8")
    try:
        lesson_step(page, 8)
        page.wait_for_function("document.querySelector('#lesson-takeaway').innerText.includes('template rewrite')",
                               timeout=120_000)
        takeaway = page.locator("#lesson-takeaway").inner_text()
        assert re.search(r"Turns 2–4 found \d+% of their prompt tokens in the cache", takeaway), takeaway
        named_charts_shown(page, 8, tmp_path)
        page.screenshot(path=str(tmp_path / "lesson-step8-presenter-1024x768.png"))
        assert page.evaluate(ON_ONE_SCREEN), f"step 8 is not on one screen: {page.evaluate(WHERE)} ({tmp_path})"
        fonts = enlarged(page)
        assert fonts["small"] == [] and fonts["body"] >= 20 and fonts["tiny"] == [] and fonts["chart"] >= 18, fonts
        settle(page, OVERFLOWS)
        assert page.evaluate(OVERFLOWS) == [] and page.errors == []
    finally:
        page.close()


WORDS = "capital of France is Paris, a city on the Seine known for its museums, cafés and the Eiffel Tower".split()


@pytest.mark.parametrize("answer_tokens", [3, 24])
def test_step_two_chart_fits_and_labels_what_its_takeaway_names(browser_app, tiny_engine, monkeypatch, answer_tokens):
    """A projector at 1024x768 opened on ?present=1&lesson=2: the top-k chart ends inside the window, and each
    token the takeaway quotes (“The” 15% and “L” 14%) labels a bar of it on the screen. Step 2's run is one
    that hesitates among ten candidates as SmolLM2's does (the tiny model's answer is newlines); with 24 tokens
    of words, its answer's chips and takeaway as long as SmolLM2's (the chart then ended at 778 px)."""
    from dataclasses import replace

    from playground.config import GenerationSettings
    from playground.lesson import steps_run
    from tests.helpers import FRANCE, doubtful_trace
    trace = doubtful_trace(tiny_engine)
    if answer_tokens > len(trace.steps):   # the same first step, then words
        longer = tiny_engine.generate(FRANCE, GenerationSettings(max_new_tokens=answer_tokens))
        rest = [replace(s, text=f" {WORDS[k % len(WORDS)]}", top=None, special=False)
                for k, s in enumerate(longer.steps[1:])]
        first = replace(longer.steps[0], **{k: getattr(trace.steps[0], k) for k in ("token_id", "text", "prob", "top")})
        trace = replace(longer, steps=[first, *rest])
        assert len(trace.steps) == answer_tokens
    monkeypatch.setattr(steps_run, "answer_run", lambda lesson, report: lesson.shared.setdefault("trace", trace))
    page = open_page(browser_app, 1024, 768, "?present=1&lesson=2")
    try:
        lesson_step(page, 2)
        chart = "#lesson-figure0 .js-plotly-plot"
        page.wait_for_selector(chart, timeout=30_000)
        inside = f"document.querySelector('{chart}').getBoundingClientRect().bottom <= innerHeight"
        try:
            page.wait_for_function(inside, timeout=10_000)   # presenter.js fits it within a second
        except Exception:   # noqa: BLE001 - playwright's TimeoutError: the assert below says where it ends
            pass
        where = page.evaluate(f"[document.querySelector('{chart}').getBoundingClientRect().bottom, innerHeight]")
        assert where[0] <= where[1], where
        takeaway = page.locator("#lesson-takeaway").inner_text()
        names = re.findall(r"“([^”]*)”", takeaway)
        labels = page.eval_on_selector_all(f"{chart} .ytick text", "els => els.map((e) => e.textContent)")
        shown = [label.split("  (id ")[0].strip() for label in labels]
        assert len(names) == 2 and all(name.strip() in shown for name in names), (takeaway, labels)
        assert page.errors == []
    finally:
        page.close()


def test_three_runs_in_one_page_log_no_error(browser_app):
    """Each run replaces the live charts' traces; a third run in the same page once logged 'live chart 0
    Error: indices must be valid indices for gd.data' dozens of times."""
    page = open_page(browser_app, 1400, 1000)
    try:
        for _ in range(3):
            generate(page)
            page.wait_for_function("document.querySelectorAll('#chips .tok').length > 0", timeout=30_000)
        assert page.errors == []
    finally:
        page.close()
