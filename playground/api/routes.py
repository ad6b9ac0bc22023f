"""The HTTP side: FastAPI routes for the OpenAI-compatible endpoints, mounted beside Gradio's on the same app.

    routes = api_routes(service)          # APIRoutes: demo.launch(app_kwargs={"routes": routes + …})
    app = FastAPI(routes=api_routes(service))   # or an app of its own (the tests)

    POST /v1/chat/completions, /v1/completions   JSON, or with "stream": true an event stream of
                                                 `data: {chunk}` lines and `data: [DONE]`
    GET  /v1/models                              the one model this engine serves
    POST /tokenize, /apply-template              llama.cpp's shapes (what RemoteSource asks a server)

Each route names the client first (401 for a missing or wrong key, before the body is read), then reads
the body, then asks the service; any ApiError becomes OpenAI's error JSON with its status and headers.
A streamed answer is written as the loop makes each Step. When the client goes away -- Starlette cancels
the stream's coroutine, or a check every POLL_S finds the connection closed -- the request is cancelled,
so its KV slot is free after the loop's next iteration; a non-streamed request is cancelled the same way.
Nothing about a request is logged: no prompt, no key. When it came and the client's `X-Request-ID` go
on its Trace's `server` dict (service.Received), for a benchmark to match its records with ours.

Left out: the limits themselves (limits.py) and the shapes of bodies (request_body.py, response_body.py).
"""
from __future__ import annotations

import json
import time
from contextlib import aclosing

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute

from .errors import ApiError, bad_request
from .request_body import CHAT, COMPLETION, read_body
from .response_body import DONE, sse
from .service import ApiService, Job, Received
from ..trace import StopReason

POLL_S = 0.5   # how often a request with no new Step checks that its client is still there


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def loop_failed(job: Job) -> ApiError:
    return ApiError(500, job.ticket.trace.error or "the engine loop failed", "server_error", "engine_error")


async def _body(request: Request):
    try:
        return json.loads(await request.body() or b"null")
    except ValueError:
        raise bad_request("the request body is not valid JSON") from None


def _client(service: ApiService, request: Request) -> str:
    h = request.headers
    return service.guard.client(h.get("authorization"), request.client.host if request.client else None,
                                h.get("x-forwarded-for"))


async def _events(job: Job, request: Request):
    """The streamed answer: chunks as the Steps come, the finish chunk (and usage), [DONE]."""
    answer, trace = job.answer, job.ticket.trace
    try:
        for chunk in answer.first_chunks():
            yield sse(chunk)
        async with aclosing(job.ticket.updates(POLL_S, request.is_disconnected)) as updates:
            async for steps in updates:
                for chunk in answer.chunks(steps):
                    yield sse(chunk)
                if answer.stopped:
                    break
        if trace.stop_reason == StopReason.ERROR:
            yield sse(loop_failed(job).body())
        elif answer.stopped or trace.stop_reason not in (None, StopReason.CANCELLED):
            for chunk in answer.end_chunks(trace):
                yield sse(chunk)
            yield DONE
    finally:
        job.end()


async def _whole(job: Job, request: Request):
    try:
        async with aclosing(job.ticket.updates(POLL_S, request.is_disconnected)) as updates:
            async for steps in updates:
                job.answer.read(steps)
                if job.answer.stopped:
                    break
        trace = job.ticket.trace
        if trace.stop_reason == StopReason.ERROR:
            return error_response(loop_failed(job))
        return JSONResponse(job.answer.whole(trace))
    finally:
        job.end()


def completion_route(service: ApiService, kind: str):
    async def complete(request: Request):
        received = Received(time.time_ns(), request.headers.get("x-request-id"))
        try:
            client = _client(service, request)
            asked = read_body(await _body(request), kind)
            job = service.open(asked, client, received)
        except ApiError as error:
            service.refused(error)
            return error_response(error)
        if asked.stream:
            return StreamingResponse(_events(job, request), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await _whole(job, request)
    return complete


def json_route(service: ApiService, answer, with_body: bool):
    async def handle(request: Request):
        try:
            _client(service, request)
            return JSONResponse(answer(await _body(request)) if with_body else answer())
        except ApiError as error:
            return error_response(error)
    return handle


def api_routes(service: ApiService) -> list[APIRoute]:
    """The endpoints' routes over one service (put them ahead of Gradio's)."""
    def route(path, endpoint, method):
        return APIRoute(path, endpoint, methods=[method], include_in_schema=False)
    return [route("/v1/chat/completions", completion_route(service, CHAT), "POST"),
            route("/v1/completions", completion_route(service, COMPLETION), "POST"),
            route("/v1/models", json_route(service, service.models, False), "GET"),
            route("/tokenize", json_route(service, service.tokenize, True), "POST"),
            route("/apply-template", json_route(service, service.apply_template, True), "POST")]
