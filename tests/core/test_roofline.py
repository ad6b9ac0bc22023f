"""The roofline: FLOP and byte counts against hand computations, the probes bounded and cancellable,
the chart's measured and predicted labels, and the `roofline` experiment on the tiny model."""
from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest

from playground import roofline
from playground.charts import plot_roofline, plot_roofline_sweep
from playground.bench.roofline import TARGETS, roofline_row
from playground.experiments import EXPERIMENTS, run_roofline
from playground.experiments.cli import main
from playground.roofline import (Ceilings, ModelShape, Storage, decode_cost, machine_ceilings, measure_bandwidth,
                                 measure_peak, prefill_cost, storage_of, trace_points)
from playground.trace import KVShape

SMOL = ModelShape(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3, head_dim=64, vocab=49152)
TINY = ModelShape(layers=2, hidden=64, intermediate=128, heads=4, kv_heads=2, head_dim=16, vocab=400)
FP32 = Storage("fp32", 4, 4, 4)
GGUF4 = Storage("gguf", 20 / 32, 34 / 32, 4)
FAKE = Ceilings(peak_flops=40e9, bandwidth=10e9, threads=2, peak_method="m", bandwidth_method="b", seconds=0.0)


# --- counts, by hand

def test_smollm2_parameters_by_hand():
    q = o = 576 * 9 * 64            # 331,776 each
    k = v = 576 * 3 * 64            # 110,592 each
    mlp = 3 * 576 * 1536            # gate, up, down: 2,654,208
    assert SMOL.layer_params == q + k + v + o + mlp == 3_538_944
    assert SMOL.head_params == 49152 * 576 == 28_311_552
    norms = 30 * 2 * 576 + 576      # the published 134,515,008 parameters = matrices + RMSNorm weights
    assert 30 * SMOL.layer_params + SMOL.head_params + norms == 134_515_008


def test_smollm2_kv_bytes_per_token_fp32():
    assert SMOL.kv_elements(1) * 4 == 2 * 30 * 3 * 64 * 4 == 46_080
    assert SMOL.kv_elements(1) * 4 == KVShape(30, 3, 64, 4).formula_bytes(1)


def test_smollm2_fp32_decode_step_by_hand():
    cost = decode_cost(SMOL, FP32, [100])
    params = 30 * 3_538_944 + 28_311_552                       # 134,479,872 matrix weights, each read once
    assert cost.weight_bytes == params * 4 == 537_919_488
    assert cost.kv_bytes == 100 * 46_080 == 4_608_000
    assert cost.flops == 2 * params + 2 * 2 * 30 * 9 * 64 * 100 == 275_871_744
    assert cost.intensity == pytest.approx(275_871_744 / (537_919_488 + 4_608_000))   # ~0.5 FLOP/byte


def test_smollm2_gguf4_weight_bytes_by_hand():
    cost = decode_cost(SMOL, GGUF4, [1])
    layers = 30 * 3_538_944 // 32 * 20         # Q4_1: 3,317,760 blocks of 20 bytes = 66,355,200
    head = 28_311_552 // 32 * 34               # Q8_0: 884,736 blocks of 34 bytes = 30,081,024
    assert cost.weight_bytes == layers + head == 96_436_224


def test_smollm2_prefill_by_hand():
    n = 512
    cost = prefill_cost(SMOL, FP32, n)
    # every layer matrix for each of the 512 rows; the LM head once (last position's logits only);
    # causal attention: row i attends i positions, 1 + 2 + ... + 512 = 131,328
    flops = 2 * 30 * 3_538_944 * 512 + 2 * 28_311_552 + 2 * 2 * 30 * 9 * 64 * 131_328
    assert cost.flops == flops
    assert cost.kv_bytes == 512 * 46_080
    assert cost.intensity > 100 > decode_cost(SMOL, FP32, [512]).intensity * 100


def test_tiny_counts_by_hand_and_against_the_model(tiny_backend):
    shape = ModelShape.of(tiny_backend.config)
    assert shape == TINY
    assert shape.layer_params == 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128 == 36_864
    norms = 2 * 2 * 64 + 64
    assert 2 * shape.layer_params + shape.head_params + norms == sum(
        p.numel() for p in tiny_backend.model.parameters())           # tied: the embedding is the head
    assert storage_of(tiny_backend) == Storage("float32 weights (4 B)", 4, 4, 4)
    cost = decode_cost(shape, storage_of(tiny_backend), [10, 20])   # a batch of two rows
    assert cost.flops == 2 * 2 * 36_864 * 2 + 2 * 25_600 * 2 + 2 * 2 * 2 * 4 * 16 * 30
    assert cost.weight_bytes == (2 * 36_864 + 25_600) * 4      # the weights are read once for both rows
    assert cost.kv_bytes == 2 * 2 * 2 * 16 * 30 * 4


