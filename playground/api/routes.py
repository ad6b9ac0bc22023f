"""The HTTP side: FastAPI routes for the OpenAI-compatible endpoints, mounted beside Gradio's on the same app.

    routes = api_routes(service)          # APIRoutes: demo.launch(app_kwargs={"routes": routes + …})
    app = FastAPI(routes=api_routes(service))   # or an app of its own (the tests)

    POST /v1/chat/completions, /v1/completions   JSON, or with "stream": true an event stream of
                                                 `data: {chunk}` lines and `data: [DONE]`; the server's
                                                 figures (llama-server's `timings`, vLLM's `metrics`)
                                                 on the response or the stream's last chunk
    POST /v1/responses                           OpenAI's Responses API (responses.py): a response object, or
                                                 its events; errors in OpenAI's shape
    POST /v1/messages                            Anthropic's Messages API (messages.py), the key also from
                                                 x-api-key; errors in Anthropic's shape
    GET  /v1/models                              the one model this engine serves
    POST /tokenize, /apply-template              llama.cpp's shapes (what RemoteSource asks a server)
    GET  /health                                 200 {"status": "ok"} once the model is ready, 503 before
                                                 (no key needed, as vLLM's and llama.cpp's)
    GET  /metrics                                Prometheus text under vLLM's names (prometheus.py)

Each route names the client first (401 for a missing or wrong key, before the body is read), then reads
the body, then asks the service; any ApiError becomes OpenAI's error JSON with its status and headers.
The body is read in pieces and refused with a 413 as soon as it passes the limit (ApiLimits.body_bytes; a
Content-Length over it is refused before any of it is read), then parsed as JSON nested at most
MAX_JSON_DEPTH deep (a deeper body is a 400 without ever reaching the parser's recursion limit).
Nothing else escapes a route (`guarded`): any other exception is a 500 `server_error` naming an incident id,
and the log has the exception's type and traceback under that id (not its message, which could quote a
prompt); a stream that fails after its first byte ends with that error as its last event. So no traceback
reaches a client even in an app built with debug=True (Gradio's is), and the connection stays open for the
client's next request.
A streamed answer is written as the loop makes each Step. When the client goes away -- Starlette cancels
the stream's coroutine, or a check every POLL_S finds the connection closed -- the request is cancelled,
so its KV slot is free after the loop's next iteration; a non-streamed request is cancelled the same way.
While work holds the machine alone (a Serve run) a stream in the loop gets a wait event every POLL_S (an SSE
comment, held_comment), and a non-streamed request in the loop is answered within POLL_S with the 429 a request
arriving then gets (errors.machine_held: Retry-After), its request cancelled (_wait_whole).
An agent route's stream (turn_route) ends with exactly one terminal event of its API, a failure on the way too.
Every route reads the session a request names (session_hint.py: `cache_control`, `prompt_cache_key`, the Responses
chain, `X-Session-Id`, `agent_hint`) onto what it asks, so its record says which session it is a turn of.
Nothing about a request is logged: no prompt, no key. When it came and the client's `X-Request-ID` go
on its Trace's `server` dict (service.Received), for a benchmark to match its records with ours.

Left out: the limits themselves (limits.py) and the shapes of bodies (request_body.py, response_body.py).
"""
from __future__ import annotations

import json
import logging
import secrets
import time
import traceback
from contextlib import aclosing
from dataclasses import replace
from typing import Callable

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect

from .errors import ApiError, bad_request, engine_failed, held_words, internal, machine_held, too_large
from .limits import PRESENTER
from .messages import MessageWriter, anthropic_error, read_messages
from .request_body import CHAT, COMPLETION, read_body
from .response_body import DONE, sse
from .responses import ResponseWriter, read_responses
from .service import ApiService, Received, ServedRequest
from .session_hint import read_session
from .turn import Ending, ident
from ..trace import StopReason

POLL_S = 0.5         # how often a request with no new Step checks that its client is still there
MAX_JSON_DEPTH = 32  # arrays and objects inside each other in a body (a chat request needs 4)
log = logging.getLogger(__name__)


