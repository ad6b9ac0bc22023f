"""Ratios to llama.cpp on a shared machine: llama-bench, our backends and ONNX Runtime GenAI alternating, round
after round.

    python -m playground.bench interleaved onnx onnx-gguf4 --rounds 5

`make bench` measures llama.cpp before and after all the backends; on shared cores the load can change
several-fold in between (llama.cpp's threads poll for work, so it suffers most from a neighbour). Here
each round runs llama-bench once (46- and 1024-token prompts, 64 new tokens, one repetition after its
warm-up), then, in this process, each backend's 64 greedy tokens after the chat prompt (the engine's
decode tok/s and TTFT) and a 1024-token prefill (a one-token Run, as `make bench`'s prefill row), then ONNX
Runtime GenAI's Generator on its own builder's int4 graph of the same GGUF (genai.py, the peer on ONNX Runtime)
the same way: the same prompt ids, greedy, its TTFT and decode tok/s timed as the engine times ours, and the
same 1024 ids read into a fresh generator. Every engine gets the same threads, the physical cores (llama-bench's
`-t`, ONNX Runtime's intra-op threads), and llama-bench the flags the project's own probe chose
(remote.llamacpp.llama_choice). The ratios are taken within each round and their medians printed, with every
round's raw figures: each engine's decode and prefill over llama.cpp's (`decode_x`, `prefill_x`), and each of
ours over GenAI's (`decode_x_genai`). Where GenAI cannot run here, its entry says `skipped` and why. Each round
records its load (quiet.LoadWindow); a round measured on a machine that was not quiet (quiet.validity) prints
its ratios as null with the reason, and the medians of the ratios are over the valid rounds alone (null when
none was).

Each round also reads the machine's memory bandwidth (roofline.measure_bandwidth: one streaming ReduceSum over
256 MiB, best of its reads) and puts every decode on it: `bandwidth_pct` is decode tok/s x the bytes a token
reads (roofline.decode_cost: the weights as the backend stores them and the KV cache at the run's middle
length; llama.cpp's as the GGUF's own blocks, which onnx-gguf4 keeps; GenAI's as its graph's MatMulNBits store
them) over that bandwidth. Each ONNX engine's `nodes` is its decode graph's nodes as written (genai.graph_nodes:
each runs once a token). The default
backend (the first name) is held to issue 47's targets: decode >= 0.9x llama.cpp's, >= 60 % of the bandwidth.

Left out: memory figures (all backends share this process; `make bench` isolates them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .backends import PROMPT
from .genai import GENAI, GenaiSkipped, graph_nodes, open_peer, storage
from .peer import NEW_TOKENS, llama_bench_row, own_decode_only_ratio, physical_cores
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

    OPTIONAL = ("summary", "error", "valid_rounds", "threads", "cpu_flags", "llama_configuration", "targets",
                "targets_met")
    FLAT = ("medians",)
    ON_ERROR = ()

    summary: str | None = None            # what the medians are over
    valid_rounds: int | None = None       # rounds on a quiet machine: the ratios' medians are over these
    threads: int | None = None            # every engine's: the physical cores (llama-bench -t, intra-op threads)
    cpu_flags: dict[str, bool] | None = None   # the CPU kind the rounds ran on (quiet.cpu_flags)
    llama_configuration: str | None = None     # llama.cpp's variant and repacking here, and why (LlamaChoice)
    medians: dict[str, dict] = field(default_factory=dict)
    targets: dict[str, str] | None = None          # the first backend's: decode_x and bandwidth_pct (interleaved.py)
    targets_met: dict[str, bool | None] | None = None
    error: str | None = None


TEXT_KEYS = ("cpu_variant", "configuration", "skipped")   # words, not figures: no median
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


def decode_graph(backend) -> Path | None:
    """The ONNX decode graph a backend runs (its folder's model.onnx), or None (torch)."""
    folder = getattr(backend, "folder", None)
    return folder / "model.onnx" if folder is not None and (folder / "model.onnx").is_file() else None


def peer_round(peer, prompt_ids: list[int], prefill_ids: list[int]) -> dict:
    """The peer's figures in one round: its greedy run after the prompt ids (TTFT, decode tok/s) and a prefill of
    `prefill_ids`; `skipped` and why when it fails."""
    try:
        run = peer.run(prompt_ids, NEW_TOKENS)
        prefill = peer.prefill_s(prefill_ids)
    except RuntimeError as exc:   # onnxruntime_genai raises RuntimeError on a failed run
        return {"skipped": f"its run failed here ({exc})"}
    return {"decode_tps": round(run.decode_tps, 2) if run.decode_tps else None, "ttft_s": round(run.ttft_s, 4),
            "prefill_s": round(prefill, 3), "new_tokens": len(run.tokens)}


def interleaved_rows(names: list[str], rounds: int = 5, peer=None) -> InterleavedRow:
    """Print each round's row; return the medians' (or the error of a llama-bench that failed). `peer`: ONNX Runtime
    GenAI's (genai.GenaiPeer, or GenaiSkipped saying why not); by default opened here on the bundled model."""
    from ..backends import create_backend
    from ..config import GenerationSettings
    from ..engine import Engine
    from ..measure import exact_length_ids

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
    nodes = {name: graph_nodes(path)["nodes"] for name, engine in engines.items()
             if (path := decode_graph(engine.backend)) is not None}
    threads = physical_cores()
    peer = open_peer(threads) if peer is None else peer   # the same prompt ids as the first backend's, the same 1024 prefill ids as ours
    peer_prompt = prompt_ids[names[0]]
    if not isinstance(peer, GenaiSkipped):
        peer_prefill = exact_length_ids(first, min(PREFILL_TOKENS, (first.info.context_window or 2**31) - 1))
        warm = peer_round(peer, peer_prompt, peer_prefill[:64])   # its warm-up, as ours
        peer = GenaiSkipped(warm["skipped"]) if "skipped" in warm else peer
    if not isinstance(peer, GenaiSkipped):
        reads[GENAI] = token_bytes(first, len(peer_prompt) + NEW_TOKENS // 2, storage(peer.graph))
        nodes[GENAI] = graph_nodes(peer.graph)["nodes"]
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
        genai = {"skipped": str(peer)} if isinstance(peer, GenaiSkipped) else peer_round(peer, peer_prompt, peer_prefill)
        if "skipped" in genai and not isinstance(peer, GenaiSkipped):
            peer = GenaiSkipped(genai["skipped"])   # no more rounds for a peer that failed
        bandwidth = measure_bandwidth(model_threads(), BANDWIDTH_BUDGET_S)[0]
        load = window.stop()
        check = validity([load])
        valid_rounds += bool(check["valid"])
        for name, (m, prefill) in measured.items():
            entry[name] = {"decode_tps": round(m.decode_tps, 2), "ttft_s": round(m.ttft, 4), "prefill_s": prefill,
                           "decode_x": gated(round(m.decode_tps / llama.decode_tps, 3), check),
                           **own_decode_only_ratio(m.decode_tps, llama.own_decode_only_tps, check),
                           "prefill_x": gated(round(llama.prefill_s / prefill, 3), check),
                           "bandwidth_pct": gated(bandwidth_pct(m.decode_tps, reads[name], bandwidth), check),
                           **({"decode_x_genai": gated(round(m.decode_tps / genai["decode_tps"], 3), check)}
                              if genai.get("decode_tps") else {})}
        if genai.get("decode_tps"):
            genai.update({"decode_x": gated(round(genai["decode_tps"] / llama.decode_tps, 3), check),
                          "prefill_x": gated(round(llama.prefill_s / genai["prefill_s"], 3), check),
                          "bandwidth_pct": gated(bandwidth_pct(genai["decode_tps"], reads[GENAI], bandwidth), check)})
        entry[GENAI] = genai
        entry["llama.cpp"]["bandwidth_pct"] = gated(bandwidth_pct(llama.decode_tps, reads["llama.cpp"], bandwidth),
                                                    check)
        entry["machine"] = {"bandwidth_gb_s": round(bandwidth / 1e9, 1)}
        raw.append(entry)
        say(InterleavedRoundRow(round=len(raw), figures=entry, load=load, validity=check))
    medians = {name: {key: median([r[name].get(key) for r in raw]) for key in raw[0][name] if key not in TEXT_KEYS}
               for name in raw[0]}
    if isinstance(peer, GenaiSkipped):   # skipped from the start, or since a round it failed in
        medians[GENAI] = {"skipped": str(peer)}
    for name, read in reads.items():
        if "skipped" not in medians[name]:
            medians[name]["token_mb"] = round(read / 1e6, 3)   # the roofline's bytes a decode token reads (estimate)
    for name, count in nodes.items():
        if "skipped" not in medians[name]:
            medians[name]["nodes"] = count   # the decode graph's nodes as written: each runs once a token
    return InterleavedRow(summary=f"medians over {rounds} interleaved rounds (ratios taken within each round, "
                                  f"over the {valid_rounds} valid ones)", valid_rounds=valid_rounds, medians=medians,
                          threads=threads, cpu_flags=cpu_flags(), llama_configuration=raw[0]["llama.cpp"]["configuration"],
                          targets=targets_text(TARGETS), targets_met=targets_met(medians[names[0]], TARGETS))


def main(argv: list[str]) -> None:
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench interleaved", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=["onnx", "onnx-gguf4"], help="backends (default: onnx onnx-gguf4)")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    say(interleaved_rows(args.names, args.rounds))
