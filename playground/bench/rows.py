"""The bench's rows as types, each printed as one JSON line: the stamp (commit, machine, date), then the rows.

    say(Stamp.now("python -m playground.bench"))   # {"row": "stamp", "commit": "1a2b3c4d5e6f", "machine": {...}, ...}
    say(PrefillRow("onnx", 1024, 0.812, 1261.1))   # {"backend": "onnx", "prefill_tokens": 1024, ...}
    say({"row": "batch", ...})                     # TypeError: every row printed has its type here

`to_json()` gives the keys the bench has always printed, in their order (results.py and the tests read
them); a field a row has only sometimes is left out when None (Row.OPTIONAL). Every command of
`python -m playground.bench` that prints rows prints the stamp first (__main__.main; not in a child
process the bench started, whose rows the parent prints again as `Relayed`); results.py renders the dated
page from the stamp and the rows. Typed here: the stamp; per backend the backend, prefill, fidelity and
error rows; llama-bench, the matmul peak, the kernel floor and the summary of ratios (peer.py); the
interleaved rounds and their medians; the batch, serve, aiperf, clients, loop, room, roofline and speculative
rows; ui and ui-flat; remote. Left out: types for the figures nested in a row (a sweep's points, a scheduler's
figures, the bounds): they stay dicts, their keys named in the row's comments and its module.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..trace import Phase

ROOT = Path(__file__).resolve().parents[2]
STAMP = "stamp"
PREFILL = Phase.PREFILL.value   # the prefill row's kind: the prefill phase's figure alone


class Row:
    """A typed row: its fields as the JSON object the bench prints, in their order. OPTIONAL: fields left out
    when None (keys a row has only sometimes). FLAT: dict fields whose items stand at the top level in the
    field's place (keys named by what was measured: a backend, a preset). ON_ERROR: where set, a row with an
    `error` prints only these fields and the error (the others were never measured).

    >>> ErrorRow("onnx", "boom").to_json()
    {'backend': 'onnx', 'error': 'boom'}
    """

    OPTIONAL: tuple[str, ...] = ()
    FLAT: tuple[str, ...] = ()
    ON_ERROR: tuple[str, ...] | None = None

    def to_json(self) -> dict:
        out: dict = {}
        for key, value in asdict(self).items():
            if value is None and key in self.OPTIONAL:
                continue
            if key in self.FLAT:
                out.update(value)
            else:
                out[key] = value
        if self.ON_ERROR is not None and out.get("error") is not None:
            return {key: out[key] for key in (*self.ON_ERROR, "error")}
        return out


@dataclass(frozen=True)
class Machine(Row):
    cpu: str
    cores: int | None
    memory_gb: float | None
    os: str
    python: str
    cpu_flags: dict[str, bool] | None = None   # avx2, avx512f, avx512_vnni, avx_vnni (quiet.cpu_flags)

    @classmethod
    def here(cls) -> "Machine":
        """This machine, as far as the platform says (the CPU model from /proc/cpuinfo on Linux)."""
        cpu = platform.processor() or platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        memory_gb = None
        try:
            memory_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1)
        except (ValueError, OSError, AttributeError):
            pass
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        from .quiet import cpu_flags
        return cls(cpu, cores, memory_gb, platform.platform(), platform.python_version(), cpu_flags())


@dataclass(frozen=True)
class Stamp(Row):
    """What a run of the bench was measured on: commit (None outside a git checkout), machine (with its CPU
    flags), UTC date, load, the llama.cpp CPU variant that loads here; the first line every
    `python -m playground.bench` command that prints rows prints.

    >>> Stamp("abc", False, Machine("CPU", 2, 8.0, "Linux", "3.11", {"avx2": True}), "2026-12-04 02:00 UTC",
    ...       [0.5], llama_cpu_variant="zen4").to_json()   # doctest: +NORMALIZE_WHITESPACE
    {'row': 'stamp', 'commit': 'abc', 'uncommitted_changes': False, 'machine': {'cpu': 'CPU', 'cores': 2,
    'memory_gb': 8.0, 'os': 'Linux', 'python': '3.11', 'cpu_flags': {'avx2': True}}, 'date': '2026-12-04 02:00 UTC',
    'load_average': [0.5], 'command': None, 'llama_cpu_variant': 'zen4'}
    """

    row: str = field(default=STAMP, init=False)
    commit: str | None                   # 12 hex digits of HEAD; None outside a git checkout (or without git)
    uncommitted_changes: bool            # tracked files differ from HEAD
    machine: Machine
    date: str                            # UTC, to the minute
    load_average: list[float]            # 1, 5 and 15 minutes
    command: str | None = None           # the command line that printed the rows
    llama_cpu_variant: str | None = None    # the libggml-cpu-<variant> llama.cpp loads here (quiet.llama_cpu_variant):
                                            # "built-in" (no run-time dispatch), or why none ("missing: ...")

    @classmethod
    def now(cls, command: str | None = None) -> "Stamp":
        """This checkout, this machine, now (the commit None outside a git checkout)."""
        from .quiet import llama_cpu_variant
        return cls(git("rev-parse", "--short=12", "HEAD") or None,
                   bool(git("status", "--porcelain", "--untracked-files=no")), Machine.here(),
                   datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                   [round(x, 2) for x in os.getloadavg()], command, llama_cpu_variant())


@dataclass(frozen=True)
class ErrorRow(Row):
    """A row that could not be measured, and why (`backend` names what was being measured)."""

    backend: str
    error: str


@dataclass(frozen=True)
class PrefillRow(Row):
    """Median TTFT of a one-token Run from exactly `prefill_tokens` prompt ids (measure_prefill).

    >>> PrefillRow("onnx", 1024, 0.8, 1280.0).to_json()
    {'backend': 'onnx', 'prefill_tokens': 1024, 'prefill_s': 0.8, 'prefill_tps': 1280.0}
    """

    backend: str
    prefill_tokens: int
    prefill_s: float
    prefill_tps: float


@dataclass(frozen=True)
class BackendRow(Row):
    """The engine's step loop against the runtime's plain generate() on one backend (backends.bench_backend)."""

    OPTIONAL = ("agreement_with_fp32", "first_divergence_from_fp32")   # the ONNX variants only

    backend: str
    device: str
    dtype: str
    model: str
    prompt_tokens: int
    new_tokens: int
    generate_new_tokens: int
    repeats: int
    engine_ttft_s: float | None
    engine_decode_tps: float | None
    generate_ttft_s: float | None
    generate_decode_tps: float | None
    engine_matches_generate: float
    load_s: float
    peak_rss_mb: float
    rss_mb: float
    decode_ratio_engine_vs_generate: float | None
    ttft_ratio_engine_vs_generate: float | None
    agreement_with_fp32: float | None = None      # the share of greedy tokens identical to fp32's
    first_divergence_from_fp32: int | None = None


@dataclass(frozen=True)
class FidelityRow(Row):
    """Teacher-forced agreement with onnx fp32 on the bench text (fidelity.fidelity_row); the reference's own
    row (fidelity.write_reference) has no first-copy figures.

    >>> FidelityRow("onnx", 24, 1.0, 0.0, 3.2, seconds=0.5).to_json()
    {'backend': 'onnx', 'fidelity_tokens': 24, 'top1_agreement_with_fp32': 1.0, 'mean_kl_from_fp32_nats': 0.0, \
'perplexity': 3.2, 'seconds': 0.5}
    """

    OPTIONAL = ("first_copy_tokens", "first_copy_top1_agreement", "first_copy_mean_kl_nats")

    backend: str
    fidelity_tokens: int
    top1_agreement_with_fp32: float
    mean_kl_from_fp32_nats: float
    perplexity: float
    first_copy_tokens: int | None = None
    first_copy_top1_agreement: float | None = None
    first_copy_mean_kl_nats: float | None = None
    seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class KldRow(Row):
    """One backend scored as `llama-perplexity --kl-divergence` scores llama.cpp, on its ids and chunks (kld.py):
    llama.cpp's own row (Q4_1 against its F32), the cross-check (onnx fp32 against llama.cpp's F32) and ours
    (against onnx fp32), with llama.cpp's formulas; ours carry the gate against llama.cpp's row (kld.peer_gate).

    >>> KldRow(backend="llama.cpp", error="llama-perplexity is not installed").to_json()
    {'kld': 'llama-perplexity --kl-divergence', 'backend': 'llama.cpp', 'error': 'llama-perplexity is not installed'}
    """

    OPTIONAL = ("arithmetic", "cpu_variant", "targets", "targets_met", "error")
    ON_ERROR = ("kld", "backend")

    kld: str = field(default="llama-perplexity --kl-divergence", init=False)
    backend: str
    arithmetic: str | None = None         # what the backend's matmuls do to the activations
    reference: str | None = None          # what it is scored against
    chunks: int | None = None
    n_ctx: int | None = None              # a chunk's tokens; its second half is scored
    texts: list[str] | None = None
    positions: int | None = None          # chunks x (n_ctx - 1 - n_ctx / 2)
    same_top_p_pct: float | None = None   # % of positions whose argmax equals the reference's
    same_top_p_pm_pct: float | None = None   # its ± (llama.cpp's: sqrt(p (1 - p) / (n - 1)))
    mean_kld: float | None = None         # nats
    mean_kld_pm: float | None = None
    kld_p99: float | None = None
    kld_median: float | None = None
    ppl: float | None = None
    ppl_base: float | None = None
    ppl_ratio: float | None = None        # PPL(Q) / PPL(base)
    ppl_ratio_pm: float | None = None
    cpu_variant: str | None = None        # llama.cpp's row: the libggml-cpu variant that loaded
    targets: dict[str, str] | None = None
    targets_met: dict[str, bool | None] | None = None   # kld.peer_gate: at least as faithful as llama.cpp
    seconds: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Relayed(Row):
    """A row a child process printed (typed there: process.row_in_subprocess runs `python -m playground.bench
    COMMAND`), read back from its JSON line and printed again as it came.

    >>> Relayed({"backend": "onnx", "prefill_s": 0.8}).to_json()
    {'backend': 'onnx', 'prefill_s': 0.8}
    """

    line: dict

    def to_json(self) -> dict:
        return dict(self.line)


# --- peer.py: llama.cpp's llama-bench, the fp32 matmul peak, the kernel floor, the summary of ratios

@dataclass(frozen=True, kw_only=True)
class LlamaBenchRow(Row):
    """llama.cpp's `llama-bench` on the GGUF (peer.llama_bench_row): each figure the mean of `repeats` runs; with
    an `error`, only the backend, tool and threads beside it.

    >>> LlamaBenchRow(threads=2, error="llama-bench is not installed").to_json()
    {'backend': 'llama.cpp', 'tool': 'llama-bench', 'threads': 2, 'error': 'llama-bench is not installed'}
    """

    OPTIONAL = ("error", "cpu_variant", "load", "configuration", "own_decode_only_tps")
    ON_ERROR = ("backend", "tool", "threads")

    backend: str = field(default="llama.cpp", init=False)
    tool: str = field(default="llama-bench", init=False)
    threads: int
    cpu_variant: str | None = None       # the libggml-cpu-<variant> it loaded (quiet.loaded_cpu_variant)
    configuration: str | None = None     # the variant and repacking llama.cpp runs with here, and why (LlamaChoice)
    own_decode_only_tps: float | None = None   # llama.cpp's own choice decoding alone, where its batches die here
    load: dict | None = None             # load averages before/after, others' CPU (quiet.LoadWindow.stop)
    model: str | None = None             # llama.cpp's name for the model type
    repeats: int | None = None
    prompt_tokens: int | None = None     # the chat prompt's length
    prompt_s: float | None = None        # seconds to read it
    new_tokens: int | None = None
    decode_tps: float | None = None      # generated tokens/s from an empty context
    prefill_tokens: int | None = None
    prefill_s: float | None = None       # seconds to read prefill_tokens
    prefill_tps: float | None = None     # prompt tokens/s of that prefill
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class MatmulPeakRow(Row):
    """ONNX Runtime's fp32 MatMul on [m,k] x [k,n] (peer.matmul_peak_row): the machine's measured peak."""

    yardstick: str = field(default="fp32 matmul peak (onnxruntime MatMul)", init=False)
    shape: list[int]                     # [m, k, n]
    threads: int                         # intra-op threads
    matmul_peak_gflops: float            # GFLOP/s of the best run
    matmul_median_gflops: float          # GFLOP/s of the median run


@dataclass(frozen=True, kw_only=True)
class KernelFloorRow(Row):
    """onnx-gguf4's decode-graph MatMulNBits alone, ms per decode token (peer.kernel_floor_row): a floor, not a
    backend; with an `error`, only the yardstick beside it."""

    OPTIONAL = ("error",)
    ON_ERROR = ("yardstick",)

    yardstick: str = field(default="onnx-gguf4's MatMulNBits alone, one decode token (a floor, not a backend)",
                           init=False)
    one_pass_int8_ms: float | None = None   # at 1 activation row a token: llama.cpp's arithmetic
    hi_lo_int8x2_ms: float | None = None    # at 2 rows a token: int8x2's hi + lo
    nodes: int | None = None                # MatMulNBits nodes timed
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class SummaryRow(Row):
    """Every backend's decode and 1024-token prefill as multiples of llama.cpp's (peer.ratios_row), and the
    ceilings the floors put on them; one entry a backend, under its name.

    >>> SummaryRow(llama_decode_tps=50.0, llama_prefill_s=2.0, ceilings={}, validity={"valid": True},
    ...            backends={"onnx": {"decode_x": 0.5}}).to_json()   # doctest: +NORMALIZE_WHITESPACE
    {'summary': 'ratios to llama.cpp measured in this invocation (>1 = faster than llama.cpp)',
     'llama_decode_tps': 50.0, 'llama_prefill_s': 2.0, 'ceilings': {}, 'validity': {'valid': True}, 'loads': [],
     'onnx': {'decode_x': 0.5}}
    """

    FLAT = ("backends",)
    OPTIONAL = ("llama_configuration", "llama_own_decode_only_tps")

    summary: str = field(default="ratios to llama.cpp measured in this invocation (>1 = faster than llama.cpp)",
                         init=False)
    llama_decode_tps: float | None       # llama.cpp's, the mean of its runs before and after ours
    llama_prefill_s: float | None
    llama_configuration: str | None = None   # the variant and repacking it ran with here, and why (LlamaChoice)
    llama_own_decode_only_tps: float | None = None   # llama.cpp's own choice decoding alone, where its batches die
    ceilings: dict                       # the bounds the floors set (peer.ceilings); keys vary with the floors
    validity: dict                       # quiet.validity: valid, rule[, reason]; ratios are None when not valid
    loads: list[dict] = field(default_factory=list)   # the windows measured in (quiet.LoadWindow.stop)
    backends: dict[str, dict]            # name -> decode_x, prefill_x, ttft_ms[, prefill_gflops, prefill_pct_of_peak]


# --- interleaved.py: llama-bench and our backends alternating

@dataclass(frozen=True, kw_only=True)
class InterleavedRoundRow(Row):
    """One round of interleaved.py: llama.cpp's figures and each backend's, under their names.

    >>> InterleavedRoundRow(round=1, figures={"llama.cpp": {"decode_tps": 50.0}}).to_json()
    {'round': 1, 'llama.cpp': {'decode_tps': 50.0}}
    """

    OPTIONAL = ("load", "validity")
    FLAT = ("figures",)

    round: int
    figures: dict[str, dict]   # "llama.cpp" -> decode_tps, prompt_s, prefill_s; a backend -> its own and the ratios
    load: dict | None = None       # the round's load (quiet.LoadWindow.stop)
    validity: dict | None = None   # quiet.validity: the round's ratios are None when not valid


@dataclass(frozen=True, kw_only=True)
class InterleavedRow(Row):
    """The medians over interleaved.py's rounds, under each name (as InterleavedRoundRow); with an `error`
    (llama-bench failed), the error alone."""

    OPTIONAL = ("summary", "error", "valid_rounds", "cpu_flags", "llama_configuration", "targets", "targets_met")
    FLAT = ("medians",)
    ON_ERROR = ()

    summary: str | None = None            # what the medians are over
    valid_rounds: int | None = None       # rounds on a quiet machine: the ratios' medians are over these
    cpu_flags: dict[str, bool] | None = None   # the CPU kind the rounds ran on (quiet.cpu_flags)
    llama_configuration: str | None = None     # llama.cpp's variant and repacking here, and why (LlamaChoice)
    medians: dict[str, dict] = field(default_factory=dict)
    targets: dict[str, str] | None = None          # the first backend's: decode_x and bandwidth_pct (interleaved.py)
    targets_met: dict[str, bool | None] | None = None
    error: str | None = None


# --- batch.py, serve.py, loop.py, room.py, aiperf.py, roofline.py, speculative.py: one row each, `bench_s` added
# by say_timed

@dataclass(frozen=True, kw_only=True)
class BatchRow(Row):
    """Our continuous batching's batch-size sweep, llama.cpp's, and the bound the kernels set (batch.batch_row)."""

    bench: str = field(default="batch", init=False)
    backend: str
    sizes: list[int]                      # the concurrencies swept
    new_tokens: int                       # per request
    ignore_eos: bool
    ours: dict                            # our sweep: scheduler, slots, prefill_chunk, prompt, points
    llama: dict                           # llama-batched-bench's sweep (peer.llama_batched_bench_row), or why not
    step: dict                            # the decode step and the kernels alone at 1 and 8 rows, and the bound
    total_x_8_vs_1: float | None          # total decode tok/s at 8 / at 1
    tpot_x_8_vs_1: float | None           # median TPOT at 8 / at 1
    total_x_8_vs_llama: float | None      # our total decode tok/s at 8 / llama.cpp's at 8 (None: not quiet)
    total_x_16_vs_llama: float | None     # the same at 16
    llama_total_x_8_vs_1: float | None
    total_x_8_vs_1_max: float | None      # the bound (step["bound"] says how): not a measurement
    validity: dict | None                 # quiet.validity of the ratios to llama.cpp; None without llama.cpp's sweep
    targets: dict[str, str]               # ratio -> its target, e.g. ">= 3"
    targets_met: dict[str, bool | None]   # None: a figure is missing


@dataclass(frozen=True, kw_only=True)
class BreakdownRow(Row):
    """Where a decode step's time goes (breakdown.step_breakdown): one stream, then 1, 8, 16 rows, each phase's
    step_ms, ort_run_ms, kernels_ms, other_nodes_ms, ort_between_nodes_ms, python_ms and by_op_ms."""

    bench: str = field(default="breakdown", init=False)
    backend: str
    phases: dict                          # "one_stream", "rows_1", "rows_8", "rows_16" -> figures (or "error")


@dataclass(frozen=True, kw_only=True)
class ServeRow(Row):
    """The pinned workload one at a time and with our continuous batching (serve.serve_row). A `figures`
    dict (serve.figures): output_tps, output_tokens, requests_per_s, short_ttft_p50_s, short_ttft_p95_s,
    completed, wall_s."""

    OPTIONAL = ("saturated",)

    bench: str = field(default="serve", init=False)
    backend: str
    requests: int
    mix: dict[str, float]                 # class -> share of the requests
    max_new_tokens: int
    seed: int                             # of the Poisson arrivals
    batch_config: dict                    # slots, prefill_chunk (tokens)
    single_stream: dict                   # short_s, long_s, capacity_rps, tok_s: each class alone
    rate_rps: float                       # the arrival rate, requests/s
    rate_meaning: str = field(default="0.8 x one at a time's capacity on this backend (requests/s)", init=False)
    one_at_a_time: dict                   # figures
    batching: dict                        # figures
    throughput_ratio: float | None        # output tok/s, batching / one at a time
    short_p95_ttft_ratio: float | None    # the short class's p95 TTFT, batching / one at a time
    throughput_ratio_ceiling: float | None   # a bound from the arrivals, not a measurement
    targets: dict[str, str]
    targets_met: dict[str, bool | None]
    saturated: dict | None = None         # every request at once: both schedulers' figures, the ratio, the bounds
    llama_server: dict                    # llama-server on the same workload, or why not (`error`, `skipped`)


@dataclass(frozen=True, kw_only=True)
class LoopRow(Row):
    """A lone Generate run through the shared engine loop against the single-stream engine, rounds alternating
    (loop.loop_row): medians over the rounds; each round's figures and load in `per_round`."""

    bench: str = field(default="loop", init=False)
    backend: str
    model: str
    threads: int | None                   # ONNX Runtime's intra-op threads
    prompt_tokens: int                    # the backend row's chat prompt
    new_tokens: int                       # per run, both sides
    ignore_eos: bool
    rounds: int
    slots: int                            # the loop's KV slots (the app's ApiConfig)
    prefix_cache: int                     # its prefix cache's positions (0: off)
    loop_decode_tps: float | None
    engine_decode_tps: float | None       # Engine.run's: make bench's engine_decode_tps
    loop_ttft_s: float | None             # from the loop Trace's t0 (its KV slot taken)
    engine_ttft_s: float | None
    loop_queued_s: float | None           # its wait for a KV slot before t0
    decode_ratio_loop_vs_engine: float | None   # the median of the rounds' ratios
    greedy_agreement: float               # share of positions with the same output id, the lowest over the rounds
    first_divergence: int | None          # the first position that differs, in the first round that differs
    per_round: list[dict]                 # order, both sides' figures, ratio, agreement, load (quiet.LoadWindow)
    cpu_flags: dict[str, bool] | None
    targets: dict[str, str]
    targets_met: dict[str, bool | None]


