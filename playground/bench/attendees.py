"""`make bench`'s room row (named `room`, as the app's Room it measures): N attendees at the same moment, through the
page, the endpoint, both, and llama-server.

    python -m playground.bench room                       # 24 people, 48 new tokens each, the bundled model
    python -m playground.bench room --people 30           # a bigger room
    python -m playground.bench room --limits in_flight=64 # the endpoint's limits raised (PLAYGROUND_API_LIMITS)
    python -m playground.bench room --model tiny --people 3 --tokens 4   # the tiny test model (what the suite runs)
    python -m playground.bench room --rounds 1            # one round of each path (default 3, interleaved)

The app (app.py, `--openai-api`, on the batching backend: onnx-gguf4 on the bundled model) runs in a subprocess on
127.0.0.1 with the app's default limits (unless --limits) and one API key per person (PLAYGROUND_API_KEYS: N keys,
so each person is one client to the limits). Each person is a thread of this process; all wait at one barrier
and press at the same moment. Four paths, one after another:

    page        N people press Generate: the page's /generate through Gradio's own HTTP API (POST
                /gradio_api/call/generate, then its event stream; each person a Gradio session of their own,
                opened by the warm-up press as a browser opens it when the page loads), with httpx, greedy, N new
                tokens at most (the page has no ignore_eos: a run may end at EOS, and its tokens
                are counted as streamed)
    endpoint    the same N through the app's OpenAI-compatible /v1/chat/completions, streamed, one key each,
                EOS ignored
    mixed       half of them through the page and half through the endpoint, at once
    attendee    the mixed room again, and at the same moment one more person, an attendee, presses the Serve tab's
                Run: its default workload (16 requests, Poisson at 2 a second; `--attendee-requests`) on "this app's
                endpoint", the run an attendee may start in a served room (serve_attendee.py: it joins the engine
                loop as one more client). Its figures are the others', the N people's; the attendee's own run is
                kept beside them (`attendee_runs`: its seconds and status line)
    browser     the page as a browser reads it: BROWSER_PAGES (6, `--browser-pages`) of the N are Chromium pages,
                timed in the page from the click to the first chip drawn (the Steps its live channel brings) and to
                the run's final update drawn; the rest of the room presses Generate through Gradio's HTTP API (as
                `page`), all at one moment. Its figures are the Chromium pages' (room_browser.py; skipped without
                Chromium and Playwright, or with --no-browser). A room's browsers run on the attendees' own machines;
                here they share the server's 2 cores, so only a few are Chromium, opened for this path alone (an idle
                page still takes ~3 % of a core, which would weigh on every other path)
    llama-server  the same N through llama.cpp's `llama-server --parallel N` on the bundled GGUF, with the same
                threads (`-t`), N slots of SLOT_CONTEXT positions, EOS ignored; the app is stopped first

The paths run in rounds (ROUNDS, `--rounds`): page, endpoint, mixed, attendee, browser, then again, on one app
process (the mixed room without the attendee and with it interleaved, round by round); then
llama-server as many times. A path's timings are the medians of its rounds (merge_rounds; each round's are kept):
one room's last done varies by a tenth from one run to the next on a quiet 2-core machine, more than the
targets' margins. Every person asks its own question (QUESTIONS, tagged with the path, the round and the person,
so no path or round finds another's prompt in a prefix cache; the chat template's head is the room's to share). Per path: served (a first token
came, n of N; the others' HTTP statuses or errors counted), TTFT p50 / p95 over the served (nearest rank),
from the press to the first token as the client sees it (the wait for a slot included: for the page, the first
streamed update whose `stream` holds a Step; for an endpoint, the first chunk with content), the last done (from
the first press to the last answer's end), the output tokens and output tokens per second of that wall. For
the page, the server's own `queued` (its wait for a KV slot, from each run's trace.json), the most requests a
Step of its runs shared (`rows`), and its TTFT in parts (ttft_parts: submit, queued, first token, delivery; the
medians, and the parts of the person at the p95 rank): where a page's first token spends what an endpoint's does
not. The ratios the issue's "Done when" names:

    page_vs_endpoint_ttft_p95, page_vs_endpoint_last_done      page / endpoint          (target <= 1.15)
    mixed_vs_endpoint_ttft_p95, mixed_vs_endpoint_last_done    mixed / endpoint         (target <= 1.15)
    browser_vs_endpoint_ttft_p95, browser_vs_endpoint_last_done  browser / endpoint     (target <= 1.25)
    attendee_vs_mixed_ttft_p95                                 the others beside the attendee's run / the mixed room
                                                               without it, each the median of its rounds (<= 1.25)
    endpoint_vs_llama_ttft_p95                                 endpoint / llama-server  (target <= 1.0)
    endpoint_vs_llama_tps                                      output tok/s, endpoint / llama-server (>= 2.0)
    served_share_min                                           the fewest served of N on any path (>= 1)

A path that refused some of the room (the endpoint's in-flight limit: 429) served fewer people, so its TTFT and
last done are a smaller room's: the ratios to it compare like with like only where served_share_min is 1.

Each path records its load (quiet.LoadWindow, the app's or llama-server's CPU counted as the bench's own); the
two ratios to llama-server are printed only from a quiet machine (quiet.validity over both windows, as every
ratio to llama.cpp), the others whatever the load, with it beside them.

The page is measured twice. `page` is its /generate event through Gradio's own HTTP API, read as the bytes arrive
(httpx), each person with a client of its own opened before the press (as a browser tab or an SDK client is); a page
person parses Gradio's updates only until its first Step, then only the last (Gradio's /call sends each update
whole). Not gradio_client: its own work per request is the client's, not the page's, and 24 of them in one process on
2 cores start their runs up to a second late (a handler that only yields: 24 gradio_client submits reached it
0.2-1.0 s after the press, 24 httpx calls 0.08-0.09 s). `browser` is what a person at the page sees (GRADIO_NOTE
says why the two differ); the target holds on it. Its Chromium runs on the app's machine, beside the server.
Left out: people on other machines (loopback only), and which Steps carried requests of both kinds in the mixed room
(the server's record has it, the clients do not).
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace

from ..chromium import chromium_path
from ..metrics import NEAREST_RANK, percentile
from .quiet import LoadWindow, cpu_flags, gated, validity
from .room_browser import BrowserRoom
from .rows import Row, parser, say_timed
from .serve_attendee import attendee_client
from .stats import median, ratio, rounded, targets_met, targets_text


@dataclass(frozen=True, kw_only=True)
class RoomRow(Row):
    """N people at the same moment through the page, the endpoint, half and half, and llama-server (room.room_row).
    Each path's dict: served, people, statuses, ttft_p50_s, ttft_p95_s, last_done_s, output_tokens, output_tps,
    prompt_tokens_p50, load, validity; the page's (and the mixed room's) also server_queued_p50_s,
    server_queued_p95_s, max_rows."""

    bench: str = field(default="room", init=False)
    backend: str                          # the app's batching backend
    model: str
    people: int
    new_tokens: int                       # each person's budget (EOS ignored but on the page)
    threads: int                          # the app's ONNX Runtime threads, llama-server's -t
    rounds: int                           # rounds of every path, interleaved; a path's timings are their medians
    api_keys: int                         # one a person
    limits: dict                          # the endpoint's limits and KV slots as the app reads them
    page: dict
    endpoint: dict
    mixed: dict                           # with page_people and endpoint_people
    attendee: dict                        # the mixed room beside an attendee's Serve run: the others' figures
    browser: dict                         # the page in Chromium: click to first chip drawn; or why it was skipped
    note: str                             # how the page's two figures differ (GRADIO_NOTE)
    llama_server: dict                    # its path's figures with parallel, slot_context, configuration; or why not
    ratios: dict[str, float | None]       # the "Done when" ratios (room.TARGETS)
    llama_validity: dict | None           # quiet.validity of the two ratios to llama-server (null when not valid)
    cpu_flags: dict[str, bool] | None
    targets: dict[str, str]
    targets_met: dict[str, bool | None]


PEOPLE = 24
BROWSER_PAGES = 6   # the browser path's Chromium pages (the rest of its room presses through Gradio's HTTP API)
ROUNDS = 3   # rounds of every path, interleaved: one room's figures vary by a tenth from one run to the next
NEW_TOKENS = 48
SLOT_CONTEXT = 512      # llama-server's positions a slot: the chat prompt and its answer, with room to spare
PRICES = (0.15, 0.6)    # /generate's price inputs (figures for the page's estimate only)
TIMEOUT_S = 600.0       # one person's wait for the end of its answer, at most
TOPICS = ("the sea", "a lighthouse", "a train journey", "the moon", "a small bakery", "a mountain village",
          "a lost key", "the first snow", "a library at night", "a robot gardener", "a river", "an old map",
          "a storm at sea", "a violin maker", "the desert", "a city in the rain", "a lonely satellite", "an orchard",
          "a chess game", "a bridge", "a kite", "a volcano", "a clock tower", "a fox in winter", "a paper boat",
          "a forgotten song", "the northern lights", "a market day", "a beekeeper", "a tide pool")
TARGETS = {"page_vs_endpoint_ttft_p95": ("<=", 1.15), "page_vs_endpoint_last_done": ("<=", 1.15),
           "mixed_vs_endpoint_ttft_p95": ("<=", 1.15), "mixed_vs_endpoint_last_done": ("<=", 1.15),
           "browser_vs_endpoint_ttft_p95": ("<=", 1.25), "browser_vs_endpoint_last_done": ("<=", 1.25),
           "attendee_vs_mixed_ttft_p95": ("<=", 1.25),
           "endpoint_vs_llama_ttft_p95": ("<=", 1.0), "endpoint_vs_llama_tps": (">=", 2.0),
           "served_share_min": (">=", 1.0)}
LLAMA_RATIOS = ("endpoint_vs_llama_ttft_p95", "endpoint_vs_llama_tps")
ATTENDEE_REQUESTS = 16   # the Serve tab's default workload
GRADIO_NOTE = ("page: the /generate event through Gradio's HTTP API, its first update holding a Step; every update "
               "goes through Gradio's queue whole (the stream so far, each time), at the handler's pace in a busy loop "
               "(n x 50 ms beside n requests, the first Step never held back): ttft_parts splits it into submit, "
               "queued, first_token and delivery. browser: the page in Chromium, click to first chip drawn; its chips "
               "come through the live channel as each Step is made, not through Gradio's updates, so the browser's "
               "figure is the one a person waits on, and the target holds on it. The Chromium pages run on the "
               "app's cores.")


def question(path: str, person: int, round_: int = 0) -> str:
    """Person `person`'s question on `path` in round `round_` (from 0): a story long enough to run to the budget,
    tagged so no path's or round's prompt is another's.

    >>> question("endpoint", 0)
    'Room endpoint, person 01: write a long story about the sea.'
    >>> question("page", 1, round_=1)
    'Room page, round 2, person 02: write a long story about a lighthouse.'
    """
    where = path if round_ == 0 else f"{path}, round {round_ + 1}"
    return f"Room {where}, person {person + 1:02d}: write a long story about {TOPICS[person % len(TOPICS)]}."


@dataclass
class Answer:
    """One person's request as the client saw it: times in seconds from its own press (perf_counter)."""
    pressed: float                 # perf_counter at the press
    ttft: float | None = None      # to the first token; None: none came
    done: float | None = None      # to the answer's end (or its failure)
    tokens: int = 0                # output tokens
    status: str = "200"            # the HTTP status, or the error's name
    prompt_tokens: int | None = None
    queued: float | None = None    # the page: the server's wait for a KV slot (trace.json)
    rows: int | None = None        # the page: the most requests one of its Steps carried
    trace_url: str | None = None   # the page: its run's trace.json on the app
    pressed_wall: float = 0.0      # time.time() at the press (the server's Steps carry the same clock)
    parts: dict | None = None      # the page: its TTFT in parts (ttft_parts)

    @property
    def served(self) -> bool:
        return self.ttft is not None and self.tokens > 0


