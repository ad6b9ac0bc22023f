"""One session's long-running work (an experiment, a lesson step, a Serve workload or sweep, a Generate run) in a
worker thread, followed by the page's handler: progress, cancel, cancel when the handler is closed, the poll loop.

    job = BackgroundJob()                        # kept in gr.State (each session gets a fresh copy)
    job.start(lambda job: measure(job.report, job.cancel))   # returns at once; `work(job)` runs in a thread
    yield from job.follow(draw, every=0.4)       # draw(final=False, tick) while it runs, then draw(final=True, tick)
    job.stop(wait=15)                            # Stop: cancel, wait for the worker to end

Closing the following handler (Stop cancels the Gradio event, the tab goes away) cancels the work. A page
that stops asking without closing it (its handler dropped) is noticed by `report`: after ABANDONED_AFTER
seconds without a redraw the work is cancelled. An exception in `work` becomes `error`, a line for the page. The worker runs in a copy of the starting thread's
context variables (Gradio's request, which ZeroGPU reads to know whose quota a GPU call counts against).
BackgroundRun is one too: a Run's Steps made in the worker, taken in batches by the Generate handler.

A coroutine that waits for another thread's news (the endpoint's stream of a request, the page's live channel)
follows `woken`:

    async with aclosing(woken(ticket, timeout=0.5)) as wakes:   # ticket: listen(callback) / unlisten(callback)
        async for news in wakes:   # True: read what is new (at once, then after each wake-up); False: timed out
            ...

Left out: gradio, and what is drawn (each tab's own `draw`).
"""
from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
import time
from typing import AsyncIterator, Callable, Iterator

# A page that asks for nothing for this long has gone (its handler was dropped without being closed): its work
# stops. A live page asks every few hundred milliseconds; on a loaded 2-core machine drawing and sending a frame of
# many charts has taken several seconds, so the lease is far above that.
ABANDONED_AFTER = 30.0


class BackgroundJob:
    """A worker thread with a cancel Event, its last progress (`fraction`, `message`), `result` and `error`.
    `lease`: the seconds without a redraw after which the page counts as gone."""
    lease: float | None = ABANDONED_AFTER

    def __init__(self):
        self.cancel, self.thread, self.result, self.error = threading.Event(), None, None, None
        self.fraction, self.message, self.asked, self.drawing = 0.0, "starting", time.monotonic(), False

    def __deepcopy__(self, memo):   # gr.State copies its initial value per session; an Event cannot be copied
        return type(self)()

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, work: Callable[["BackgroundJob"], object], done: Callable[[], None] | None = None,
              name: str = "job") -> None:
        """Run `work(self)` in a thread; its return value becomes `result`. `done()` runs after it, whatever happened."""
        self.cancel, self.result, self.error = threading.Event(), None, None
        self.fraction, self.message, self.asked = 0.0, "starting", time.monotonic()

        def body():
            try:
                self.result = work(self)
            except Exception as exc:   # noqa: BLE001 - shown on the page; the app keeps serving
                self.error = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            finally:
                if done is not None:
                    done()
        # the worker sees the starting handler's context variables (Gradio's request among them: ZeroGPU reads the
        # visitor from it, to count a GPU call against that visitor's quota)
        self.thread = threading.Thread(target=contextvars.copy_context().run, args=(body,), daemon=True, name=name)
        self.thread.start()

    def abandoned(self) -> bool:
        """True once the page has asked for nothing for `lease` seconds (never without a lease)."""
        return bool(self.lease) and not self.drawing and time.monotonic() - self.asked > self.lease

    def report(self, fraction: float, message: str) -> None:
        """The work's progress callback; it cancels the work once the page has stopped asking."""
        self.fraction, self.message = fraction, message
        if self.abandoned():
            self.cancel.set()   # the page stopped asking: its handler was dropped without being closed

    def follow(self, draw: Callable[[bool, int], object], every: float) -> Iterator:
        """Yield `draw(False, tick)` about every `every` seconds while the work runs, then `draw(True, tick)`.
        Closing this generator (the handler was closed) cancels the work."""
        tick = 0
        try:
            while self.running():
                self.drawing = True   # a slow draw is the page's own work, not its absence
                try:
                    frame = draw(False, tick)
                finally:
                    self.drawing, self.asked = False, time.monotonic()
                yield frame
                self.asked = time.monotonic()   # resumed: the page took the frame and asks for the next
                self.thread.join(every)
                tick += 1
        finally:
            if self.running():
                self.cancel.set()
        yield draw(True, tick)

    def stop(self, wait: float) -> bool:
        """Cancel the work and wait up to `wait` seconds for it to end; True when it has ended."""
        self.cancel.set()
        if self.thread is not None:
            self.thread.join(timeout=wait)
        return not self.running()


