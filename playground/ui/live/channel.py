"""The live channel: a page reads its run's step stream as each step is made, beside Gradio's updates.

    GET /playground/live/<run id>        text/event-stream, one event per wake-up: its data lines are
                                         stream lines (step_stream.py): steps, then the end line; then it closes

Gradio's own path to the page adds about 100 ms to every update (the handler's coalescing, the SSE
loop polling its queue every 50 ms, the frontend firing .change in an animation frame), so a chip
could not be on screen within 100 ms of its step. This route is an ordinary FastAPI route of the same
app (`demo.launch(app_kwargs=app_kwargs())`): the run's thread appends each step to the StepStream and
wakes the route's coroutine, which writes the new lines at once. The page (live/stream.js) opens it when a
run's head arrives through Gradio and keeps reading Gradio's updates too (one every WATCHED_INTERVAL
while the channel is open): a step comes by whichever path is first, by sequence number, so a page
whose channel is blocked (a proxy) or cut still gets every step. Each event's `id` is the next step's
number: a reconnecting EventSource resumes where it stopped (Last-Event-ID).

The run id is the stream's random 122-bit id, known only to the page that started the run (it comes
in that session's Gradio update); an unknown or finished-and-forgotten id gets 204, which tells an
EventSource not to reconnect; more than MAX_READERS at once get 429.

Left out: any way to start or stop a run (Gradio's events do that) and anything but the step stream.
"""
from __future__ import annotations

from contextlib import aclosing

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from fastapi.routing import APIRoute

from ...jobs import woken
from ...step_stream import StepStream

PATH = "/playground/live/{run_id}"
KEEPALIVE_S = 15.0   # a comment line this often while no step comes, so proxies keep the connection
MAX_READERS = 4      # per run: a page needs one (two while EventSource reconnects)
MIN_GAP_S = 0.02     # at most 50 events a second: a fast model's steps are coalesced, a page is never flooded


def event(text: str, next_seq: int) -> str:
    """One SSE event carrying stream lines.

    >>> event('[0, 7]\\n[1, 8]\\n', 2)
    'id: 2\\ndata: [0, 7]\\ndata: [1, 8]\\n\\n'
    """
    return f"id: {next_seq}\n" + "".join(f"data: {line}\n" for line in text.splitlines()) + "\n"


async def _events(stream: StepStream, seq: int, request: Request):
    async with aclosing(woken(stream, KEEPALIVE_S, gap=MIN_GAP_S)) as wakes:
        async for news in wakes:
            if not news:
                if await request.is_disconnected():
                    return
                yield ": keep-alive\n\n"
                continue
            text, packed, ended = stream.since(seq)
            if text:
                yield event(text, packed)
                seq = packed
            if ended:
                return


async def live_stream(run_id: str, request: Request):
    stream = StepStream.find(run_id)
    if stream is None:
        return Response(status_code=204)
    resumed = request.headers.get("last-event-id")
    try:
        seq = max(0, int(resumed or request.query_params.get("from") or 0))
    except ValueError:
        seq = 0
    if resumed and stream.ended and seq >= stream.packed:
        return Response(status_code=204)   # a reader that had everything reconnected: nothing more will come
    if stream.readers >= MAX_READERS:
        return Response("too many readers of this run", status_code=429)
    return StreamingResponse(_events(stream, seq, request), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def app_kwargs() -> dict:
    """What `demo.launch(app_kwargs=…)` needs: the live channel's route, ahead of Gradio's."""
    return {"routes": [APIRoute(PATH, live_stream, methods=["GET"], include_in_schema=False)]}
