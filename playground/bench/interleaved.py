"""Ratios to llama.cpp on a shared machine: llama-bench and our backends alternating, round after round.

    python -m playground.bench interleaved onnx onnx-gguf4 --rounds 5

`make bench` measures llama.cpp before and after all the backends; on shared cores the load can change
several-fold in between (llama.cpp's threads poll for work, so it suffers most from a neighbour). Here
each round runs llama-bench once (46- and 1024-token prompts, 64 new tokens, one repetition after its
warm-up), then, in this process, each backend's 64 greedy tokens after the chat prompt (the engine's
decode tok/s and TTFT) and a 1024-token prefill (a one-token Run, as `make bench`'s prefill row). The
ratios are taken within each round and their medians printed, with every round's raw figures. Each round
records its load (quiet.LoadWindow); a round measured on a machine that was not quiet (quiet.validity) prints
its ratios as null with the reason, and the medians of the ratios are over the valid rounds alone (null when
none was).

Each round also reads the machine's memory bandwidth (roofline.measure_bandwidth: one streaming ReduceSum over
256 MiB, best of its reads) and puts every decode on it: `bandwidth_pct` is decode tok/s x the bytes a token
reads (roofline.decode_cost: the weights as the backend stores them and the KV cache at the run's middle
length; llama.cpp's as the GGUF's own blocks, which onnx-gguf4 keeps) over that bandwidth. The default
backend (the first name) is held to issue 47's targets: decode >= 0.9x llama.cpp's, >= 60 % of the bandwidth.

Left out: memory figures (all backends share this process; `make bench` isolates them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .backends import PROMPT
from .peer import NEW_TOKENS, llama_bench_row, own_decode_only_ratio
from .prefill import PREFILL_TOKENS, measure_prefill
from .quiet import LoadWindow, cpu_flags, gated, validity
from .rows import Row, say
from .stats import median, targets_met, targets_text


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


TEXT_KEYS = ("cpu_variant", "configuration")   # words, not figures: no median
TARGETS = {"decode_x": (">=", 0.9), "bandwidth_pct": (">=", 60.0)}   # the default backend's (issue 47)
BANDWIDTH_BUDGET_S = 0.5   # each round's bandwidth reads


def bandwidth_pct(tps: float | None, token_bytes: float, bandwidth: float) -> float | None:
    """The share of the measured bandwidth a decode uses, in percent: tok/s x bytes a token / bytes/s.

    >>> bandwidth_pct(120.0, 92e6, 30e9), bandwidth_pct(None, 92e6, 30e9), bandwidth_pct(120.0, 92e6, 0.0)
    (36.8, None, None)
    """
    return round(100 * tps * token_bytes / bandwidth, 1) if tps and bandwidth else None


def token_bytes(engine, seq_len: int, storage=None) -> float:
    """The bytes one decode token reads at `seq_len` (the roofline's estimate), with `storage` or the backend's."""
    from ..roofline import ModelShape, decode_cost, storage_of
    backend = engine.backend
    return decode_cost(ModelShape.of(backend.config), storage or storage_of(backend), [seq_len]).bytes


def interleaved_rows(names: list[str], rounds: int = 5) -> InterleavedRow:
    """Print each round's row; return the medians' (or the error of a llama-bench that failed)."""
    from ..backends import create_backend
    from ..config import GenerationSettings
    from ..engine import Engine

    engines = {name: Engine(create_backend(name, device="cpu")) for name in names}
    settings = GenerationSettings(max_new_tokens=NEW_TOKENS, temperature=0.0)
    prompt_ids = {}
    for name, engine in engines.items():   # warm-up: first-call allocations, outside the rounds
        prompt_ids[name] = engine.prompt_ids(PROMPT, settings)[1]
        engine.run_ids(prompt_ids[name], settings.with_(max_new_tokens=4)).wait()
    from ..roofline import gguf_storage, measure_bandwidth, model_threads
    first = next(iter(engines.values()))
    middle = {name: len(ids) + NEW_TOKENS // 2 for name, ids in prompt_ids.items()}
    reads = {name: token_bytes(engine, middle[name]) for name, engine in engines.items()}
    reads["llama.cpp"] = token_bytes(first, NEW_TOKENS // 2, gguf_storage(2))   # f16 KV; llama-bench decodes from empty
    raw, valid_rounds = [], 0
    for _ in range(rounds):
        window = LoadWindow.start()
        llama = llama_bench_row(repeats=1)
        if llama.error is not None:
            return InterleavedRow(error=llama.error)
        entry = {"llama.cpp": {"decode_tps": llama.decode_tps, "prompt_s": llama.prompt_s, "prefill_s": llama.prefill_s,
                               "cpu_variant": llama.cpu_variant, "configuration": llama.configuration,
                               **({"own_decode_only_tps": llama.own_decode_only_tps}
                                  if llama.own_decode_only_tps else {})}}
        measured = {}
        for name, engine in engines.items():
            m = engine.run_ids(prompt_ids[name], settings).wait().metrics()
            prefill = measure_prefill(engine, PREFILL_TOKENS, repeats=1).prefill_s
            measured[name] = (m, prefill)
        bandwidth = measure_bandwidth(model_threads(), BANDWIDTH_BUDGET_S)[0]
        load = window.stop()
        check = validity([load])
        valid_rounds += bool(check["valid"])
        for name, (m, prefill) in measured.items():
            entry[name] = {"decode_tps": round(m.decode_tps, 2), "ttft_s": round(m.ttft, 4), "prefill_s": prefill,
                           "decode_x": gated(round(m.decode_tps / llama.decode_tps, 3), check),
                           **own_decode_only_ratio(m.decode_tps, llama.own_decode_only_tps, check),
                           "prefill_x": gated(round(llama.prefill_s / prefill, 3), check),
                           "bandwidth_pct": gated(bandwidth_pct(m.decode_tps, reads[name], bandwidth), check)}
        entry["llama.cpp"]["bandwidth_pct"] = gated(bandwidth_pct(llama.decode_tps, reads["llama.cpp"], bandwidth),
                                                    check)
        entry["machine"] = {"bandwidth_gb_s": round(bandwidth / 1e9, 1)}
        raw.append(entry)
        say(InterleavedRoundRow(round=len(raw), figures=entry, load=load, validity=check))
    medians = {name: {key: median([r[name][key] for r in raw]) for key in raw[0][name] if key not in TEXT_KEYS}
               for name in raw[0]}
    for name, read in reads.items():
        medians[name]["token_mb"] = round(read / 1e6, 3)   # the roofline's bytes a decode token reads (estimate)
    return InterleavedRow(summary=f"medians over {rounds} interleaved rounds (ratios taken within each round, "
                                  f"over the {valid_rounds} valid ones)", valid_rounds=valid_rounds, medians=medians,
                          cpu_flags=cpu_flags(), llama_configuration=raw[0]["llama.cpp"]["configuration"],
                          targets=targets_text(TARGETS), targets_met=targets_met(medians[names[0]], TARGETS))


def main(argv: list[str]) -> None:
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench interleaved", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=["onnx", "onnx-gguf4"], help="backends (default: onnx onnx-gguf4)")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    say(interleaved_rows(args.names, args.rounds))