# --- the people

def sse_events(lines):
    """(event, data) pairs of a server-sent event stream's lines (Gradio's /call stream: `event:` then `data:`).

    >>> list(sse_events(["event: generating", 'data: ["a"]', "", "event: complete", 'data: ["b"]', ""]))
    [('generating', '["a"]'), ('complete', '["b"]')]
    """
    event = None
    for line in lines:
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:") and event is not None:
            yield event, line[5:].strip()
            event = None


def page_person(base_url: str, backend: str, prompt: str, tokens: int, session: str | None = None):
    """A person pressing Generate on the page: the page's /generate through Gradio's own HTTP API (POST
    /gradio_api/call/generate, then its event stream), with httpx as the endpoint's people use it. `session`: the
    person's Gradio session (its session_hash), kept from one press to the next as a browser tab keeps it; None: a
    session of its own for this press."""
    def press(http) -> Answer:
        import httpx

        from ..step_stream import read_stream
        answer = Answer(time.perf_counter(), pressed_wall=time.time())
        # every input of the event, as the page sends them: the session's State (Gradio keeps its value), the
        # prompt, temperature 0, top k, top p, seed, new tokens, chat, the prices, the backend, speculation off
        data = [None, prompt, 0.0, 0, 1.0, "", tokens, True, *PRICES, backend, False, 4, 3]
        result, failed = None, None
        try:
            r = http.post(f"{base_url}gradio_api/call/generate", json={"data": data, "session_hash": session})
            r.raise_for_status()
            event_id = r.json()["event_id"]
            with http.stream("GET", f"{base_url}gradio_api/call/generate/{event_id}") as stream:
                for event, payload in sse_events(stream.iter_lines()):
                    if event == "error":
                        failed = f"error: {payload[:120]}"
                        break
                    if event == "complete":
                        result = json.loads(payload)
                        break
                    # an update after the first Step is read only when it is the last (Gradio's /call sends each
                    # whole: parsing every one would count the client's work as the page's)
                    if event == "generating" and answer.ttft is None:
                        out = json.loads(payload)
                        if out and isinstance(out[0], str) and read_stream(out[0])[1]:
                            answer.ttft = time.perf_counter() - answer.pressed   # the first Step on the page
        except (httpx.HTTPError, ValueError, KeyError) as exc:   # a refused or failed run is counted, not raised
            failed = type(exc).__name__
        answer.done = time.perf_counter() - answer.pressed
        if result is None:
            answer.status = failed or "no answer"
            return answer
        stream = result[0] if result and isinstance(result[0], str) else ""
        head, steps, _ = read_stream(stream) if stream else ({}, [], None)
        answer.tokens, answer.prompt_tokens = len(steps), head.get("prompt_tokens")
        if answer.ttft is None and steps:   # every Step came in the final update
            answer.ttft = answer.done
        answer.status = "200" if steps else "no tokens: " + str(result[1])[:120]
        answer.trace_url = next((f.get("url") for f in (result[4] or []) if isinstance(f, dict)
                                 and str(f.get("url", "")).endswith("trace.json")), None)
        return answer
    return press


