"""GuideLLM (a standard benchmarking client, in .venv-guidellm: `make guidellm`) against the endpoint with its
defaults, its backend validation (GET /health) on: a few synthetic requests, offline, with the tiny model's
tokenizer saved to a folder as GuideLLM's processor. GuideLLM is not part of `make test`'s install (it brings
torch), so without it this test is skipped."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from playground.api import ApiConfig, ApiService
from tests.api.test_openai_api import KEY, Served

GUIDELLM = Path(__file__).resolve().parents[2] / ".venv-guidellm" / "bin" / "guidellm"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
REQUESTS = 4

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]


@pytest.mark.skipif(not GUIDELLM.is_file(), reason="GuideLLM is not installed: `make guidellm` (.venv-guidellm)")
def test_guidellm_validates_the_endpoint_and_benchmarks_it(tiny_onnx_engine, tmp_path, monkeypatch):
    from playground.tiny import build_tiny_tokenizer
    health = []
    real = ApiService.health
    monkeypatch.setattr(ApiService, "health", lambda self: health.append(1) or real(self))
    tokenizer = tmp_path / "tokenizer"
    build_tiny_tokenizer().save_pretrained(tokenizer)
    served = Served(tiny_onnx_engine, ApiConfig(keys=(KEY,), slots=2, capacity=256))
    out = tmp_path / "benchmarks.json"
    try:
        run = subprocess.run(
            [str(GUIDELLM), "run", "--backend", f"kind=openai_http,target={served.url},api_key={KEY},"
             f"model={served.service.model_id}", "--profile", "kind=synchronous",
             "--constraint", f"kind=max_requests,count={REQUESTS}",
             "--data", "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
             "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
             "--output", f"kind=json,path={out}", "--disable-progress"],
            cwd=tmp_path, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=600)
    finally:
        served.stop()
    assert run.returncode == 0 and out.is_file(), (run.stdout + run.stderr)[-2000:]
    totals = json.loads(out.read_text())["benchmarks"][0]["requests"]
    assert health, "GuideLLM's backend validation never asked GET /health"
    counts = {kind: len(totals[kind]) for kind in ("successful", "errored", "incomplete")}
    assert counts == {"successful": REQUESTS, "errored": 0, "incomplete": 0}, counts