@dataclass(frozen=True, kw_only=True)
class RoomRow(Row):
    """N people at the same moment through the page, the endpoint, half and half, and llama-server (room.room_row).
    Each path's dict: served, people, statuses, ttft_p50_s, ttft_p95_s, last_done_s, output_tokens, output_tps,
    prompt_tokens_p50, load, validity; the page's (and the mixed room's) also server_queued_p50_s,
    server_queued_p95_s, max_rows."""

    bench: str = field(default="room", init=False)
    backend: str                          # the app's batching backend
    model: str
    people: int
    new_tokens: int                       # each person's budget (EOS ignored but on the page)
    threads: int                          # the app's ONNX Runtime threads, llama-server's -t
    rounds: int                           # rounds of every path, interleaved; a path's timings are their medians
    api_keys: int                         # one a person
    limits: dict                          # the endpoint's limits and KV slots as the app reads them
    page: dict
    endpoint: dict
    mixed: dict                           # with page_people and endpoint_people
    llama_server: dict                    # its path's figures with parallel, slot_context, configuration; or why not
    ratios: dict[str, float | None]       # the "Done when" ratios (room.TARGETS)
    llama_validity: dict | None           # quiet.validity of the two ratios to llama-server (null when not valid)
    cpu_flags: dict[str, bool] | None
    targets: dict[str, str]
    targets_met: dict[str, bool | None]


