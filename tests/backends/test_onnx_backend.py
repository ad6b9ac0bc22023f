"""ONNX Runtime backend: same greedy tokens as PyTorch, measured KV bytes, export cache reuse and repair,
the int8 variant, and the two-engine comparison. Cache logic runs on the tiny model in tmp_path."""
from __future__ import annotations

import subprocess
import sys

import onnx
import pytest

from playground.backends import available_backends, create_backend, default_backend_name
from playground.backends import onnx_export
from playground.backends.onnx_backend import OnnxBackend
from playground.charts.compare import plot_compare
from playground.compare import compare_backends, token_agreement
from playground.config import GenerationSettings
from playground.engine import Engine
from playground.models import bundled_gguf_path

GREEDY = GenerationSettings(max_new_tokens=24, temperature=0.0)
PROMPTS = ["What is the capital of France?",
           "Write a haiku about a cache.",
           "List three prime numbers and explain why they are prime."]


# --- the tiny model, exported into tmp_path

@pytest.fixture
def tiny_dir(tmp_path):
    from playground.tiny import build_tiny_model
    model, tok = build_tiny_model()
    src = tmp_path / "tiny-model"
    model.save_pretrained(src)
    tok.save_pretrained(src)
    return src


@pytest.fixture
def count_exports(monkeypatch):
    calls = []
    real = onnx_export._export

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(onnx_export, "_export", counted)
    return calls


