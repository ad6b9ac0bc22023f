"""The batch bench row (playground/bench/batch.py) on the tiny model: every size decodes its requests together, the ratios
are the printed figures' own, `targets_met` follows them, a missing llama-batched-bench leaves an error field
and the rest of the row, its table is read from a captured output, and the kernels' bound follows its formula."""
from __future__ import annotations

import json
import stat

import numpy as np
import onnx
import pytest
from gguf import GGMLQuantizationType as QType
from gguf.quants import quantize
from onnx import TensorProto, helper

from playground.bench import peer
from playground.backends.gguf_blocks import q4_1_as_nbits
from playground.backends.onnx_graph import make_model
from playground.backends.onnx_nbits import nbits_nodes
from playground.bench.batch import AT, TARGETS, at, batch_row, gain_ceiling, step_bound
from playground.bench.stats import ratio
from playground.llamacpp import parse_batched_bench

SIZES, NEW = (1, 2, 8), 6

# `llama-batched-bench -m SmolLM2-135M-Instruct.Q4_1.gguf -c 1792 -npp 32 -ntg 64 -npl 1,2,4,8,16 -t 2`, its
# stdout on a 2-core machine with a neighbour busy (hence B = 4)
BATCHED_BENCH_OUTPUT = """
llama_batched_bench: n_kv_max = 4096, n_batch = 2048, n_ubatch = 512, flash_attn = -1, is_pp_shared = 0, \
is_tg_separate = 0, n_gpu_layers = -1, n_threads = 2, n_threads_batch = 2

|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|    32 |     64 |    1 |     96 |    0.625 |    51.21 |    5.706 |    11.22 |    6.330 |    15.16 |
|    32 |     64 |    2 |    192 |    0.324 |   197.49 |    1.765 |    72.54 |    2.089 |    91.93 |
|    32 |     64 |    4 |    384 |    0.637 |   200.96 |   29.245 |     8.75 |   29.882 |    12.85 |
|    32 |     64 |    8 |    768 |    1.298 |   197.17 |    3.919 |   130.64 |    5.217 |   147.20 |
|    32 |     64 |   16 |   1536 |    2.204 |   232.29 |    6.017 |   170.17 |    8.222 |   186.82 |

"""