@dataclass(frozen=True, kw_only=True)
class PrefixCacheRow(Row):
    """The shared-system-prompt workload on our batching without and with the prefix cache (kvmem.prefix_cache_row).
    `without` and `with_cache`: ttft_p50_s, ttft_p95_s, output_tps; `with_cache` also ttft_parts_p50 (where its
    TTFT went: kvmem.ttft_parts)."""

    bench: str = field(default="prefix-cache", init=False)
    backend: str
    requests: int
    rate_rps: float | None                # Poisson arrivals, requests/s
    prompt_tokens_min: int                # the shortest prompt (the shared instruction and a question)
    cache_positions: int                  # the prefix cache's budget
    without: dict
    with_cache: dict
    hit_rate: float | None                # prompt tokens copied from cached blocks / prompt tokens looked up
    cached_tokens: int
    prompt_tokens: int
    output_identical: bool                # every request's greedy tokens, with and without
    ttft_p50_ratio: float | None          # with / without
    targets: dict[str, str]
    targets_met: dict[str, bool | None]
    finding: str


@dataclass(frozen=True, kw_only=True)
class PreemptionRow(Row):
    """The memory-pressure workload without a KV budget and under one (kvmem.preemption_row)."""

    bench: str = field(default="preemption", init=False)
    backend: str
    requests: int
    kv_budget: int                        # positions the running requests may hold in all
    demand_positions: int                 # prompt + output positions of every request
    preemptions: int
    preempted_requests: int
    recomputed_positions: int             # prefilled again after a preemption
    copied_back_positions: int            # copied back from the prefix cache instead
    completed: int
    output_identical: bool
    requests_identical: int               # requests whose tokens equal the unpressured run's
    unpressured_output_tps: float | None
    pressured_output_tps: float | None
    throughput_ratio: float | None        # pressured / unpressured (printed, not a target)
    targets: dict[str, str]
    targets_met: dict[str, bool | None]
    finding: str


