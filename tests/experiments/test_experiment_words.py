"""The Experiments tab's results in words with units: known records in, known sentences out."""
from __future__ import annotations

from playground.experiments.cache import CacheComparison
from playground.experiments.common import Fit, RunInfo
from playground.experiments.depth import DepthSweep
from playground.experiments.prefill import PrefillSweep, _point
from playground.experiments.roofline import RooflineSweep
from playground.experiments.short_long import RequestMeasure, ShortLongComparison
from playground.experiments.speculative import PresetMeasure, SpeculativeComparison
from playground.roofline import Ceilings, RooflinePoint
from playground.ui.experiments_tab import summary_markdown
from playground.units import formula, precise_duration, times, tokens, usd

INFO = RunInfo("onnx", "cpu", "int8", "SmolLM2", 2048, 2)


def test_durations_fits_and_prices_read_in_units():
    assert [precise_duration(s) for s in (2.5, 0.0123, 4.52e-4, -3.415e-6, 7e-10, 0.0)] == \
        ["2.5 s", "12.3 ms", "452 µs", "−3.42 µs", "0.7 ns", "0 ns"]
    assert formula([0.0123, 0.000452, -3.415e-06], "L") == "12.3 ms + 452 µs × L − 3.42 µs × L²"
    assert formula([-0.002, 6.2e-5], "depth") == "−2 ms + 62 µs × depth"
    assert [usd(v) for v in (0.000135, 1.1e-5, 0.05, 12.5, 0)] == ["$0.00014", "$0.000011", "$0.050", "$12.50", "$0"]
    assert [times(v) for v in (12.04, 1.234)] == ["12×", "1.2×"]
    assert [tokens(n) for n in (1, 1024)] == ["1 token", "1,024 tokens"]


def test_prefill_sweep_in_words():
    sweep = PrefillSweep(INFO, 3, [_point(16, [0.012, 0.0125, 0.013]), _point(1024, [0.49, 0.4975, 0.51])],
                         Fit((0.0123, 0.000452, -3.415e-06), 0.99876))
    assert sweep.findings() == [
        "shortest prompt (16 tokens): median 12 ms",
        "longest prompt (1,024 tokens): median 498 ms, 2,058 tokens/s",
        "fit to the medians: TTFT ≈ 12.3 ms + 452 µs × L − 3.42 µs × L², where L is the prompt length in tokens "
        "(R² 0.999)"]
    text = summary_markdown(sweep)
    assert "max_length" not in text and "e-06" not in text and "_s" not in text


def test_cache_comparison_in_words():
    cmp = CacheComparison(INFO, 128, 2, cached_latency=[0.3, 0.1], uncached_latency=[0.3, 1.7], cached_cpu=[0.5, 0.2],
                          cached_tokens=[5, 6], uncached_tokens=[5, 6])
    assert cmp.findings() == [
        "with the KV cache: 2 tokens in 400 ms (CPU time 700 ms)",
        "without it (everything recomputed at each step): 2 tokens in 2.0 s",
        "without the cache it took 5.0× as long",
        "the same 2 tokens both ways: the cache changes the cost, not the answer"]
    cut = CacheComparison(INFO, 128, 2, cached_latency=[0.3, 0.1], uncached_latency=[0.3], cached_tokens=[5, 6],
                          uncached_tokens=[7], cancelled=True)
    assert cut.findings()[1:] == ["without it (everything recomputed at each step): 1 token in 300 ms",
                                  "how much longer without the cache: not known (that run did not finish)",
                                  "the tokens differ (1 token compared)"]
    assert "cancelled: partial result" in summary_markdown(cut)


def test_depth_sweep_in_words():
    sweep = DepthSweep(INFO, 256, 6, seq_len=list(range(257, 263)), latency=[0.04, 0.05, 0.06, 0.06, 0.07, 0.08],
                       fit=Fit((-0.002, 6.2e-5), 0.9))
    assert sweep.findings() == ["a decode step early on (first third of the steps): median 50 ms",
                                "late (last third): median 80 ms", "average decode step: 60 ms",
                                "each token more in the KV cache adds 62 µs to a step (a straight-line fit)"]