def test_batching_moves_decode_right_and_prediction_picks_the_higher_roof():
    one, eight = decode_cost(SMOL, GGUF4, [64]), decode_cost(SMOL, GGUF4, [64] * 8)
    assert eight.intensity > 6 * one.intensity   # weights read once for 8 rows; each row reads its own KV
    assert FAKE.bound(one) == "memory" and FAKE.predict(one) == one.bytes / 10e9
    big = prefill_cost(SMOL, GGUF4, 1024)
    assert FAKE.bound(big) == "compute" and FAKE.predict(big) == big.flops / 40e9


def test_storage_of_names_the_gguf_blocks():
    backend = SimpleNamespace(name="onnx-gguf4", dtype="q4_1", kv_shape=KVShape(30, 3, 64, 4))
    assert (storage_of(backend).layer_bytes, storage_of(backend).head_bytes) == (20 / 32, 34 / 32)
    torch16 = SimpleNamespace(name="torch", dtype="float16", kv_shape=KVShape(30, 3, 64, 2))
    assert (storage_of(torch16).layer_bytes, storage_of(torch16).kv_bytes) == (2, 2)


# --- the probes

class TickClock:
    """roofline's clock, made deterministic: each reading is 0.1 s after the one before."""

    def __init__(self):
        self.now = -0.1

    def perf_counter(self):
        self.now += 0.1
        return self.now


class CancelAt(threading.Event):
    """A cancel event that reads as set from its `n`-th check on: a Stop pressed between two repeats."""

    def __init__(self, n: int):
        super().__init__()
        self.checks, self.n = 0, n

    def is_set(self):
        self.checks += 1
        return self.checks >= self.n


def test_probes_measure_something_within_their_budget(monkeypatch):
    """The budget decides the repeats (at least 2), and the figure is the work over the best repeat: on a clock
    that moves 0.1 s a reading, a 0.25 s budget gives 2 repeats of 0.1 s, a 0.65 s one 3."""
    monkeypatch.setattr(roofline, "time", TickClock())
    peak, peak_method = measure_peak(1, budget_s=0.25, shape=(64, 256, 256))
    monkeypatch.setattr(roofline, "time", TickClock())
    bandwidth, bw_method = measure_bandwidth(1, budget_s=0.65, nbytes=16 * roofline.MiB)
    assert peak == pytest.approx(2 * 64 * 256 * 256 / 0.1) and bandwidth == pytest.approx(16 * roofline.MiB / 0.1)
    assert "MatMul" in peak_method and "best of 2 runs" in peak_method and "measured here" in peak_method
    assert "ReduceSum" in bw_method and "16 MiB" in bw_method and "best of 3 reads" in bw_method


def test_probes_stop_at_once_when_cancelled_before():
    cancel = threading.Event()
    cancel.set()
    assert measure_peak(1, budget_s=30, cancel=cancel) == (0.0, roofline.PEAK_METHOD.format(
        m=roofline.PEAK_SHAPE[0], k=roofline.PEAK_SHAPE[1], n=roofline.PEAK_SHAPE[2], r=0, t=1))
    bandwidth, method = measure_bandwidth(1, budget_s=30, cancel=cancel, nbytes=16 * roofline.MiB)
    assert bandwidth == 0.0 and "best of 0 reads" in method


def test_probe_stops_when_cancelled_midway():
    """Stop between two repeats: the probe ends there (a 30 s budget would allow 50) with the repeats made."""
    bandwidth, method = measure_bandwidth(1, budget_s=30, cancel=CancelAt(4), nbytes=16 * roofline.MiB)
    assert bandwidth > 0 and "best of 2 reads" in method


@pytest.mark.slow
def test_a_cancelled_measurement_is_not_cached(monkeypatch):
    monkeypatch.setattr(roofline, "_CACHE", {})
    cancel = threading.Event()
    cancel.set()
    first = machine_ceilings(threads=1, cancel=cancel)
    assert first.cancelled and roofline._CACHE == {}


# --- a trace on the roofline, and the chart

def fake_trace(prompt: int, latencies):
    steps = [SimpleNamespace(index=i, latency=t, seq_len=prompt + i, rows=None) for i, t in enumerate(latencies)]
    return SimpleNamespace(prompt_ids=list(range(prompt)), steps=steps)


def test_trace_points_first_step_is_prefill_then_decode():
    points = trace_points(fake_trace(100, [0.05, 0.02, 0.02]), SMOL, FP32, FAKE)
    assert [p.phase for p in points] == ["prefill", "decode", "decode"]
    assert points[0].rows == 100 and points[1].rows == 1 and points[1].seq_len == 101
    assert points[0].flops == prefill_cost(SMOL, FP32, 100).flops
    assert points[1].predicted_s == pytest.approx(decode_cost(SMOL, FP32, [101]).bytes / 10e9)
    assert points[1].ratio == pytest.approx(0.02 / points[1].predicted_s)