@dataclass(frozen=True, kw_only=True)
class ChunkSweepRow(Row):
    """A long document among chatters at each prefill chunk (kvmem.chunk_sweep_row). Each point: prefill_chunk,
    document_ttft_s, chatters_itl_p95_s, chatters_itl_p95_with_chunk_s (tokens whose interval held a prefill
    pass), chatters_itl_p50_s, document_passes (its prefill passes)."""

    bench: str = field(default="chunk-sweep", init=False)
    backend: str
    requests: int
    sizes: list[int]
    points: list[dict]
    targets: dict[str, str]
    targets_met: dict[str, bool | None]   # first size against the last; None: a figure is missing
    finding: str = ""                      # every size's two figures and the trend, in one sentence


@dataclass(frozen=True, kw_only=True)
class AiperfRow(Row):
    """AIPerf against the app's endpoint beside the Steps' own figures (aiperf.aiperf_row); with an `error`,
    no figures."""

    OPTIONAL = ("aiperf_version", "error", "by_concurrency", "targets", "targets_met", "overhead_means")

    backend: str                          # "aiperf -> endpoint (<backend>, continuous batching)"
    model: str
    requests: int                         # per concurrency
    prompt_tokens_cl100k: int             # prompt tokens a request, cl100k_base's count
    output_tokens: int                    # per request, EOS ignored
    aiperf_version: str | None = None
    error: str | None = None
    by_concurrency: dict[str, dict] | None = None   # "1", "4" -> medians of client, server, client - server (ms, %)
    targets: dict[str, str] | None = None
    targets_met: dict[str, bool] | None = None
    overhead_means: str | None = None
    load_average_1m: float                # the machine's, when the row was done