def test_short_vs_long_in_words():
    short = RequestMeasure("short", 35, 8, 0.04, 0.512, 0.06, 1_258_291, 0.0000101, "eos", "Paris.")
    long = RequestMeasure("long", 875, 48, 0.5, 3.1, 0.06, None, 0.000160, "length", "…")
    cmp = ShortLongComparison(INFO, 48, 0.15, 0.60, short, long, document_truncated=True)
    assert cmp.findings() == [
        "short request: 35 tokens in, 8 out · TTFT 40 ms · end to end 512 ms · KV cache 1.2 MiB · "
        "estimated cost (USD) $0.000010",
        "long request: 875 tokens in, 48 out · TTFT 500 ms · end to end 3.1 s · KV cache not measured · "
        "estimated cost (USD) $0.00016",
        "long ÷ short: 25× the input tokens, 6.0× the output tokens, 12× the TTFT, 6.1× the end-to-end time, "
        "16× the estimated cost",
        "estimated cost: tokens × an illustrative price of $0.15 per million input and $0.60 per million "
        "output tokens",
        "the document was cut to fit the model's context window"]
    assert "est_cost_usd" not in summary_markdown(cmp)


def test_roofline_in_words():
    ceilings = Ceilings(peak_flops=50e9, bandwidth=10e9, threads=2, peak_method="matmul", bandwidth_method="copy",
                        seconds=1.0)
    prefill = RooflinePoint("prefill", 1024, 1024, 2.6e11, 2.7e8, 7.0, 3.7, "compute")
    decodes = [RooflinePoint("decode", 1, 1030, 2.7e8, 1.3e8, s, 0.0129, "memory") for s in (0.042, 0.030, 0.050)]
    batch = RooflinePoint("decode", 8, 33, 2.2e9, 1.4e8, 0.02, 0.014, "memory")
    sweep = RooflineSweep(INFO, "4-bit blocks", ceilings, [prefill, *decodes, batch])
    assert sweep.findings() == [
        "this machine, measured here: matmul peak 50.0 GFLOP/s, memory bandwidth 10.0 GB/s; below 5.0 FLOPs per "
        "byte a step is memory-bound",
        "prefill of 1,024 tokens: 7 s measured, 3.7 s predicted (1.9× the prediction, compute-bound)",
        "one decode step (one request): 42 ms measured, 12.9 ms predicted (3.3× the prediction, memory-bound)",
        "one decode step for 8 requests at once: 20 ms measured, 14 ms predicted (1.4× the prediction, memory-bound)"]
    assert "_s" not in summary_markdown(sweep) and "gflops" not in summary_markdown(sweep)


def test_speculative_in_words():
    def measure(preset, passes, proposed, accepted, spec_tps, same, first):
        return PresetMeasure(preset=preset, prompt_tokens=800, output_tokens=32, passes=passes, proposed=proposed,
                             accepted=accepted, plain_decode_tps=20.0, spec_decode_tps=spec_tps, same_tokens=same,
                             first_difference=first, text="…")
    copied = measure("reread", 12, 40, 20, 41.0, True, None)
    none = measure("question", 32, 0, 0, None, False, 5)
    result = SpeculativeComparison(INFO, 4, 3, 32, 1, [copied, none])
    assert result.findings() == [
        "reread: decode 41.0 tokens/s speculative against 20.0 tokens/s plain (2.0× plain's speed) · 2.67 tokens a "
        "forward pass · 20 of 40 proposed tokens accepted (50%) · the same tokens as plain decoding",
        "question: decode not measured speculative against 20.0 tokens/s plain · 1.00 tokens a forward pass · "
        "no proposal made · the tokens differ from plain decoding from token 5",
        "speculative: up to 4 tokens proposed a pass, copied from where the last 3 tokens appeared before; decode "
        "speed is the median of 1 run each way"]
    assert "tokens_per_pass" not in summary_markdown(result)