def openai_person(base_url: str, key: str | None, prompt: str, tokens: int):
    """A person asking an OpenAI-compatible server (/v1/chat/completions, streamed, EOS ignored)."""
    def press(http) -> Answer:
        import httpx
        answer = Answer(time.perf_counter())
        body = {"model": "room", "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        chunks, usage = 0, None
        try:
            with http.stream("POST", f"{base_url}/chat/completions", json=body, headers=headers) as r:
                answer.status = str(r.status_code)
                if r.status_code == 200:
                    for line in r.iter_lines():
                        if not line.startswith("data: {"):
                            continue
                        event = json.loads(line[6:])
                        usage = event.get("usage") or usage
                        if any((c.get("delta") or {}).get("content") for c in event.get("choices") or []):
                            chunks += 1
                            if answer.ttft is None:
                                answer.ttft = time.perf_counter() - answer.pressed
        except httpx.HTTPError as exc:
            answer.status = type(exc).__name__
        answer.done = time.perf_counter() - answer.pressed
        answer.tokens = (usage or {}).get("completion_tokens") or chunks
        answer.prompt_tokens = (usage or {}).get("prompt_tokens")
        return answer
    return press


def press_together(people: list, requests: int = 1, at: float | None = None) -> tuple[list[Answer], float]:
    """Every person in a thread of its own with an HTTP client of its own, opened before one barrier releases them
    all (as a browser tab or an SDK client is open before its person presses); (their answers in order, the first
    press). `requests`: each person's requests one after another (each may take TIMEOUT_S). `at`: the moment they
    press (time.time()), after the barrier: the browser path's pages click at the same one."""
    import httpx
    barrier, answers = threading.Barrier(len(people)), [None] * len(people)

    def one(i, press):
        with httpx.Client(timeout=TIMEOUT_S) as http:
            barrier.wait()
            if at is not None:
                time.sleep(max(0.0, at - time.time()))
            answers[i] = press(http)
    threads = [threading.Thread(target=one, args=(i, p), daemon=True) for i, p in enumerate(people)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(requests * TIMEOUT_S + 60)
    first = min(a.pressed for a in answers if a is not None)
    return [a or Answer(first, status="no answer in time") for a in answers], first


def path_figures(answers: list[Answer], first_press: float, load: dict) -> dict:
    """A path's figures from its answers (see the module doc); `load`: its window (quiet.LoadWindow.stop)."""
    served = [a for a in answers if a.served]
    ttfts = [a.ttft for a in served]
    ends = [a.pressed + a.done for a in served]
    last_done = max(ends) - first_press if ends else None
    tokens = sum(a.tokens for a in served)
    statuses: dict[str, int] = {}
    for a in answers:
        statuses[a.status] = statuses.get(a.status, 0) + 1
    out = {"served": len(served), "people": len(answers), "statuses": dict(sorted(statuses.items())),
           "ttft_p50_s": median(ttfts, 3), "ttft_p95_s": rounded(percentile(ttfts, 95, NEAREST_RANK), 3),
           "last_done_s": None if last_done is None else round(last_done, 3), "output_tokens": tokens,
           "output_tps": None if not last_done else round(tokens / last_done, 1),
           "prompt_tokens_p50": median((a.prompt_tokens for a in answers), 0)}
    queued = [a.queued for a in served if a.queued is not None]
    if queued:
        out["server_queued_p50_s"] = median(queued, 3)
        out["server_queued_p95_s"] = rounded(percentile(queued, 95, NEAREST_RANK), 3)
        out["max_rows"] = max(a.rows for a in served if a.rows is not None)
    parts = [a.parts for a in served if a.parts]
    if parts:   # the page's TTFT in parts: each part's median, and the parts of the person at the TTFT p95 rank
        out["ttft_parts_p50_s"] = {k: median((p[k] for p in parts), 3) for k in parts[0]}
        p95 = percentile([a.ttft for a in served if a.parts], 95, NEAREST_RANK)
        out["ttft_p95_parts_s"] = next(a.parts for a in served if a.parts and a.ttft == p95)
    out["load"], out["validity"] = load, validity([load])
    return out


def read_page_traces(answers: list[Answer]) -> None:
    """Each page run's server-side wait (`queued`) and the most requests one of its Steps shared, from its
    trace.json (fetched after the path, outside its timing)."""
    import httpx
    for a in answers:
        if not a.trace_url:
            continue
        try:
            trace = httpx.get(a.trace_url, timeout=60).json()
        except (httpx.HTTPError, ValueError):
            continue
        a.queued = trace.get("queued")
        a.rows = max((s.get("rows") or 1 for s in trace.get("steps") or []), default=None)
        a.parts = ttft_parts(a, trace)


def ttft_parts(answer: Answer, trace: dict) -> dict | None:
    """A page run's TTFT as the client saw it, in parts (seconds, one clock: time.time on this machine): `submit`,
    from the press until the engine loop had the request (Gradio's HTTP calls, its queue and event, the handler's
    template and tokenizing); `queued`, its wait there for a KV slot; `first_token`, from taking a slot to its first
    token (the batched prefill it shares); `delivery`, from that token to the client (the handler's update, Gradio's
    event, the wire). None without a first token.

    >>> a = Answer(0.0, ttft=1.5, pressed_wall=100.0)
    >>> ttft_parts(a, {"queued": 0.2, "steps": [{"time": 0.9, "wall_ns": 101_400_000_000}]})
    {'submit': 0.3, 'queued': 0.2, 'first_token': 0.9, 'delivery': 0.1}
    """
    steps = trace.get("steps") or []
    if answer.ttft is None or not steps or not steps[0].get("wall_ns"):
        return None
    first_wall = steps[0]["wall_ns"] / 1e9
    queued = trace.get("queued") or 0.0
    submitted = first_wall - steps[0]["time"] - queued
    return {"submit": round(submitted - answer.pressed_wall, 3), "queued": round(queued, 3),
            "first_token": round(steps[0]["time"], 3),
            "delivery": round(answer.pressed_wall + answer.ttft - first_wall, 3)}


def attendee_person(client, requests: int):
    """The attendee pressing the Serve tab's Run (serve_attendee.press_run, on Gradio's `client`, opened before the
    press): an Answer with no token, its status the run's status line."""
    from .serve_attendee import press_run

    def press(http) -> Answer:
        answer = Answer(time.perf_counter())
        answer.done, answer.status = press_run(client, requests, TIMEOUT_S)
        return answer
    return press


# --- the paths

def run_path(people: list, servers: tuple = (), attendee=None) -> dict:
    """The people pressing together, in a load window (`servers`: the bench's servers, their CPU its own); the
    path's figures. `attendee`: one more person pressing at the same moment (attendee_person), outside the
    figures: its run's seconds and status line go to `attendee`."""
    window = LoadWindow.start(servers)
    answers, first = press_together(people + ([attendee] if attendee else []))
    load = window.stop()
    answers, theirs = answers[:len(people)], answers[len(people):]
    read_page_traces(answers)
    figures = path_figures(answers, first, load)
    if theirs:
        figures["attendee"] = {"done_s": rounded(theirs[0].done, 3), "status": theirs[0].status}
    return figures


def browser_path(room, prompts: list[str], tokens: int, servers: tuple = (), others: list | None = None) -> dict:
    """The pages of `room` (room_browser.BrowserRoom; one a prompt) pressing Generate at one moment with `others`
    (people of Gradio's HTTP API, page_person: the rest of the room) pressing at the same, in a load window; the
    path's figures from what each page drew (times in seconds from its own click): the Chromium pages' alone."""
    others = others or []
    window = LoadWindow.start(servers)
    at = room.arm(prompts, tokens) / 1e3
    pressing = threading.Thread(target=lambda: press_together(others, at=at), daemon=True) if others else None
    if pressing is not None:
        pressing.start()
    seen = room.seen(len(prompts))
    if pressing is not None:
        pressing.join(TIMEOUT_S + 60)
    load = window.stop()
    answers = [seen_answer(s) for s in seen]
    first = min((a.pressed for a in answers if a.status == "200"), default=0.0)
    figures = path_figures(answers, first, load)
    figures["browser_pages"], figures["page_people"] = len(prompts), len(others)
    return figures


def seen_answer(seen) -> Answer:
    """A page's run as its browser drew it (room_browser.PageSeen: milliseconds) as an Answer (seconds).

    >>> from playground.bench.room_browser import PageSeen
    >>> a = seen_answer(PageSeen(clicked=1000.0, first=1250.0, done=3000.0, tokens=5))
    >>> a.ttft, a.done, a.tokens, a.status, a.served
    (0.25, 2.0, 5, '200', True)
    >>> seen_answer(PageSeen(clicked=1000.0, first=None, done=None, tokens=0)).status
    'no end drawn'
    """
    if seen.clicked is None:
        return Answer(0.0, status="no click seen")
    answer = Answer(seen.clicked / 1e3, tokens=seen.tokens)
    if seen.first is not None:
        answer.ttft = (seen.first - seen.clicked) / 1e3
    if seen.done is None:   # not served: its end never showed
        answer.status, answer.tokens = "no end drawn", 0
    else:
        answer.done = (seen.done - seen.clicked) / 1e3
    return answer


def app_paths(model: str | None, backend: str, people: int, tokens: int, limits: str | None,
              rounds: int = 1, attendee_requests: int = ATTENDEE_REQUESTS, browser: bool = True,
              browser_pages: int = BROWSER_PAGES) -> tuple[dict, dict]:
    """(the page, endpoint, mixed, attendee and browser paths' figures, what the app ran with: the model it names,
    keys, limits) on one app process; `rounds` rounds of the five, interleaved (merge_rounds). `browser` False, or
    no Chromium here: the browser path says why it was skipped."""
    keys = [f"room-person-{i + 1}" for i in range(people)]
    why_not = browser_missing() if browser else "--no-browser"
    shown = min(browser_pages, people)
    with endpoint_app(model, backend, keys, limits) as (app, base, model_id):
        # warm-up: every person's first run (the page's first Generate, which opens their session as loading the
        # page does in a browser), then every key's first request, each a room at once (the batched graph's first
        # passes of many rows)
        sessions = [f"room-person-{i + 1}" for i in range(people)]
        press_together([page_person(app.url, backend, "Warm up.", 2, sessions[i]) for i in range(people)])
        press_together([openai_person(base, key, "Warm up.", 2) for key in keys])
        servers = (app.server,)
        half = people // 2
        attendee = attendee_client(app.url)
        done: dict[str, list] = {"page": [], "endpoint": [], "mixed": [], "attendee": [], "browser": []}
        for r in range(rounds):   # the paths interleaved: a round of each, then the next round
            done["page"].append(run_path([page_person(app.url, backend, question("page", i, r), tokens,
                                                      sessions[i]) for i in range(people)], servers))
            done["endpoint"].append(run_path([openai_person(base, keys[i], question("endpoint", i, r), tokens)
                                              for i in range(people)], servers))
            done["mixed"].append(run_path([page_person(app.url, backend, question("mixed", i, r), tokens,
                                                       sessions[i]) for i in range(half)]
                                          + [openai_person(base, keys[i], question("mixed", i, r), tokens)
                                             for i in range(half, people)], servers))
            done["attendee"].append(run_path([page_person(app.url, backend, question("attendee", i, r), tokens,
                                                          sessions[i]) for i in range(half)]
                                             + [openai_person(base, keys[i], question("attendee", i, r), tokens)
                                                for i in range(half, people)], servers,
                                             attendee_person(attendee, attendee_requests)))
            if not why_not:   # Chromium open for this path alone; each page's first run before it
                with BrowserRoom(app.url, shown) as pages:
                    pages.press(["Warm up."] * shown, 2)
                    done["browser"].append(browser_path(
                        pages, [question("browser", i, r) for i in range(shown)], tokens, servers,
                        [page_person(app.url, backend, question("browser", i, r), tokens, sessions[i])
                         for i in range(shown, people)]))
    paths = {name: merge_rounds(figures) for name, figures in done.items() if figures}
    for name in ("mixed", "attendee"):
        paths[name]["page_people"], paths[name]["endpoint_people"] = half, people - half
    paths["attendee"]["attendee_requests"] = attendee_requests
    paths["attendee"]["attendee_runs"] = [f["attendee"] for f in done["attendee"]]
    paths["attendee"].pop("attendee", None)
    if why_not:
        paths["browser"] = {"skipped": why_not}
    return paths, {"model": model_id, "api_keys": people, "limits": app_limits(limits)}


def browser_missing() -> str:
    """Why the browser path cannot run here ("" when it can): Chromium or Playwright missing."""
    import importlib.util
    if not os.path.exists(chromium_path()):
        return f"no Chromium at {chromium_path()} (make browser)"
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is not installed"
    return ""


@contextmanager
def endpoint_app(model: str | None, backend: str, keys: list[str], limits: str | None = None):
    """The app (app.py --openai-api on `backend`) in a subprocess on 127.0.0.1, its keys `keys`
    (PLAYGROUND_API_KEYS) and limits `limits` (PLAYGROUND_API_LIMITS; None: its defaults), once its engine loop is
    loaded (/health); yields (the AppProcess, its /v1 URL, the model its /v1/models names)."""
    import httpx

    from .app_process import AppProcess
    env = {k: v for k, v in os.environ.items() if k not in ("PLAYGROUND_API_LIMITS", "PLAYGROUND_API_KEYS")}
    env["PLAYGROUND_API_KEYS"] = ",".join(keys)
    if limits:
        env["PLAYGROUND_API_LIMITS"] = limits
    args = ["app.py", "--openai-api", "--backend", backend] + (["--model", model] if model else [])
    with AppProcess(args, env=env, proxied=False) as app:
        base = app.url.rstrip("/") + "/v1"
        deadline = time.monotonic() + 600
        while httpx.get(app.url + "health", timeout=30).status_code != 200:   # the engine loop is loaded
            if time.monotonic() > deadline:
                raise TimeoutError("the app's endpoint did not become ready in 600 s")
            time.sleep(0.5)
        model_id = httpx.get(base + "/models", headers={"Authorization": f"Bearer {keys[0]}"},
                             timeout=30).json()["data"][0]["id"]
        yield app, base, model_id


MEDIAN_FIGURES = ("ttft_p50_s", "ttft_p95_s", "last_done_s", "output_tps", "server_queued_p50_s",
                  "server_queued_p95_s")


def merge_rounds(rounds: list[dict]) -> dict:
    """A path's figures over its rounds: the median of each timing (MEDIAN_FIGURES), the fewest served, the
    statuses of all, the fewest tokens, the most rows, the busiest round's load (its validity over every round's);
    `rounds` keeps each round's timings.

    >>> one = {"served": 4, "people": 4, "statuses": {"200": 4}, "ttft_p95_s": 2.0, "last_done_s": 5.0,
    ...        "output_tokens": 8, "load": {"others_cores": 0.1, "cores": 2}, "validity": {"valid": True}}
    >>> m = merge_rounds([one, {**one, "last_done_s": 7.0, "served": 3, "statuses": {"200": 3, "429": 1}},
    ...                   {**one, "last_done_s": 6.0}])
    >>> m["last_done_s"], m["served"], m["statuses"], m["output_tokens"], [r["last_done_s"] for r in m["rounds"]]
    (6.0, 3, {'200': 11, '429': 1}, 8, [5.0, 7.0, 6.0])
    """
    if len(rounds) == 1:
        return rounds[0]
    out = dict(rounds[0])
    for name in MEDIAN_FIGURES:
        if name in out:
            out[name] = median((r.get(name) for r in rounds), 3 if name.endswith("_s") else 1)
    out["served"] = min(r["served"] for r in rounds)
    statuses: dict[str, int] = {}
    for r in rounds:
        for status, n in r["statuses"].items():
            statuses[status] = statuses.get(status, 0) + n
    out["statuses"] = dict(sorted(statuses.items()))
    out["output_tokens"] = min(r["output_tokens"] for r in rounds)   # the fewest a round's people made
    if "max_rows" in out:
        out["max_rows"] = max(r["max_rows"] for r in rounds)
    for name in ("ttft_parts_p50_s", "ttft_p95_parts_s"):   # each part's median over the rounds
        if name in out:
            out[name] = {k: median((r[name][k] for r in rounds if name in r), 3) for k in out[name]}
    out["load"] = busiest([r["load"] for r in rounds])
    out["validity"] = validity([r["load"] for r in rounds])
    out["rounds"] = [{k: r.get(k) for k in ("served", *MEDIAN_FIGURES, "output_tokens") if k in r} for r in rounds]
    return out


def busiest(loads: list[dict]) -> dict:
    """The load window whose others took the most CPU (one not measured counts as the busiest).

    >>> busiest([{"others_cores": 0.1}, {"others_cores": 0.4}, {"others_cores": 0.2}])
    {'others_cores': 0.4}
    """
    return max(loads, key=lambda load: math.inf if load.get("others_cores") is None else load["others_cores"])


def app_limits(limits: str | None) -> dict:
    """The endpoint's limits and KV slots as the app reads them from PLAYGROUND_API_LIMITS (`limits`, else its
    defaults).

    >>> app_limits("in_flight=64")["in_flight"], app_limits(None)["in_flight"] > 0
    (64, True)
    """
    from ..api import ApiConfig
    from ..api.limits import ApiLimits, parse_limits
    config = ApiConfig(limits=replace(ApiLimits(), **parse_limits(limits)))
    return {**asdict(config.limits), "slots": config.slots, "capacity": config.capacity}


def llama_path(people: int, tokens: int, threads: int, rounds: int = 1) -> dict:
    """The room through `llama-server --parallel N` on the bundled GGUF, `rounds` times (merge_rounds);
    {"error": ...} when it cannot run."""
    from ..llamacpp import LlamaServer
    from ..llamacpp import LlamaCppMissing, llama_choice
    try:
        with LlamaServer(threads=threads, parallel=people, ctx=people * SLOT_CONTEXT) as server:
            press_together([openai_person(server.url, None, "Warm up.", 4) for _ in range(min(4, people))])
            import psutil
            process = psutil.Process(server.process.pid)
            figures = merge_rounds([run_path([openai_person(server.url, None, question("llama-server", i, r), tokens)
                                              for i in range(people)], (process,)) for r in range(rounds)])
    except (LlamaCppMissing, FileNotFoundError, RuntimeError, OSError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"parallel": people, "threads": threads, "slot_context": SLOT_CONTEXT,
            "configuration": llama_choice().summary(), **figures}


def room_ratios(paths: dict, llama: dict) -> tuple[dict, dict | None]:
    """(the ratios of TARGETS, the validity of the two to llama-server: None without its path).

    >>> p = {"served": 2, "people": 2, "ttft_p95_s": 2.0, "last_done_s": 4.0, "output_tps": 30.0,
    ...      "load": {"others_cores": 0.0, "cores": 2}}
    >>> ratios, check = room_ratios({"page": {**p, "ttft_p95_s": 2.2}, "endpoint": p, "mixed": p},
    ...                             {**p, "ttft_p95_s": 4.0, "output_tps": 10.0})
    >>> ratios["page_vs_endpoint_ttft_p95"], ratios["endpoint_vs_llama_ttft_p95"], ratios["endpoint_vs_llama_tps"]
    (1.1, 0.5, 3.0)
    >>> ratios["served_share_min"], check["valid"]
    (1.0, True)
    >>> ratios["browser_vs_endpoint_ttft_p95"], ratios["attendee_vs_mixed_ttft_p95"]   # paths not run: no ratio
    (None, None)
    """
    page, endpoint, mixed = paths["page"], paths["endpoint"], paths["mixed"]
    out = {"page_vs_endpoint_ttft_p95": ratio(page["ttft_p95_s"], endpoint["ttft_p95_s"]),
           "page_vs_endpoint_last_done": ratio(page["last_done_s"], endpoint["last_done_s"]),
           "mixed_vs_endpoint_ttft_p95": ratio(mixed["ttft_p95_s"], endpoint["ttft_p95_s"]),
           "mixed_vs_endpoint_last_done": ratio(mixed["last_done_s"], endpoint["last_done_s"])}
    browser, attendee = paths.get("browser") or {}, paths.get("attendee") or {}
    out["browser_vs_endpoint_ttft_p95"] = ratio(browser.get("ttft_p95_s"), endpoint["ttft_p95_s"])
    out["browser_vs_endpoint_last_done"] = ratio(browser.get("last_done_s"), endpoint["last_done_s"])
    out["attendee_vs_mixed_ttft_p95"] = ratio(attendee.get("ttft_p95_s"), mixed["ttft_p95_s"])
    check = None
    if "served" in llama:
        check = validity([endpoint["load"], llama["load"]])
        out["endpoint_vs_llama_ttft_p95"] = gated(ratio(endpoint["ttft_p95_s"], llama["ttft_p95_s"]), check)
        out["endpoint_vs_llama_tps"] = gated(ratio(endpoint["output_tps"], llama["output_tps"]), check)
    else:
        out.update(dict.fromkeys(LLAMA_RATIOS))
    every = [p for p in paths.values() if "served" in p] + ([llama] if "served" in llama else [])
    out["served_share_min"] = round(min(p["served"] / p["people"] for p in every), 3)
    return out, check


def room_row(model: str | None = None, people: int = PEOPLE, tokens: int = NEW_TOKENS, limits: str | None = None,
             backend: str | None = None, rounds: int = ROUNDS, attendee_requests: int = ATTENDEE_REQUESTS,
             browser: bool = True, browser_pages: int = BROWSER_PAGES) -> RoomRow:
    from ..api import batching_backend
    from ..backends import available_backends, default_backend_name
    from ..backends.onnx_backend import physical_cores

    if people < 2:
        raise ValueError(f"a room needs at least 2 people (half and half), got {people}")
    name = backend or batching_backend(list(available_backends()), default_backend_name("cpu", model))
    threads = physical_cores()   # ONNX Runtime's intra-op threads in the app; llama-server's -t
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    paths, app = app_paths(model, name, people, tokens, limits, rounds, attendee_requests, browser, browser_pages)
    llama = llama_path(people, tokens, threads, rounds) if model is None else \
        {"skipped": "llama-server runs the bundled GGUF only"}
    ratios, check = room_ratios(paths, llama)
    return RoomRow(backend=name, people=people, new_tokens=tokens, threads=threads, rounds=rounds, **app,
                   page=paths["page"], endpoint=paths["endpoint"], mixed=paths["mixed"], attendee=paths["attendee"],
                   browser=paths["browser"], note=GRADIO_NOTE, llama_server=llama,
                   ratios=ratios, llama_validity=check, cpu_flags=cpu_flags(), targets=targets_text(TARGETS),
                   targets_met=targets_met(ratios, TARGETS))


def main(argv: list[str]) -> None:
    p = parser("room", __doc__)
    p.add_argument("--people", type=int, default=PEOPLE, help=f"people at once (default {PEOPLE})")
    p.add_argument("--tokens", type=int, default=NEW_TOKENS, help=f"new tokens each (default {NEW_TOKENS})")
    p.add_argument("--limits", default=None, help="the endpoint's PLAYGROUND_API_LIMITS (default: the app's own)")
    p.add_argument("--backend", default=None, help="a backend our batching runs (default: the app's)")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of every path, interleaved; each figure "
                                                               f"their median (default {ROUNDS})")
    p.add_argument("--attendee-requests", type=int, default=ATTENDEE_REQUESTS,
                   help=f"the attendee's Serve workload: its requests (default {ATTENDEE_REQUESTS}, the tab's own)")
    p.add_argument("--no-browser", action="store_true", help="leave out the browser path (Chromium pages)")
    p.add_argument("--browser-pages", type=int, default=BROWSER_PAGES,
                   help=f"the browser path's Chromium pages, the rest of its room through Gradio's API (default "
                        f"{BROWSER_PAGES})")
    args = p.parse_args(argv)
    say_timed(lambda: room_row(args.model, args.people, args.tokens, args.limits, args.backend, args.rounds,
                               args.attendee_requests, not args.no_browser, args.browser_pages))
