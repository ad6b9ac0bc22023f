"""The Lesson tab: the eight steps of playground/lesson/ for a presenter, one screen each.

Next / Previous (buttons, or the arrow keys when no text box has focus) move between steps; on a fresh
page Next runs step 1. A step runs the first time it is shown (progress on screen, Stop cancels it) and
keeps its result when the presenter comes back. `?lesson=N` in the URL opens step N; the page's
presenter mode (ui/presenter.py) enlarges everything for a projector. With the room's record of its
client traffic (the app's Room), "You are the workload" shows step 6 drawn from the room's own requests; Run again there
measures the step's own workload. Step 2's answer appears in slow
motion where the answer goes (again with "Replay slowly"), played in the page from the recorded steps:
it never slows the run. API names: /lesson_next, /lesson_prev, /lesson_run, /lesson_stop, /lesson_room.
Left out: editing the steps' budgets (the handout CLI, `python -m playground.lesson`, runs the same steps).
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import gradio as gr

from ..lesson import STEPS, Lesson
from .common import CPU_QUEUE, GENERATE_CONCURRENCY, SourceUnavailable, backend_dropdown, error_html, source
from ..jobs import BackgroundJob

FIGURE_SLOTS = 3
ROOM_STEP = 6   # the step "You are the workload" draws from the room's requests (lesson/you_are_the_workload.py)
OUTPUTS = ("title", "status", "takeaway", "notes", "body", "replay", "replay_data", "figure0", "figure1", "figure2")
KEYS_JS = """() => { if (window.__lessonKeys) return; window.__lessonKeys = true;
  document.addEventListener('keydown', (e) => {
    const t = e.target; if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.isContentEditable)) return;
    const tab = document.querySelector('#lesson-next'); if (!tab || tab.offsetParent === null) return;
    if (e.key === 'ArrowRight') document.querySelector('#lesson-next').click();
    if (e.key === 'ArrowLeft') document.querySelector('#lesson-prev').click(); }); }"""
REPLAY_JS = """() => { const data = document.querySelector('#lesson-replay-data [data-steps]');
  if (window.__lessonReplay) clearInterval(window.__lessonReplay);
  if (!data) return; const steps = JSON.parse(data.dataset.steps);
  let i = 0, box = null;
  window.__lessonReplay = setInterval(() => {
    if (!document.querySelector('#lesson-replay-data [data-steps]')) { clearInterval(window.__lessonReplay); return; }
    const now = document.querySelector('#lesson-replay');   // Gradio 6 draws it once its column shows, after this ran
    if (!now) return;
    if (now !== box) { box = now; box.textContent = ''; i = 0; }   // drawn again: the answer plays from its start
    if (i >= steps.length) { clearInterval(window.__lessonReplay); return; }
    const s = steps[i++]; const chip = document.createElement('span'); chip.className = 'tok tok-c' + (i % 6);
    chip.textContent = s.text || '∅'; chip.title = s.title; box.appendChild(chip);
    const cap = document.querySelector('#lesson-replay-caption'); if (cap) cap.textContent = s.title; }, 450); }"""


class LessonSession:
    """One browser session's lesson: which source, which step, and the running step's BackgroundJob."""

    def __init__(self):
        self.lesson, self.name, self.step, self.job = None, None, 1, BackgroundJob()
        self.started = False   # no step shown yet: Next (or Previous) then shows step 1

    def __deepcopy__(self, memo):   # gr.State copies its initial value per session: start each one fresh
        return LessonSession()

    def close(self) -> None:
        self.job.cancel.set()


def replay_html(trace) -> str:
    """Step 2's recorded tokens as escaped JSON in a data attribute, for the page's slow-motion replay."""
    from ..run_view import chip_title
    from ..tokens import visible
    steps = [{"text": visible(s.text.encode()), "title": chip_title(s)} for s in trace.steps]
    return f'<div data-steps="{html.escape(json.dumps(steps), quote=True)}"></div>'


def view(out: SimpleNamespace, session: LessonSession, result=None, status: str = "") -> dict:
    number = session.step
    update = {out.title: f"## Step {number} of {len(STEPS)} · {STEPS[number].title}", out.status: status}
    figures = list(result.figures.values())[:FIGURE_SLOTS] if result else []
    slots = {getattr(out, f"figure{i}"): gr.update(value=figures[i] if i < len(figures) else None,
                                                   visible=i < len(figures)) for i in range(FIGURE_SLOTS)}
    if result is None:
        return {**update, out.takeaway: "", out.notes: "", out.body: "", out.replay_data: "",
                out.replay: gr.update(visible=False), **slots}
    trace = session.lesson.shared.get("trace") if number == 2 else None
    # step 2's answer is the replay (its box takes the chips' place): it plays as the step is shown
    return {**update, out.takeaway: f"**{result.takeaway}**", out.notes: "\n".join(f"- ⚠️ {n}" for n in result.notes),
            out.body: "" if trace else result.html, out.replay_data: replay_html(trace) if trace else "",
            out.replay: gr.update(visible=trace is not None), **slots}


@dataclass
class LessonHandlers:
    """The Lesson tab's events, one method each: Next (`next_step`), Previous (`previous_step`), Run again
    (`run_again`), Stop (`stop`), "You are the workload" (`from_room`) and the page's load (`opened`); `backend` and
    `session` are the components keying their dict inputs. `go` and `rerun` take the backend's name and the session
    as they are. `room`: the app's Room (serve/room.py), whose traffic record step 6 may draw."""
    registry: Any
    out: SimpleNamespace
    backend: Any = "backend"
    session: Any = "session"
    room: Any = None

    def next_step(self, values: dict):
        yield from self.go(1, values[self.backend], values[self.session])

    def previous_step(self, values: dict):
        yield from self.go(-1, values[self.backend], values[self.session])

    def run_again(self, values: dict):
        yield from self.rerun(values[self.backend], values[self.session])

    def from_room(self, values: dict):
        """Step 6 drawn from the room's requests, read afresh from the record."""
        session = values[self.session]
        session.step, session.started = ROOM_STEP, True
        yield from self.go(0, values[self.backend], session, room=True)

    def opened(self, values: dict, request: gr.Request):
        """On page load: a deep link (?lesson=N) opens and runs step N; otherwise step 1 waits for Next/Run."""
        if request is None or not request.query_params.get("lesson"):
            yield view(self.out, values[self.session], status="press Next ▶ (or the → key) to start")
            return
        yield from self.go(0, values[self.backend], values[self.session], request)

    def go(self, delta, backend, session: LessonSession, request: gr.Request = None, room: bool = False):
        """Move `delta` steps (0: stay; a deep link's ?lesson=N sets the step) and show it: kept, or run now."""
        if delta == 0 and request is not None and request.query_params.get("lesson"):
            try:   # a deep link: ?lesson=N
                session.step = max(1, min(len(STEPS), int(request.query_params["lesson"])))
            except ValueError:
                pass
        if not session.started:   # a fresh page: Next shows step 1 (a deep link has set the step above)
            delta, session.started = 0, True
        session.step = max(1, min(len(STEPS), session.step + int(delta or 0)))
        backend = backend or self.registry.default   # the page-load event sends None for the dropdown, clicks its
        # name: one source, one Lesson (else a deep link's step, shown again, was re-measured from a later step's run)
        try:
            picked = source(self.registry, backend)
        except SourceUnavailable as exc:
            yield view(self.out, session, status=error_html(str(exc)))
            return
        if session.lesson is None or session.name != backend:
            session.lesson, session.name = Lesson(picked, room=self.room), backend
        if room:   # step 6 from the room's requests, read afresh from the record
            session.lesson.from_room = True
            session.lesson.results.pop(ROOM_STEP, None)
        kept = session.lesson.results.get(session.step)
        if kept is not None:
            yield view(self.out, session, kept, "kept from earlier (Run again to re-measure)")
            return
        yield from self.run_step(session)

    def run_step(self, session: LessonSession):
        session.job = job = BackgroundJob()   # this step's own (another may be running); Stop cancels the latest
        step = session.step
        job.start(lambda job: session.lesson.run(step, job.report, job.cancel), name=f"lesson-step-{step}")
        yield from job.follow(lambda final, tick: self.drawn(job, session, final), every=0.4)

    def drawn(self, job: BackgroundJob, session: LessonSession, final: bool) -> dict:
        """The step while it runs (its progress), then its result, its error, or that it was stopped."""
        if not final:
            return view(self.out, session, status=f"⏳ {job.fraction:.0%} · {html.escape(job.message)}")
        if job.error:
            return view(self.out, session, status=error_html(job.error))
        if job.result.cancelled:
            return view(self.out, session, status="stopped: run this step again to measure it")
        done = job.result
        return view(self.out, session, done, f"drawn from {done.drawn_from}" if done.drawn_from else
                    f"measured in {done.elapsed:.1f} s")

    def rerun(self, backend, session: LessonSession):
        if session.lesson is not None:
            session.lesson.results.pop(session.step, None)
            if session.step == ROOM_STEP:   # Run again measures the step's own workload
                session.lesson.from_room = False
            if session.step == 2:
                session.lesson.shared.pop("trace", None)   # steps 3 and 4 then read the new run
        yield from self.go(0, backend, session)

    def stop(self, session: LessonSession):
        session.job.cancel.set()
        return {self.out.status: "stopping…"}


