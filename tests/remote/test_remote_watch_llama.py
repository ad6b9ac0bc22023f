"""`--endpoint` pointed at a real llama-server (fixture `llama_server`: the bundled GGUF on 127.0.0.1, 2 slots): the
page's Generate runs go there, and the Watch view draws them from the client side with the server's own timings
beside each (app.py's remote_servers and watch_remote, the page's generate handler, remote_watch.watch_view)."""
from __future__ import annotations

from functools import partial
import re
import threading

import pytest

from playground.remote.endpoints import endpoint_name
from playground.serve.remote_record import GAP_QUEUE, server_rows
from playground.ui.session import Session
from playground.trace import COMPLETED
from playground.ui.generate_handlers import generate as on_generate
from playground.ui.remote_watch import watch_view

from tests.helpers import generate_values, tab_by_name
from tests.remote.test_remote_watch import WATCH_OUT

pytestmark = [pytest.mark.server, pytest.mark.integration]

PROMPTS = ["What is the capital of France?", "Name three colours.", "What is the capital of France?"]


def test_the_watch_view_draws_the_pages_runs_on_llama_server_beside_its_timings(llama_server):
    import app
    registry = app.make_registry("tiny", "onnx", endpoints=[llama_server.url])   # as `--endpoint URL` makes it
    name = endpoint_name(llama_server.url)
    servers = app.remote_servers(registry, [llama_server.url])
    remote = app.watch_remote(servers)
    assert servers == [name] and remote is not None
    generate = partial(on_generate, tab_by_name(registry, app.make_room(registry), remote))
    t0 = remote.now()
    sessions, ends = [Session() for _ in PROMPTS], [None] * len(PROMPTS)

    def press(i):   # three people press Generate at once; the server's two slots serve them
        for update in generate(generate_values(sessions[i], PROMPTS[i], backend=name, max_new_tokens=8)):
            ends[i] = update.get("status", ends[i])
    threads = [threading.Thread(target=press, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert all("finished" in (end or "") for end in ends), ends

    frame = watch_view(None, remote, t0, WATCH_OUT)
    recs = sorted(remote.since(t0).records, key=lambda r: [s.trace for s in sessions].index(r.trace))
    # each session one client, named as every view names it: by number, its own id left out
    assert sorted(r.client for r in recs) == [f"page {k + 1}" for k in range(3)]
    for r, session in zip(recs, sessions):
        assert r.trace is session.trace and r.origin == "page" and r.server_name == name
        assert r.stop_reason in COMPLETED and r.output_tokens == len(session.trace.steps) > 0
        assert 0 <= r.arrival <= r.admitted < r.first_token <= r.last_token <= r.finished   # client-side stamps
        f = r.server
        assert f.kind == "llama.cpp" and "timings" in f.reports and f.queue_ms is None   # llama.cpp times no queue
        assert f.computed_tokens + f.cached_tokens == len(session.trace.prompt_ids)   # its /tokenize's count
        assert f.output_tokens == r.output_tokens and f.first_token_ms > 0 and f.decode_ms is not None
        assert r.gap_ms is not None and r.gap_ms >= 0   # the client saw the token after the server's prompt ended
        assert f.gap_means == GAP_QUEUE and GAP_QUEUE in r.server_detail
    status = frame["clients_status"]
    assert "3 requests from this page to remote servers: 3 done · 0 running" in status
    assert f"{name} (llama.cpp) (remote) reports per request" in status and GAP_QUEUE in status
    labels = list(frame["clients_gantt"].layout.yaxis.ticktext)
    assert len(labels) == 3 and all(re.search(r"· page \d · server: prompt", x) for x in labels), labels
    rows = server_rows(recs)
    assert [row[7] for row in rows] == [GAP_QUEUE] * 3 and all(isinstance(row[5], int) for row in rows)
    assert all(f"<td>{row[5]}</td>" in frame["clients_server"] for row in rows)
    assert "server figures" not in " ".join(labels)   # none missing: llama-server sent every one
