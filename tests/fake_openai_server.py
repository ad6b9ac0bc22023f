"""A small OpenAI-compatible server that misbehaves on request, for the remote source's failure tests.

    server = FakeServer().start()                  # 127.0.0.1, a free port, a thread
    url = server.url("cut")                        # http://127.0.0.1:PORT/cut/v1: the mode is the path's head
    server.seen["auth"]                            # the Authorization headers each mode received
    server.stop()

Modes (what /v1/chat/completions and /v1/completions do; /v1/models answers in every mode but
"models-500"): ok, multi (two tokens per event), no-logprobs (no logprobs; usage says one token more),
auth (401 without "Bearer sekrit", echoing the key it got), 401, 403, 404, 429, 500, 503, cut (the
chunked body stops mid-answer), end-early (a clean end without finish_reason or [DONE]), malformed (an
event that is not JSON), not-sse (an HTML page), silent (never a byte), stall (headers and two tokens,
then nothing), error-event (an error event mid-stream), other-tokenizer (ids from another vocabulary,
under the bundled model's name), slow (a token every 0.2 s), always-stream (an event stream even when
asked for one JSON reply), reasoning and reasoning_content (a reasoning server: THOUGHTS streamed under vLLM's
`reasoning` or the older `reasoning_content` before the answer, usage's completion_tokens_details.reasoning_tokens
counting them).
Standard library only (http.server); chunked transfer like llama.cpp's, so a cut is a real cut.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKENS = [(9906, "Hello"), (1917, " world"), (0, "!")]
THOUGHTS = ["The user", " greets", " me."]   # a reasoning server's thinking, one event each, before TOKENS
REASONING = ("reasoning", "reasoning_content")   # vLLM's field since #27752, and the older one (llama.cpp's)
KEY = "sekrit"
STATUS = {"401": 401, "403": 403, "404": 404, "429": 429, "500": 500, "503": 503}


def chunk(text: str) -> bytes:
    data = text.encode()
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event(delta: dict | None = None, logprobs=None, finish=None, usage=None, text_mode=False) -> str:
    choice = {"index": 0, "finish_reason": finish}
    if text_mode:
        choice["text"] = (delta or {}).get("content", "")
    else:
        choice["delta"] = delta or {}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    body = {"object": "chat.completion.chunk", "choices": [] if usage else [choice]}
    if usage:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n"


def entry(tid: int, text: str) -> dict:
    return {"id": tid, "token": text, "logprob": -0.1, "top_logprobs": [{"id": tid, "token": text, "logprob": -0.1}]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):   # quiet
        pass

    def _split(self) -> tuple[str, str]:
        mode, _, rest = self.path.lstrip("/").partition("/")
        return mode, "/" + rest

    def _json(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        mode, path = self._split()
        self.server.seen.setdefault(mode, []).append(self.headers.get("Authorization"))
        if mode == "auth" and self.headers.get("Authorization") != f"Bearer {KEY}":
            return self._json(401, {"error": {"message": f"invalid key {self.headers.get('Authorization')}"}})
        if path == "/v1/models" and mode != "models-500":
            name = "SmolLM2-135M-Instruct" if mode == "other-tokenizer" else "fake-model"
            return self._json(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "fake"}]})
        if path == "/v1/models":
            return self._json(500, {"error": {"message": "models are on fire"}})
        self._json(404, {"error": {"message": f"no {path} here"}})

    def do_POST(self):
        mode, path = self._split()
        self.server.seen.setdefault(mode, []).append(self.headers.get("Authorization"))
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if mode == "auth" and self.headers.get("Authorization") != f"Bearer {KEY}":
            return self._json(401, {"error": {"message": f"invalid key {self.headers.get('Authorization')}"}})
        if mode in STATUS and body.get("stream"):   # the one-token probe at connect time still answers
            return self._json(STATUS[mode], {"error": {"message": f"mode {mode}"}})
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return self._json(404, {"error": {"message": f"no {path} here"}})
        if not body.get("stream") and mode != "always-stream":
            lp = [entry(*TOKENS[0])] if mode != "no-logprobs" else None
            return self._json(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"},
                                                 "logprobs": {"content": lp} if lp else None,
                                                 "finish_reason": "length"}]})
        if mode == "silent":
            self.server.stopping.wait(60)
            return
        if mode == "not-sse":
            data = b"<html>login</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return self.wfile.write(data)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.stream(mode, text_mode=path == "/v1/completions")

    def send(self, text: str) -> None:
        self.wfile.write(chunk(text))
        self.wfile.flush()

    def stream(self, mode: str, text_mode: bool) -> None:
        tokens = [(t + 50000, s) for t, s in TOKENS] if mode == "other-tokenizer" else TOKENS
        self.send(event({"role": "assistant", "content": None}, text_mode=text_mode))
        if mode == "multi":
            self.send(event({"content": "Hello world"}, [entry(*tokens[0]), entry(*tokens[1])], text_mode=text_mode))
            self.send(event({"content": "!"}, [entry(*tokens[2])], text_mode=text_mode))
        for thought in THOUGHTS if mode in REASONING else ():
            time.sleep(0.02)   # the answer comes after the thinking, later on every clock
            self.send(event({mode: thought}, text_mode=text_mode))
        for i, (tid, text) in enumerate(tokens if mode != "multi" else ()):
            if mode in ("cut", "error-event", "stall", "malformed") and i == 2:
                if mode == "cut":
                    self.wfile.flush()
                    self.connection.shutdown(2)   # no terminating chunk: the body is cut
                    return
                if mode == "error-event":
                    self.send('data: {"error": {"code": 500, "message": "out of memory"}}\n\n')
                elif mode == "malformed":
                    self.send("data: {this is not json\n\n")
                else:
                    self.server.stopping.wait(60)
                return self.wfile.write(b"0\r\n\r\n")
            if mode == "slow":
                time.sleep(0.2)
            lp = None if mode == "no-logprobs" else [entry(tid, text)]
            self.send(event({"content": text}, lp, text_mode=text_mode))
        if mode == "end-early":
            return self.wfile.write(b"0\r\n\r\n")
        self.send(event({}, finish="stop", text_mode=text_mode))
        completion = len(tokens) + (mode == "no-logprobs")
        usage = {"prompt_tokens": 7, "completion_tokens": completion, "total_tokens": 7 + completion}
        if mode in REASONING:
            usage["completion_tokens"] += len(THOUGHTS)
            usage["total_tokens"] += len(THOUGHTS)
            usage["completion_tokens_details"] = {"reasoning_tokens": len(THOUGHTS)}
        self.send(event(usage=usage))
        self.send("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


class FakeServer:
    def __init__(self):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.seen, self.httpd.stopping = {}, threading.Event()
        # shutdown() waits for serve_forever's next poll: a short interval lets each test's server stop at once
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def seen(self) -> dict:
        return self.httpd.seen

    def url(self, mode: str = "ok") -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/{mode}/v1"

    def start(self) -> "FakeServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