@dataclass(frozen=True, kw_only=True)
class ClientsRow(Row):
    """The endpoint under misbehaving clients while one behaves (clients.clients_row)."""

    bench: str = field(default="clients", init=False)
    backend: str                          # "endpoint (<backend>, continuous batching)"
    model: str
    clients: int                          # at once: disconnecting, not reading, slow, bursting, one well-behaved
    load_s: float                         # how long the load ran
    requests: int                         # every request sent during the load (refused ones too)
    statuses: dict[str, int]              # HTTP status -> how many ("200", "429")
    well_behaved_requests: int            # the well-behaved client's requests served during the load
    well_behaved_failures: int            # its requests that got no first token (should be 0)
    well_behaved_failure_statuses: dict[str, int]   # each failure's HTTP status -> how many (empty when none)
    well_behaved_ttft_p95_ms: float | None        # its p95 TTFT during the load (client side, ms)
    well_behaved_ttft_p95_alone_ms: float | None  # the same requests alone, before the load
    slots_back: bool                      # after the load: no KV slot held, nothing waiting or in flight
    rss_before_mb: float                  # the process's RSS before the load (after a warm-up load), MB
    rss_after_mb: float                   # after it, every client gone
    rss_within_margin: bool               # after <= before + max(10%, 32 MB)
    load_average_1m: float