@pytest.mark.slow
def test_second_load_reuses_the_export(tiny_dir, tmp_path, count_exports):
    folder = onnx_export.exported_dir(tiny_dir, cache_dir=tmp_path)
    marker = folder / onnx_export.MARKER
    stamp = marker.stat().st_mtime_ns
    assert onnx_export.exported_dir(tiny_dir, cache_dir=tmp_path) == folder
    OnnxBackend.load(str(tiny_dir), cache_dir=tmp_path)
    assert len(count_exports) == 1 and marker.stat().st_mtime_ns == stamp
    assert not list(folder.parent.glob("*.partial-*"))  # staging folders are gone


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["delete marker", "truncate model", "garble model"])
def test_broken_cache_is_rebuilt(tiny_dir, tmp_path, count_exports, damage):
    folder = onnx_export.exported_dir(tiny_dir, cache_dir=tmp_path)
    model = folder / onnx_export.MODEL_FILE
    if damage == "delete marker":
        (folder / onnx_export.MARKER).unlink()
    elif damage == "truncate model":
        model.write_bytes(model.read_bytes()[: model.stat().st_size // 3])
    else:  # the same size, so only ONNX Runtime failing to parse it can tell
        model.write_bytes(b"\0" * model.stat().st_size)
    backend = OnnxBackend.load(str(tiny_dir), cache_dir=tmp_path)
    assert len(count_exports) == 2 and onnx_export.is_complete(folder)
    assert len(Engine(backend).generate("Hello", GenerationSettings(max_new_tokens=3)).steps) == 3


@pytest.mark.slow
def test_tiny_onnx_matches_torch_and_measures_kv(tiny_dir, tmp_path, tiny_engine):
    for quant in (None, "int8", "int4"):
        backend = OnnxBackend.load(str(tiny_dir), quant=quant, cache_dir=tmp_path)
        assert (backend.name, backend.dtype, backend.device) == (
            (f"onnx-{quant}", quant, "cpu") if quant else ("onnx", "float32", "cpu"))
        trace = Engine(backend).generate("The KV cache", GenerationSettings(max_new_tokens=8, chat=False))
        assert [s.kv_bytes for s in trace.steps] == [trace.kv_shape.formula_bytes(s.seq_len) for s in trace.steps]
        assert backend.session.get_outputs()[0].shape[1] == 1  # the LM head sees the last position only
        ops = {n.op_type for n in onnx.load(str(backend.folder / onnx_export.MODEL_FILE)).graph.node}
        assert "GroupQueryAttention" in ops and "Softmax" not in ops  # one fused node per layer
        assert ("MatMulNBits" in ops) == (quant == "int4")
        if quant == "int4":  # the tied LM head is quantized too (8-bit), not left as a fp32 Transpose
            head = next(n for n in onnx.load(str(backend.folder / onnx_export.MODEL_FILE)).graph.node
                        if "logits" in n.output)
            assert head.op_type == "MatMulNBits" and {a.name: a.i for a in head.attribute}["bits"] == 8
        if not quant:
            assert trace.output_ids == tiny_engine.generate("The KV cache", trace.settings).output_ids
            assert backend.generate_reference(trace.prompt_ids, 8) == trace.output_ids


@pytest.mark.slow
def test_int4_is_cached_beside_fp32(tiny_dir, tmp_path, count_exports):
    folder = onnx_export.exported_dir(tiny_dir, quant="int4", cache_dir=tmp_path)
    stamp = (folder / onnx_export.MARKER).stat().st_mtime_ns
    assert folder.name == onnx_export.exported_dir(tiny_dir, cache_dir=tmp_path).name + "-int4-b32-h8"
    assert OnnxBackend.load(str(tiny_dir), quant="int4", cache_dir=tmp_path).folder == folder
    assert len(count_exports) == 1 and (folder / onnx_export.MARKER).stat().st_mtime_ns == stamp
    assert "onnx_ir" not in sys.modules or sys.modules["onnx_ir"].__spec__  # no stand-in left behind


@pytest.mark.slow
def test_backends_are_selectable_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    assert available_backends() == ["torch", "onnx", "onnx-int8", "onnx-int4", "onnx-gguf4", "onnx-gguf4-int8x2",
                                    "onnx-gguf4-int8", "onnx-gguf4-fp32"]
    assert default_backend_name("cpu", "tiny") == "onnx" and default_backend_name("cuda") == "torch"
    assert default_backend_name("cpu") == ("onnx-gguf4" if bundled_gguf_path() else "onnx")   # the bundled GGUF
    backend = create_backend("onnx-int8", "tiny", device="cpu")
    assert backend.describe() == "onnx-int8 · cpu · int8"


@pytest.mark.subprocess
def test_importing_the_backend_does_no_heavy_work():
    code = ("import sys, playground.backends as b; b.available_backends(); "
            "print(sorted(m for m in ('optimum', 'onnx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- comparing two engines

@pytest.mark.parametrize("a, b, share, first", [
    ([1, 2, 3, 4], [1, 2, 3, 4], 1.0, None),
    ([1, 2, 3, 4], [1, 9, 3, 4], 0.75, 1),
    ([1, 2], [1, 2, 3, 4], 0.5, 2),
    ([], [], 1.0, None),
])
def test_token_agreement(a, b, share, first):
    assert token_agreement(a, b) == (share, first)


@pytest.mark.slow
def test_same_engine_twice_agrees_fully(tiny_engine):
    c = compare_backends("Hello there", GenerationSettings(max_new_tokens=6), tiny_engine, tiny_engine)
    assert (c.agreement, c.first_divergence) == (1.0, None)
    assert [r["tokens"] for r in c.rows()] == [6, 6]
    fig = plot_compare(c)
    assert {t.legendgroup for t in fig.data} == {"torch (float32)"}
    assert len(fig.data) == 6 and all(len(t.x) for t in fig.data)


# --- the bundled model (real cache; the export takes ~35-70 s once)

@pytest.fixture(scope="module")
def smol_onnx():
    return Engine(create_backend("onnx", None, device="cpu"))


@pytest.mark.integration
def test_onnx_greedy_tokens_equal_torch(smol_onnx, smol_engine):
    for prompt in PROMPTS:
        onnx_trace = smol_onnx.generate(prompt, GREEDY)
        assert onnx_trace.output_ids == smol_engine.generate(prompt, GREEDY).output_ids, prompt
        assert [s.kv_bytes for s in onnx_trace.steps] == [
            onnx_trace.kv_shape.formula_bytes(s.seq_len) for s in onnx_trace.steps]


@pytest.mark.integration
@pytest.mark.parametrize("quant", ["int8", "int4"])
def test_quantized_runs_end_to_end(smol_onnx, quant):
    engine = Engine(create_backend(f"onnx-{quant}", None, device="cpu"))
    c = compare_backends(PROMPTS[0], GREEDY.with_(max_new_tokens=6), smol_onnx, engine)
    assert len(c.b.steps) >= 1 and c.b.dtype == quant
    assert [s.kv_bytes for s in c.b.steps] == [c.b.kv_shape.formula_bytes(s.seq_len) for s in c.b.steps]
    assert c.b.kv_shape.bytes_per_element == 4
    assert {t.legendgroup for t in plot_compare(c).data} == {"onnx (float32)", f"onnx-{quant} ({quant})"}


@pytest.mark.slow
def test_onnx_continues_from_a_cached_prefix_like_a_full_prefill(tiny_dir, tmp_path):
    from playground.engine import common_prefix
    engine = Engine(OnnxBackend.load(str(tiny_dir), cache_dir=tmp_path))
    settings = GenerationSettings(max_new_tokens=6, system_prompt="A shared system prompt for both requests.")
    _, a = engine.prompt_ids("First question?", settings)
    _, b = engine.prompt_ids("Second one?", settings)
    prefix = engine.cache_prefix(common_prefix(a, b))
    for prompt in ("First question?", "Second one?"):
        cached = engine.run(prompt, settings, prefix=prefix).wait()
        assert cached.output_ids == engine.generate(prompt, settings).output_ids and cached.cached_tokens > 5


def test_threads_follow_the_cpus_this_process_may_use(monkeypatch):
    # pinned to one CPU (taskset, a container's cpuset), two ONNX Runtime threads would fight over it
    import os

    from playground.backends.onnx_backend import physical_cores
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert physical_cores() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(256)), raising=False)
    import psutil
    assert physical_cores() == (psutil.cpu_count(logical=False) or os.cpu_count())
