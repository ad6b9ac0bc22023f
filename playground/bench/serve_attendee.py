"""The room row's attendee: one person who presses the Serve tab's Run while the room's people press theirs.

    client = attendee_client(app_url)      # Gradio's own client, opened before the press (as a page is)
    seconds, status = press_run(client)    # Run, the Serve tab's default workload on "this app's endpoint"

What the attendee runs is what the Serve tab offers them with the room served and no presenter key: the tab's default
workload (16 requests, Poisson arrivals at 2 a second, 80 % long-answer questions and 20 % documents to summarize,
64 new tokens each, seed 0) on the source "this app's endpoint" with the concurrent scheduler and no B. Such a run takes
nothing alone (Room.alone_refused: only the presenter's run may): its requests join the room's engine loop as one more
client of the endpoint, taking turns with the others. A run on the app's own engine would be refused at once, and the
presenter's would hold the machine alone (every other request told to wait: a 429 or the stream's wait event) — neither
is an attendee's load on the room. attendees.py's `attendee` path measures the others beside this run.

Left out: the attendee's own figures (the Serve tab draws them; they are shared ones).
"""
from __future__ import annotations

import html
import time

SELF_SOURCE = "this app's endpoint"   # app.py's SELF_SOURCE: the Serve tab's source that joins the room's loop


def attendee_form(requests: int = 16):
    """The Serve tab's default form with A "concurrent" on this app's endpoint, B none, no presenter key (`requests`:
    the workload's, 16 by default as on the tab)."""
    from ..prompts import LONG_ANSWER_QUESTION, SUMMARIZE_INSTRUCTION, long_document
    from ..serve.batching import BatchConfig
    from ..ui.serve_layout import DEFAULT_RATE, NEW_TOKENS, NONE, ServeForm
    return ServeForm(n=requests, arrival="poisson", rate=DEFAULT_RATE, seed=0, short_prompt=LONG_ANSWER_QUESTION,
                     short_tokens=NEW_TOKENS, short_share=0.8, long_prompt=SUMMARIZE_INSTRUCTION + long_document(),
                     long_tokens=NEW_TOKENS, long_share=0.2, scheduler_a="concurrent", source_a=SELF_SOURCE,
                     scheduler_b=NONE, source_b=SELF_SOURCE, slots=BatchConfig.slots, chunk=BatchConfig.prefill_chunk,
                     max_batch_tokens=256, blocks=0, manager="fifo")


def attendee_client(url: str):
    from gradio_client import Client
    return Client(url, verbose=False)


def press_run(client, requests: int = 16, timeout_s: float = 600.0) -> tuple[float, str]:
    """Press Run (/serve) with attendee_form(`requests`) and wait for its end: (seconds from the press, the status's
    first line; an exception's name and message when the call failed)."""
    from ..ui.forms import api_args
    from ..ui.serve_views import OUTPUTS
    pressed = time.perf_counter()
    try:
        out = client.submit(*api_args(attendee_form(requests)), api_name="/serve").result(timeout=timeout_s)
        status = html.unescape(str(out[OUTPUTS.index("status")]).strip().splitlines()[0])[:240]
    except Exception as exc:   # noqa: BLE001 - the row records why the attendee's run failed; the room goes on
        status = f"{type(exc).__name__}: {exc}"[:200]
    return time.perf_counter() - pressed, status