class ErrorJSON(JSONResponse):
    """An error's JSON in ASCII: whatever a message quotes, it encodes."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(error: ApiError) -> JSONResponse:
    return ErrorJSON(error.body(), status_code=error.status, headers=error.headers)


def loop_failed(served: ServedRequest) -> ApiError:
    return engine_failed(served.ticket.trace.error)


def incident(exc: BaseException, request: Request) -> ApiError:
    """Log an unexpected failure under a fresh id -- its type and traceback, never its message or the body
    (either could carry a prompt) -- and the 500 that names the id."""
    ident = secrets.token_hex(4)
    log.error("incident %s: %s %s failed with %s\n%s", ident, request.method, request.url.path, type(exc).__name__,
              "".join(traceback.format_tb(exc.__traceback__)).rstrip())
    return internal(ident)


def guarded(handle, shape=error_response):
    """The route's endpoint: `handle(request)`, with an ApiError answered as OpenAI's error JSON (or `shape`'s) and
    any other exception as a 500 naming an incident (so nothing reaches Starlette's error middleware)."""
    async def endpoint(request: Request):
        try:
            return await handle(request)
        except ApiError as error:
            return shape(error)
        except Exception as exc:   # noqa: BLE001 - the client gets an id, the log the detail
            return shape(incident(exc, request))
    return endpoint


def anthropic_response(error: ApiError) -> JSONResponse:
    return ErrorJSON(anthropic_error(error), status_code=error.status, headers=error.headers)


def too_deep() -> ApiError:
    return bad_request(f"the request body is nested too deeply: at most {MAX_JSON_DEPTH} levels of arrays and "
                       "objects", code="json_too_deep")


def nesting(value, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep arrays and objects nest in `value`, counted up to limit + 1 (no recursion).

    >>> nesting({"messages": [{"role": "user"}]}), nesting(7), nesting([[[[1]]]], limit=2)
    (3, 0, 3)
    """
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            todo.extend((x, depth + 1) for x in (item.values() if isinstance(item, dict) else item))
    return deepest


def parse_json(raw: bytes):
    """The body's JSON; ApiError 400 when it is not JSON or nests deeper than MAX_JSON_DEPTH."""
    try:
        value = json.loads(raw or b"null")
    except RecursionError:   # nested past the parser's own recursion limit
        raise too_deep() from None
    except ValueError:       # not JSON, not UTF-8, or an integer of more digits than Python converts
        raise bad_request("the request body is not valid JSON") from None
    if nesting(value) > MAX_JSON_DEPTH:
        raise too_deep()
    return value


async def read_json(request: Request, limit: int):
    """The body, read a piece at a time and given up (413) as soon as it passes `limit` bytes, then parsed."""
    length = request.headers.get("content-length")
    if length is not None and length.strip().isdigit() and int(length) > limit:
        raise too_large(int(length), limit)
    pieces, size = [], 0
    try:
        async for piece in request.stream():
            size += len(piece)
            if size > limit:
                raise too_large(None, limit)
            pieces.append(piece)
    except ClientDisconnect:
        raise bad_request("the client closed the connection before the body was sent") from None
    return parse_json(b"".join(pieces))


async def _body(service: ApiService, request: Request):
    return await read_json(request, service.config.limits.body_bytes)


def _client(service: ApiService, request: Request) -> str:
    h = request.headers
    authorization = h.get("authorization")
    if authorization is None and h.get("x-api-key") is not None:   # where Anthropic's clients send the key
        authorization = "Bearer " + h["x-api-key"]
    return service.guard.client(authorization, request.client.host if request.client else None,
                                h.get("x-forwarded-for"))


async def _events(served: ServedRequest, request: Request):
    """The streamed answer: chunks as the Steps come, the finish chunk (and usage), [DONE]; a failure after
    the first byte (the status is sent) ends it with the error as the last event."""
    try:
        async for event in _stream(served, request):
            yield event
    except Exception as exc:   # noqa: BLE001 - the status line is gone: the error is the last event
        yield sse(incident(exc, request).body())


def held_comment(served: ServedRequest) -> str | None:
    """The wait event of a stream whose request waits while work holds the machine alone (a Serve run): an SSE
    comment, which every SSE client skips (the OpenAI and Anthropic SDKs too) and a person reading the stream
    sees: ": waiting: the machine is held alone by a Serve run (12 s so far)", or while the run waits for the runs in
    progress to end to take it (the loop pauses from then): ": waiting: a Serve run is taking the machine alone (…)".
    None while neither."""
    machine = served.loop.machine
    paused = None if machine is None else machine.paused()
    return None if paused is None else f": waiting: {held_words(paused)}\n\n"


async def _stream(served: ServedRequest, request: Request):
    answer, trace = served.answer, served.ticket.trace
    try:
        for chunk in answer.first_chunks():
            yield sse(chunk)
        async with aclosing(served.ticket.updates(POLL_S, request.is_disconnected, idle=True)) as updates:
            async for steps in updates:
                if not steps:   # a wake-up with no Step: told why, where the machine is held alone
                    if told := held_comment(served):
                        yield told
                    continue
                for chunk in answer.chunks(steps):
                    yield sse(chunk)
                if answer.stopped:
                    break
        if trace.stop_reason == StopReason.ERROR:
            yield sse(loop_failed(served).body())
        elif answer.stopped or trace.stop_reason not in (None, StopReason.CANCELLED):
            for chunk in answer.end_chunks(trace):
                yield sse(chunk)
            yield DONE
    finally:
        served.end()


async def _wait_whole(served: ServedRequest, request: Request, read: Callable[[list], bool]) -> None:
    """Give `read` each wake-up's new Steps until it says the answer stopped or the request ends. A non-streaming
    client has no event to be told a wait with: when work takes the machine alone while its request is in the loop
    (waiting or answering), it is answered at the next check (every POLL_S) with the 429 a request arriving then
    gets (machine_held: Retry-After), and its request is cancelled; the app's own workload (PRESENTER) waits."""
    async with aclosing(served.ticket.updates(POLL_S, request.is_disconnected, idle=True)) as updates:
        async for steps in updates:
            if not steps:
                machine = served.loop.machine
                paused = None if machine is None or served.ticket.client == PRESENTER else machine.paused()
                if paused is not None:
                    raise machine_held(paused)   # the caller's `finally` cancels the request
                continue
            if read(steps):
                return


def _read_answer(served: ServedRequest) -> Callable[[list], bool]:
    def read(steps) -> bool:
        served.answer.read(steps)
        return served.answer.stopped
    return read


async def _whole(served: ServedRequest, request: Request):
    try:
        await _wait_whole(served, request, _read_answer(served))
        trace = served.ticket.trace
        if trace.stop_reason == StopReason.ERROR:
            return error_response(loop_failed(served))
        return JSONResponse(served.answer.whole(trace))
    finally:
        served.end()


def completion_route(service: ApiService, kind: str):
    async def complete(request: Request):
        received, client = Received(time.time_ns(), request.headers.get("x-request-id")), ""
        try:
            client = _client(service, request)
            body = await _body(service, request)
            asked = read_body(body, kind)
            asked = replace(asked, session=read_session(body, request.headers.get("x-session-id")))
            if service.config.per_request_metrics:
                asked = replace(asked, per_request_metrics=True)
            served = service.open(asked, client, received)
        except ApiError as error:
            service.refused(error, client)   # the Serve tab's Watch view lists it: status, reason, client
            raise
        if asked.stream:
            return StreamingResponse(_events(served, request), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await _told(service, client, _whole(served, request))
    return guarded(complete)


async def _told(service: ApiService, client: str, answered):
    """A non-streaming request's answer (a coroutine); its 429 for the machine held alone listed in the Watch view
    as a request arriving then is."""
    try:
        return await answered
    except ApiError as error:
        service.refused(error, client)
        raise


# --- the agent APIs: /v1/responses (responses.py) and /v1/messages (messages.py), one turn each

class ResponsesApi:
    """How /v1/responses reads a body and writes its turn."""
    shape = staticmethod(error_response)

    def __init__(self, service: ApiService):
        self.store = service.responses

    def read(self, body):
        return read_responses(body, self.store)

    def writer(self, turn, served: ServedRequest, service: ApiService):
        return ResponseWriter(turn, served.answer, ident("resp_"), service.model_id)

    def whole(self, writer, trace) -> JSONResponse:
        body = writer.whole(trace)
        if body["status"] == "failed":
            raise engine_failed(body["error"]["message"])
        return JSONResponse(body)

    @staticmethod
    def chained(read) -> str | None:
        return read.chained

    def ended(self, writer) -> None:
        if writer.turn.store and writer.ended not in (None, Ending.ERROR):
            session = writer.answer.asked.session
            self.store.put(writer.id, writer.history(), session.id if session is not None else "")


class MessagesApi:
    """How /v1/messages reads a body and writes its turn."""
    shape = staticmethod(anthropic_response)

    def __init__(self, service: ApiService):
        pass

    def read(self, body):
        return read_messages(body)

    @staticmethod
    def chained(read) -> None:
        return None

    def writer(self, turn, served: ServedRequest, service: ApiService):
        return MessageWriter(turn, served.answer, ident("msg_"), service.model_id)

    def whole(self, writer, trace) -> JSONResponse:
        if trace.stop_reason == StopReason.ERROR:
            raise engine_failed(trace.error)
        return JSONResponse(writer.whole(trace))

    def ended(self, writer) -> None:
        pass


async def _turn_events(served: ServedRequest, request: Request, api, writer):
    """A turn streamed: the writer's events as the Steps come, and exactly one terminal event, even when this
    coroutine fails after the first byte (then the failure is the terminal event)."""
    try:
        async for event in _turn_stream(served, request, writer):
            yield event
    except Exception as exc:   # noqa: BLE001 - the status line is gone: the failure is the terminal event
        if not writer.finished:
            for event in writer.fail(served.ticket.trace, incident(exc, request).message):
                yield event
    finally:
        served.end()
        api.ended(writer)


async def _turn_stream(served: ServedRequest, request: Request, writer):
    for event in writer.opening():
        yield event
    async with aclosing(served.ticket.updates(POLL_S, request.is_disconnected, idle=True)) as updates:
        async for steps in updates:
            if not steps:
                if told := held_comment(served):
                    yield told
                continue
            for event in writer.feed(steps):
                yield event
            if writer.stopped:
                break
    trace = served.ticket.trace
    failure = (trace.error or "the engine loop failed") if trace.stop_reason == StopReason.ERROR else None
    for event in writer.close(trace, failure):
        yield event


async def _turn_whole(served: ServedRequest, request: Request, api, writer):
    def read(steps) -> bool:
        writer.feed(steps)
        return writer.stopped
    try:
        await _wait_whole(served, request, read)
        return api.whole(writer, served.ticket.trace)
    finally:
        served.end()
        api.ended(writer)


def turn_route(service: ApiService, api):
    """POST /v1/responses or /v1/messages: the same guard as a chat request (keys, body size, limits, the loop's
    fairness, the Watch view's record), then the API's own shapes."""
    async def turn(request: Request):
        received, client = Received(time.time_ns(), request.headers.get("x-request-id")), ""
        try:
            client = _client(service, request)
            body = await _body(service, request)
            read = api.read(body)
            asked = replace(read.asked, session=read_session(body, request.headers.get("x-session-id"),
                                                             api.chained(read)))
            if service.config.per_request_metrics:
                asked = replace(asked, per_request_metrics=True)
            served = service.open(asked, client, received)
        except ApiError as error:
            service.refused(error, client)
            raise
        writer = api.writer(read, served, service)
        served.answer = writer   # ServedRequest.end reads its tokens and ending from the writer
        if asked.stream:
            return StreamingResponse(_turn_events(served, request, api, writer), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await _told(service, client, _turn_whole(served, request, api, writer))
    return guarded(turn, api.shape)


def json_route(service: ApiService, answer, with_body: bool, key: bool = True):
    async def handle(request: Request):
        if key:
            _client(service, request)
        return JSONResponse(answer(await _body(service, request)) if with_body else answer())
    return guarded(handle)


def metrics_route(service: ApiService):
    async def metrics(request: Request):
        _client(service, request)
        text, content_type = service.metrics.exposition()
        return Response(text, media_type=content_type)
    return guarded(metrics)


def api_routes(service: ApiService) -> list[APIRoute]:
    """The endpoints' routes over one service (put them ahead of Gradio's)."""
    def route(path, endpoint, method):
        return APIRoute(path, endpoint, methods=[method], include_in_schema=False)
    return [route("/v1/chat/completions", completion_route(service, CHAT), "POST"),
            route("/v1/completions", completion_route(service, COMPLETION), "POST"),
            route("/v1/models", json_route(service, service.models, False), "GET"),
            route("/tokenize", json_route(service, service.tokenize, True), "POST"),
            route("/apply-template", json_route(service, service.apply_template, True), "POST"),
            route("/health", json_route(service, service.health, False, key=False), "GET"),
            route("/metrics", metrics_route(service), "GET"),
            route("/v1/responses", turn_route(service, ResponsesApi(service)), "POST"),
            route("/v1/messages", turn_route(service, MessagesApi(service)), "POST")]