class BackgroundRun(BackgroundJob):
    """A Run iterated in its own thread (a BackgroundJob); the consumer takes the Steps made so far, in batches.

    A slow consumer (a page redrawing charts) then never stalls the step loop, so the time between two
    tokens measures the model, not the UI. `stop()` ends it within one step, like `Run.cancel()`.
    With `lease` (seconds), a consumer that stops asking for that long without ending the iteration
    (a handler abandoned by a closed page, never closed) is taken as gone: the run cancels itself.
    With `interval` (seconds, or a function giving them), batches come at most that often: the steps made
    meanwhile are coalesced. `on_step(step)` is called in the run's thread as each Step is made.

        for batch in BackgroundRun(engine.run(prompt, settings)):   # [Step, ...], at least one each
            draw(batch)
    """

    def __init__(self, run, lease: float | None = None, interval=0.0, on_step=None):
        super().__init__()
        self.run, self._steps, self.lease, self.on_step = run, queue.SimpleQueue(), lease, on_step
        self.interval = interval if callable(interval) else (lambda: interval)
        self._waiting = False   # is the consumer asking now?
        self._ended = threading.Event()
        self.start(BackgroundRun._work, done=self._end, name="run-steps")

    def _end(self) -> None:
        self._steps.put(None)   # None: the end
        self._ended.set()

    def _work(self) -> None:   # a failure is in the trace too (stop_reason "error")
        for step in self.run:
            if self.on_step is not None:
                self.on_step(step)
            self._steps.put(step)
            if not self._waiting and self.abandoned():
                self.run.cancel()   # nobody has asked for tokens in `lease` seconds: stop within a step

    def __iter__(self) -> Iterator[list]:
        return self.batches()

    def batches(self, idle: float | None = None) -> Iterator[list]:
        """The Steps in batches, as iterating does; with `idle` (seconds), also [] after each `idle` seconds without
        a Step (a consumer may then say why none comes: the machine held by other work).

        >>> held = threading.Event()
        >>> class Held:   # its one Step once `held` is set
        ...     def __iter__(self):
        ...         held.wait(30)
        ...         yield "step"
        >>> seen = []
        >>> for batch in BackgroundRun(Held()).batches(idle=0.05):
        ...     seen.append(batch)
        ...     held.set()
        >>> seen[0], seen[-1]
        ([], ['step'])
        """
        last = -float("inf")
        while True:
            self._waiting = True
            try:
                batch = [self._steps.get(timeout=idle)]
            except queue.Empty:
                self._waiting, self.asked = False, time.monotonic()
                yield []
                continue
            self._waiting, self.asked = False, time.monotonic()
            interval = self.interval()
            if batch[0] is not None and self.asked - last < interval:
                self._coalesce(interval - (self.asked - last))
            last = time.monotonic()
            while not self._steps.empty():
                batch.append(self._steps.get())
            ended = batch[-1] is None
            batch = [s for s in batch if s is not None]
            if batch:
                yield batch
            if ended:
                return

    def wait_ended(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the run's thread to have handed on its last Step; whether it has."""
        return self._ended.wait(timeout)

    def _coalesce(self, seconds: float) -> None:
        """Wait `seconds` for more Steps to take with the one in hand, or less: the run's end ends the wait."""
        self._ended.wait(seconds)

    def stop(self, wait: float = 0.0) -> bool:
        """Cancel the run (it ends within one step) and wait up to `wait` seconds for it; True when it ended."""
        self.run.cancel()
        return super().stop(wait)


async def woken(source, timeout: float, gap: float = 0.0) -> AsyncIterator[bool]:
    """A coroutine's wake-ups by another thread: listens to `source` (`listen(callback)` / `unlisten(callback)`,
    the callback called in the writer's thread) and yields True at once (read what is there), then True after
    each wake-up, or False after `timeout` seconds without one (time to ask whether to give up or to send a
    keep-alive). `gap`: the least seconds between two wake-ups; news meanwhile is read together. A wake-up
    between a read and the next wait is kept, never lost. Close it (contextlib.aclosing) to stop listening.

    >>> class Source:
    ...     def listen(self, callback): self.callback = callback
    ...     def unlisten(self, callback): self.callback = None
    >>> async def two(source):
    ...     said = []
    ...     async for news in woken(source, timeout=0.01):
    ...         said.append(news)
    ...         if len(said) == 1:
    ...             threading.Thread(target=source.callback).start()   # the writer's thread: news
    ...         if len(said) == 3:
    ...             return said
    >>> asyncio.run(two(Source()))
    [True, True, False]
    """
    loop, wake = asyncio.get_running_loop(), asyncio.Event()

    def poke():   # the writer's thread
        loop.call_soon_threadsafe(wake.set)
    source.listen(poke)
    try:
        while True:
            wake.clear()   # before the reader reads: a poke during its read wakes the next wait
            yield True
            if gap:
                await asyncio.sleep(gap)
            while True:
                try:
                    await asyncio.wait_for(wake.wait(), timeout)
                    break
                except asyncio.TimeoutError:
                    yield False   # a poke meanwhile stays set: the next wait ends at once
    finally:
        source.unlisten(poke)