@dataclass(frozen=True, kw_only=True)
class RooflineRow(Row):
    """Measured prefill and decode against the machine's roofline (roofline.roofline_row)."""

    bench: str = field(default="roofline", init=False)
    backend: str
    model: str
    storage: str                          # the weights' storage (e.g. fp32, 4-bit)
    threads: int
    peak_gflops: float                    # the measured MatMul peak, GFLOP/s
    bandwidth_gb_s: float                 # the measured ReduceSum bandwidth, GB/s
    ridge_flop_per_byte: float
    peak_method: str
    bandwidth_method: str
    prefill_tokens: int
    prefill_gflop: float                  # the prefill's work, GFLOP
    prefill_measured_ms: float            # the best TTFT of the runs
    prefill_predicted_ms: float
    prefill_bound: str                    # "compute" or "memory"
    prefill_ratio: float                  # measured / predicted
    prefill_off_by: float                 # max(ratio, 1 / ratio)
    prefill_achieved_gflops: float
    decode_steps: int
    decode_bound: str | None
    decode_measured_ms: float | None      # medians over the decode steps
    decode_predicted_ms: float | None
    decode_ratio: float | None
    targets: dict[str, str]
    targets_met: dict[str, bool | None]


@dataclass(frozen=True, kw_only=True)
class SpeculativeRow(Row):
    """Prompt-lookup speculative decoding against plain decoding (speculative.speculative_row); each preset's
    speedup also at the top level, as `<preset>_speedup`."""

    FLAT = ("speedups",)

    bench: str = field(default="speculative", init=False)
    backend: str
    k: int                                # tokens proposed a pass at most
    ngram: int                            # the lookup's n-gram
    new_tokens: int
    repeats: int
    presets: dict[str, dict]              # preset -> its figures and bounds (tokens per pass, tok/s, speedup, ...)
    speedups: dict[str, float | None]     # "<preset>_speedup" -> speculative / plain decode tok/s
    verify_pass: dict                     # rows, decode_ms, verify_ms, row_cost (a row's cost / a decode step)
    beyond_bound: list[str]               # presets whose speedup exceeds 1.1 x the free-verify bound (noise)
    verify_vs_decode_top1_differ: dict    # positions compared, how many differ
    targets: dict[str, str]
    targets_met: dict[str, bool | None]