def test_chart_labels_predicted_and_measured():
    fig = plot_roofline(trace_points(fake_trace(64, [0.05, 0.02]), SMOL, GGUF4, FAKE), FAKE, "t")
    names = [t.name for t in fig.data]
    assert any("measured here" in n for n in names)           # the roof: ceilings measured on this machine
    for phase in ("prefill", "decode"):
        assert any(phase in n and "measured" in n for n in names)
        assert any(phase in n and "predicted" in n for n in names)
    assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"
    assert "predicted" in fig.data[1].hovertemplate and "measured" in fig.data[1].hovertemplate


# --- the experiment on the tiny model

@pytest.fixture(scope="module")
def sweep(tiny_onnx_engine):
    return run_roofline(tiny_onnx_engine, min_length=8, max_length=32, points=2, max_batch=4)


@pytest.mark.slow
def test_roofline_experiment_on_the_tiny_model(sweep):
    assert not sweep.cancelled
    prefill = [p for p in sweep.points if p.phase == "prefill"]
    batched = sweep.points[-3:]                    # the decode_rows calls, after the Runs' points
    assert [p.rows for p in prefill] == [8, 32]
    assert [(p.phase, p.rows, p.seq_len) for p in sweep.points[:4]] == [   # a Run: its Steps' own seq_len
        ("prefill", 8, 8), ("decode", 1, 9), ("decode", 1, 10), ("decode", 1, 11)]
    assert [(p.phase, p.rows, p.seq_len) for p in batched] == [("decode", 1, 9), ("decode", 2, 9), ("decode", 4, 9)]
    assert batched[0].intensity < batched[1].intensity < batched[2].intensity < prefill[-1].intensity
    assert all(p.measured_s > 0 and p.predicted_s > 0 for p in sweep.points)
    d = json.loads(json.dumps(sweep.to_dict()))
    assert d["experiment"] == "roofline" and "prefill_ratio" in d["summary"] and "ratio" in d["points"][0]
    assert len(plot_roofline_sweep(sweep).data) == 6   # the roof, measured and predicted for each phase, the ridge


def test_roofline_experiment_cancelled_returns_partial(tiny_onnx_engine):
    cancel = threading.Event()
    cancel.set()
    r = run_roofline(tiny_onnx_engine, min_length=8, max_length=16, points=2, max_batch=2, cancel=cancel)
    assert r.cancelled and len(r.points) == 0


@pytest.mark.slow
def test_roofline_experiment_on_torch_leaves_batching_out(tiny_engine):
    r = EXPERIMENTS["roofline"].run(tiny_engine, {"min_length": 8, "max_length": 8, "points": 1, "max_batch": 4})
    assert {p.rows for p in r.points if p.phase == "decode"} == {1} and "ONNX" in r.batch_note


@pytest.mark.slow   # the whole path end to end: seconds on the tiny model
def test_roofline_cli_writes_json_and_html(tmp_path):
    assert main(["roofline", "--out", str(tmp_path), "--model", "tiny", "--backend", "onnx", "--roof-min-length", "8",
                 "--roof-max-length", "16", "--roof-points", "2", "--roof-batch", "2"]) == 0
    assert json.loads((tmp_path / "roofline.json").read_text())["experiment"] == "roofline"
    assert (tmp_path / "roofline.html").stat().st_size > 1000


# --- the bench row

def test_bench_row_on_the_tiny_model():
    row = roofline_row("tiny", "onnx", prompt_tokens=64, decode_steps=4, repeats=1).to_json()
    assert row["prefill_tokens"] == 64 and row["decode_steps"] == 4
    assert row["prefill_off_by"] >= 1 and row["prefill_off_by"] == pytest.approx(
        max(row["prefill_ratio"], 1 / row["prefill_ratio"]), rel=0.02)
    assert set(row["targets_met"]) == set(TARGETS) and isinstance(row["targets_met"]["prefill_off_by"], bool)
    assert row["decode_ratio"] > 0 and "measured here" in row["bandwidth_method"]


# --- the Generate tab's "why" accordion

@pytest.mark.slow
def test_generate_tab_draws_the_last_runs_roofline(app_url):
    from gradio_client import Client

    from tests.helpers import generate_args
    client = Client(app_url, verbose=False)
    figure, text = client.predict(backend="torch", api_name="/roofline")
    assert figure is None and "generate first" in text
    client.predict(*generate_args(max_new_tokens=4), api_name="/generate")
    figure, text = client.predict(backend="torch", api_name="/roofline")
    assert "prefill of" in text and "decode (median of 3 steps)" in text and "Predicted" in text
    names = [t.get("name", "") for t in json.loads(figure["plot"])["data"]]   # the ridge line has none
    assert any("decode (measured" in n for n in names) and any("decode (predicted" in n for n in names)