@pytest.fixture(scope="module")
def row():
    """The row on the tiny model's 4-bit graph (MatMulNBits: a bound to compute), llama.cpp asked for but missing."""
    from playground import llamacpp

    def missing(name):
        raise llamacpp.LlamaCppMissing(f"{name} is not installed: {llamacpp.INSTALL_HINT}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(llamacpp, "llama_binary", missing)
        out = batch_row("tiny", "onnx-int4", sizes=SIZES, new_tokens=NEW, llama=True).to_json()
    json.dumps(out)
    return out


@pytest.mark.slow
def test_every_size_decodes_its_requests_together_to_the_token_budget(row):
    points = row["ours"]["points"]
    assert [p["concurrency"] for p in points] == list(SIZES) and row["ours"]["slots"] == max(SIZES)
    for p in points:
        assert p["output_tokens"] == p["concurrency"] * NEW   # EOS ignored: every request makes NEW tokens
        assert p["rows_max"] == p["concurrency"]              # one decode call carried every request
        assert p["total_tps"] > 0 and p["tpot_ms"] > 0


def test_the_ratios_are_the_printed_figures_own_and_targets_met_follows_them(row):
    ours = row["ours"]["points"]
    assert row["total_x_8_vs_1"] == round(at(ours, 8, "total_tps") / at(ours, 1, "total_tps"), 2)
    assert row["tpot_x_8_vs_1"] == round(at(ours, 8, "tpot_ms") / at(ours, 1, "tpot_ms"), 2)
    for key, (op, target) in TARGETS.items():
        value = row[key]
        assert row["targets_met"][key] == (None if value is None else value >= target if op == ">=" else
                                           value <= target)
    assert set(row["targets"]) == set(TARGETS)


def test_a_missing_llama_batched_bench_is_an_error_field_and_the_rest_still_runs(row):
    assert "make llama" in row["llama"]["error"] and "points" not in row["llama"]
    assert row["total_x_8_vs_llama"] is None and row["targets_met"]["total_x_8_vs_llama"] is None
    assert row["total_x_8_vs_1"] is not None and row["step"]["step_ms_1"] > 0


def test_the_bound_is_8_steps_at_one_row_over_the_kernels_at_8_requests(row):
    step = row["step"]
    assert step["kernels_nodes"] > 0 and step["kernels_int8x2_nodes"] == 0   # onnx-int4: one pass everywhere
    assert row["total_x_8_vs_1_max"] == step["total_x_8_vs_1_max"]
    assert step["total_x_8_vs_1_max"] == pytest.approx(AT * step["step_ms_1"] / step["kernels_ms_8"], rel=0.01)
    assert step["step_gain_8_vs_1"] == ratio(AT * step["step_ms_1"], step["step_ms_8"])
    assert "upper bound" in step["bound"] and "not a measurement" in step["bound"]


@pytest.mark.parametrize("step_ms_1, kernels_ms_n, n, ceiling", [(20.0, 40.0, 8, 4.0), (10.0, 10.0, 8, 8.0),
                                                                  (10.0, 20.0, 1, 0.5), (6.0, 16.0, 16, 6.0)])
def test_gain_ceiling_known_answers(step_ms_1, kernels_ms_n, n, ceiling):
    assert gain_ceiling(step_ms_1, kernels_ms_n, n) == ceiling


def test_a_graph_without_matmulnbits_has_steps_but_no_bound(tiny_onnx_engine):
    out = step_bound(tiny_onnx_engine.backend)
    assert out["step_ms_1"] > 0 and out["step_ms_8"] > 0 and "no MatMulNBits" in out["bound_error"]
    assert "total_x_8_vs_1_max" not in out


def test_int8x2_nodes_multiply_twice_the_rows_of_one_pass_nodes():
    """kernels_only(model, n, split_rows=2n): a node reading hi + lo rows gets 2n rows, a one-pass node n."""
    rng = np.random.default_rng(0)
    k = n = 64
    w = q4_1_as_nbits(quantize(rng.standard_normal((n, k)).astype(np.float32), QType.Q4_1), n, k)
    one, inits1 = nbits_nodes("a", "x", w, "h", "int8")
    split, inits2 = nbits_nodes("b", "h", w, "y", "int8x2")
    graph = helper.make_graph(one + split, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, n])], inits1 + inits2)
    model = make_model(graph, {"": 18, "com.microsoft": 1})
    kernels = peer.kernels_only(model, 8, split_rows=16)
    # int8: the layer's kernel and its minimums' remainder (k / 32 block means); int8x2: hi + lo rows
    assert [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in kernels.graph.input] == [
        [1, 8, k], [1, 8, k // 32], [1, 16, k]]
    assert [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in peer.kernels_only(model, 3).graph.input] \
        == [[1, 3, k], [1, 3, k // 32], [1, 3, k]]   # without split_rows every node reads `rows`, as the floor row has it
    assert peer.kernels_ms(kernels, repeats=2) > 0
    onnx.checker.check_model(kernels)


def test_the_batched_bench_table_is_read_from_its_output():
    table = parse_batched_bench(BATCHED_BENCH_OUTPUT)
    assert [t["B"] for t in table] == [1, 2, 4, 8, 16]
    assert [t["S_TG t/s"] for t in table] == [11.22, 72.54, 8.75, 130.64, 170.17]
    assert table[3] == {"PP": 32, "TG": 64, "B": 8, "N_KV": 768, "T_PP s": 1.298, "S_PP t/s": 197.17, "T_TG s": 3.919,
                        "S_TG t/s": 130.64, "T s": 5.217, "S t/s": 147.2}
    assert parse_batched_bench("no table here\n") == []


def test_llama_batched_bench_row_runs_the_sweep_and_reads_totals_per_size(tmp_path, monkeypatch):
    """A stand-in binary that records its arguments and prints the captured table: the row's command and points."""
    from playground import llamacpp
    (tmp_path / "out.txt").write_text(BATCHED_BENCH_OUTPUT)
    fake = tmp_path / "llama-batched-bench"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/args.txt\ncat {tmp_path}/out.txt\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(llamacpp, "llama_binary", lambda name: fake)
    monkeypatch.setattr(peer, "llama_cpu_variant", lambda: "zen4")   # the stamp's own program is not faked here
    out = peer.llama_batched_bench_row(gguf=tmp_path / "model.gguf", threads=2)
    warm_up, measured = (tmp_path / "args.txt").read_text().splitlines()
    assert "-ntg 4 -npl 1 " in warm_up + " "
    assert "-npp 32 -ntg 64 -npl 1,2,4,8,16 -t 2" in measured and f"-c {out['context']}" in measured
    assert out["context"] >= 16 * (32 + 64) and out["n_kv_max"] == 4096
    assert at(out["points"], 8, "total_tps") == 130.64
    assert at(out["points"], 8, "tpot_ms") == round(1e3 * 8 / 130.64, 2)   # lockstep: each sequence's TPOT is B / S_TG


@pytest.mark.subprocess
def test_the_batched_bench_row_names_the_variant_the_install_loads(tmp_path, monkeypatch):
    """llama-batched-bench logs no load_backend line: its row takes the variant the same install loads here."""
    program = tmp_path / "llama-batched-bench"
    (tmp_path / "table.txt").write_text(BATCHED_BENCH_OUTPUT)
    program.write_text(f"#!/bin/sh\ncat '{tmp_path / 'table.txt'}'\n")
    program.chmod(0o755)
    monkeypatch.setattr(peer, "llama_tool", lambda name, gguf=None: (program, tmp_path / "model.gguf"))
    monkeypatch.setattr(peer, "llama_cpu_variant", lambda: "zen4")
    row = peer.llama_batched_bench_row()
    assert row["cpu_variant"] == "zen4" and [p["total_tps"] for p in row["points"]][-1] == 170.17
