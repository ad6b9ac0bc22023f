"""The Serve tab's batch-size sweep on the roofline and what a token costs, driven through gradio_client (tiny model)."""
from __future__ import annotations

import json

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from playground.registry import SourceRegistry
from playground.ui import build_demo
from playground.ui.serve_views import OUTPUTS
from tests.helpers import free_port, generate_args, generated

OUT = {name: i for i, name in enumerate(OUTPUTS)}
REPEATS = "the cat sat on the mat and the cat sat on the mat and the dog sat on the mat and the cat"


@pytest.fixture(scope="module")
def app_url(tiny_engine, tiny_onnx_engine):
    sources = {"onnx": tiny_onnx_engine, "torch": tiny_engine}
    registry = SourceRegistry(lambda name, progress: sources[name], list(sources), default="onnx")
    demo = build_demo(registry)
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1",
                                    quiet=True)
    yield url
    demo.close()


def test_a_batch_sweep_draws_the_roofline_and_prices_a_token(app_url):
    client = Client(app_url, verbose=False)
    before = client.predict(0.10, api_name="/token_cost")
    assert before.count("missing: not measured in this session") == 3 and "$0.60" in before
    final = client.submit("batch", "batching", "onnx", "1,8", 8, "1", 2, 2.0, 0.2,
                          api_name="/serve_sweep").result(timeout=300)
    assert "sweep done" in final[OUT["status"]]
    shown = final[OUT["sweep_roofline"]]   # an update: made visible, with the figure
    assert shown["visible"] is True
    roofline = json.loads(shown["value"]["plot"])
    measured = next(t for t in roofline["data"] if t["name"].startswith("decode (measured"))
    assert len(measured["x"]) == 2 and measured["x"][1] > measured["x"][0]   # 8 rows: further right than 1
    after = client.predict(0.10, api_name="/token_cost")
    assert "batch-size sweep, 8 at once" in after and "batch-size sweep, 1 at once" in after
    assert after.count("missing: not measured in this session") == 1   # speculative decoding: not yet
    out = generated(client.predict(*generate_args(REPEATS, max_new_tokens=24, backend="torch"), True, 4, 2,
                                   api_name="/generate"))
    assert "finished" in out["status"] and "tokens per forward pass" in out["metrics"]
    priced = client.predict(0.10, api_name="/token_cost")
    assert "Generate run, speculative" in priced and "missing" not in priced
    with pytest.raises(AppError, match="less than minimum value 0"):   # the field refuses it, in words
        client.predict(-1, api_name="/token_cost")