# --- ui.py: the app's cost to what it measures

@dataclass(frozen=True, kw_only=True)
class UiRow(Row):
    """The app against a headless run on the same backend (ui.ui_row): medians over the runs; with --browser,
    one run watched by Chromium, under a key that says where Chromium ran."""

    OPTIONAL = ("with_chromium_on_its_own_cpu", "with_chromium_on_the_same_machine")

    row: str = field(default="ui", init=False)
    backend: str
    model: str
    prompt: str
    new_tokens: int                       # the fewest of any run
    same_tokens: bool                     # every run generated as many
    repeats: int
    headless_decode_tps: float | None
    ui_decode_tps: float | None
    wire_bytes: float | None              # the SSE stream of a run, bytes
    sse_events: float | None
    all_bytes_with_downloads: float | None
    server_cpu_s_per_token: float | None  # the app's process, CPU seconds
    model_cpu_s_per_token: float | None   # the headless run's steps
    server_cpu_outside_model_s_per_token: float
    decode_cpu_s_per_s_server_vs_headless: list[float | None]   # CPU seconds a second of decode: [server, headless]
    client_cpu_s_per_run: float | None    # this process, CPU seconds
    decode_ratio_ui_vs_headless: float
    with_chromium_on_its_own_cpu: dict | None = None        # --pin: chip delays (ms), chart redraws, decode tok/s
    with_chromium_on_the_same_machine: dict | None = None