def lesson_tab(registry, room) -> SimpleNamespace:
    """`room`: the app's Room (serve/room.py); its traffic record is step 6's "You are the workload" (none: no
    button)."""
    with gr.Tab("Lesson", id="lesson"):
        with gr.Row():
            prev = gr.Button("◀ Previous", elem_id="lesson-prev", size="sm")
            nxt = gr.Button("Next ▶", elem_id="lesson-next", size="sm", variant="primary")
            again = gr.Button("Run again", elem_id="lesson-run", size="sm")
            stop = gr.Button("Stop", variant="stop", elem_id="lesson-stop", size="sm")
            use_room = gr.Button("You are the workload", elem_id="lesson-room", size="sm",   # step 6 from the room
                                 visible=room.traffic is not None)
            backend = backend_dropdown(registry, elem_id="lesson-backend")
        out = SimpleNamespace(title=gr.Markdown(elem_id="lesson-title"),
                              status=gr.Markdown(elem_classes="status", elem_id="lesson-status"),
                              takeaway=gr.Markdown(elem_id="lesson-takeaway", elem_classes="lesson-takeaway"))
        with gr.Column(visible=False) as out.replay:   # step 2's answer, played token by token where it goes
            gr.HTML('<div class="tok-view out-chips lesson-replay" id="lesson-replay"></div>'
                    '<p class="caption" id="lesson-replay-caption"></p>', padding=True)
            replay = gr.Button("Replay slowly (the recorded tokens, one at a time)", size="sm", elem_id="lesson-replay-button")
        out.replay_data = gr.HTML(elem_id="lesson-replay-data", elem_classes="pg-hidden")
        # the first chart straight under the takeaway; the step's chips or sentences next, its caveats last
        out.figure0 = gr.Plot(elem_id="lesson-figure0", show_label=False, visible=False)
        out.body = gr.HTML(elem_id="lesson-body", padding=True)
        for i in range(1, FIGURE_SLOTS):
            setattr(out, f"figure{i}", gr.Plot(elem_id=f"lesson-figure{i}", show_label=False, visible=False))
        out.notes = gr.Markdown(elem_id="lesson-notes")
        session = gr.State(LessonSession(), delete_callback=LessonSession.close)   # (a State between tabs doubles
        # the next tab's button in Gradio 5.50)
    handlers = LessonHandlers(registry, out, backend, session, room)
    outputs = [getattr(out, name) for name in OUTPUTS]
    queue = dict(concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE)
    inputs = {backend, session}   # dict inputs, like every handler of the CPU queue (machine_gate.gate_cpu_events)
    steps = [nxt.click(handlers.next_step, inputs, outputs, api_name="lesson_next", **queue),
             prev.click(handlers.previous_step, inputs, outputs, api_name="lesson_prev", **queue),
             again.click(handlers.run_again, inputs, outputs, api_name="lesson_run", **queue),
             use_room.click(handlers.from_room, inputs, outputs, api_name="lesson_room", **queue)]
    stop.click(handlers.stop, session, out.status, api_name="lesson_stop", cancels=steps, concurrency_limit=None)
    replay.click(None, None, None, js=REPLAY_JS)
    out.replay_data.change(None, None, None, js=REPLAY_JS)   # step 2 shown: its answer plays
    return SimpleNamespace(opened=handlers.opened, inputs=inputs, outputs=outputs, keys_js=KEYS_JS)