@dataclass(frozen=True, kw_only=True)
class UiFlatRow(Row):
    """The app over a PacedEngine: its work per update in the first and the last quarter of a long run
    (ui.flat_row)."""

    row: str = field(default="ui-flat", init=False)
    steps: int
    steps_per_s: float
    sse_events: int
    wire_bytes: int
    server_cpu_ms_per_update_first_quarter: float | None
    server_cpu_ms_per_update_last_quarter: float | None
    bytes_per_update_first_quarter: float | None
    bytes_per_update_last_quarter: float | None


# --- remote.py: this client against a server

@dataclass(frozen=True, kw_only=True)
class RemoteRow(Row):
    """The client's figures of a request against the server's own (remote.measure); the server's only where
    it reports per-request timings (llama-server does, vLLM does not)."""

    OPTIONAL = ("server_prompt_ms", "server_cached_prompt_tokens", "server_decode_tps",
                "server_reported_predicted_per_second", "client_overhead", "client_overhead_target")

    backend: str
    model: str
    prompt_tokens: int
    new_tokens: int
    repeats: int
    client_ttft_s: float | None           # medians over the repeats
    client_decode_tps: float | None
    server_prompt_ms: float | None = None
    server_cached_prompt_tokens: int | None = None
    server_decode_tps: float | None = None            # (N - 1) tokens over the first-to-last span, as the client's
    server_reported_predicted_per_second: float | None = None
    client_overhead: float | None = None              # 1 - client / server decode tok/s
    client_overhead_target: float | None = None


def say(row: Row) -> dict:
    """Print a typed row as one JSON line (flushed: a long bench shows each row as it comes); returns its
    object. A dict is refused: every row the bench prints has its type in this module.

    >>> say({"row": "batch"})
    Traceback (most recent call last):
    ...
    TypeError: say() prints a Row (playground/bench/rows.py), not a dict
    """
    return _print(_typed(row).to_json())


def say_timed(make_row) -> dict:
    """Print the typed row `make_row()` builds with `bench_s`, the seconds it took, added; returns its object."""
    start = time.perf_counter()
    out = _typed(make_row()).to_json()
    out["bench_s"] = round(time.perf_counter() - start, 1)
    return _print(out)


def _typed(row) -> Row:
    if not isinstance(row, Row):
        raise TypeError(f"say() prints a Row (playground/bench/rows.py), not a {type(row).__name__}")
    return row


def _print(out: dict) -> dict:
    print(json.dumps(out), flush=True)
    return out

def parser(command: str, doc: str):
    """The argument parser of `python -m playground.bench COMMAND`, with --model (the first line of `doc` its
    description).

    >>> parser("serve", "The serve row.").parse_args(["--model", "tiny"])
    Namespace(model='tiny')
    """
    import argparse
    p = argparse.ArgumentParser(prog=f"python -m playground.bench {command}", description=doc.splitlines()[0])
    p.add_argument("--model", default=None, help="model spec (default: the bundled SmolLM2; 'tiny' for tests)")
    return p


def git(*args: str) -> str:
    """git's output in this checkout, or "" where git or the checkout is missing."""
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
