"""`make bench`'s loop row: a lone Generate run through the shared engine loop against the single-stream engine.

    python -m playground.bench loop                       # onnx-gguf4 on the bundled model, 5 rounds, 96 tokens
    python -m playground.bench loop --model tiny --rounds 1 --tokens 8   # the tiny test model (what the suite runs)

The page's Generate runs on the batching backend join the engine loop the endpoint's requests join (app.py's
`make_room`: the app's one Room owns it); alone there, nothing should be lost. Here, in one process and on one
engine: the loop as the app builds it (`Room(...).loop_for(backend)`, the app's ApiConfig from the
environment: its KV slots, its prefix cache) and the single-stream engine (`Engine.run_ids`, whose decode
tok/s is `make bench`'s `engine_decode_tps`), each given the backend row's chat prompt (templated and
tokenized once) and the same number of greedy new tokens, EOS ignored, so both decode exactly as many.
Rounds alternate which goes first (loop, engine; then engine, loop; ...), so a burst of load on shared
cores hits both alike; each round's ratio is taken within it, and the row prints the medians:

    decode_ratio_loop_vs_engine = loop decode tok/s / engine decode tok/s      (target >= 0.97)

with both TTFTs (the loop's from its Trace's t0, when it took its KV slot; the wait for it, `queued`, beside;
with the app's prefix cache on, the loop's later rounds copy the prompt's KV instead of computing it:
`loop_cached_tokens` says how much, and its TTFT is then not the engine's peer),
and the greedy agreement: the share of positions whose output id is the same in both runs (compare.token_agreement;
the batched graph's top-1 can differ from the single-stream graph's at near-ties) and the first that differs.
Each round records its load (quiet.LoadWindow): the ratio is within one process on the same cores, so it is
printed whatever the load, with the load beside it.

Left out: the page itself (its cost is the ui row's), and more than one request in the loop (the room row).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..compare import token_agreement
from .backends import PROMPT
from .quiet import LoadWindow, cpu_flags
from .rows import Row, parser, say_timed
from .stats import median, ratio, targets_met, targets_text


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


NEW_TOKENS = 96
ROUNDS = 5
TARGETS = {"decode_ratio_loop_vs_engine": (">=", 0.97)}


def loop_row(model: str | None = None, backend: str | None = None, rounds: int = ROUNDS,
             tokens: int = NEW_TOKENS) -> LoopRow:
    from ..api import ApiConfig, batching_backend
    from ..backends import available_backends, create_backend, default_backend_name
    from ..config import GenerationSettings
    from ..engine import Engine
    from ..serve.engine_loop import LoopRun
    from ..serve.room import Room

    name = backend or batching_backend(list(available_backends()), default_backend_name("cpu", model))
    engine = Engine(create_backend(name, model, device="cpu"))
    room = Room(lambda: engine, name, ApiConfig.from_env().loop_size)   # as app.make_room builds it
    loop = room.loop_for(name, wait=600)
    if loop is None:
        raise RuntimeError(room.error or f"the engine loop did not start for {name}")
    settings = GenerationSettings(max_new_tokens=tokens, temperature=0.0)
    text, ids = engine.prompt_ids(PROMPT, settings)

    def through_loop(new_tokens: int):
        run = LoopRun(loop, loop.submit(ids, settings.with_(max_new_tokens=new_tokens), prompt=PROMPT, text=text,
                                        ignore_eos=True, client="page"))
        return run.wait()

    def alone(new_tokens: int):
        return engine.run_ids(ids, settings.with_(max_new_tokens=new_tokens), ignore_eos=True).wait()

    try:
        through_loop(4), alone(4)   # warm-up: first-call allocations of both graphs
        per_round = []
        for i in range(rounds):
            window = LoadWindow.start()
            order = (("loop", through_loop), ("engine", alone)) if i % 2 == 0 else (("engine", alone),
                                                                                  ("loop", through_loop))
            traces = {key: run(tokens) for key, run in order}
            per_round.append(round_figures(traces["loop"], traces["engine"], window.stop(), [k for k, _ in order]))
    finally:
        room.close()
    figures = {"decode_ratio_loop_vs_engine": median((r["decode_ratio"] for r in per_round), 3)}
    return LoopRow(
        backend=name, model=engine.info.model, threads=getattr(engine.backend, "threads", None),
        prompt_tokens=len(ids), new_tokens=tokens, ignore_eos=True, rounds=rounds,
        slots=loop.slots, prefix_cache=loop.batcher.config.prefix_cache,
        loop_decode_tps=median((r["loop_decode_tps"] for r in per_round), 2),
        engine_decode_tps=median((r["engine_decode_tps"] for r in per_round), 2),
        loop_ttft_s=median((r["loop_ttft_s"] for r in per_round), 4),
        engine_ttft_s=median((r["engine_ttft_s"] for r in per_round), 4),
        loop_queued_s=median((r["loop_queued_s"] for r in per_round), 4),
        **figures, greedy_agreement=min(r["agreement"] for r in per_round),
        first_divergence=next((r["first_divergence"] for r in per_round if r["first_divergence"] is not None), None),
        per_round=per_round, cpu_flags=cpu_flags(),
        targets=targets_text(TARGETS), targets_met=targets_met(figures, TARGETS))


def round_figures(loop_trace, engine_trace, load: dict, order: list[str]) -> dict:
    """One round's figures: each side's decode tok/s and TTFT, their ratio, the greedy agreement, the load."""
    lm, em = loop_trace.metrics(), engine_trace.metrics()
    agreement, first = token_agreement(loop_trace.output_ids, engine_trace.output_ids)
    return {"order": order, "loop_decode_tps": round(lm.decode_tps, 2), "engine_decode_tps": round(em.decode_tps, 2),
            "decode_ratio": ratio(lm.decode_tps, em.decode_tps, 3),
            "loop_ttft_s": round(lm.ttft, 4), "engine_ttft_s": round(em.ttft, 4),
            "loop_queued_s": None if loop_trace.queued is None else round(loop_trace.queued, 4),
            "loop_cached_tokens": loop_trace.cached_tokens,
            "loop_tokens": lm.output_tokens, "engine_tokens": em.output_tokens,
            "agreement": round(agreement, 4), "first_divergence": first, "load": load}


def main(argv: list[str]) -> None:
    p = parser("loop", __doc__)
    p.add_argument("--backend", default=None, help="a backend our batching runs (default: the app's, onnx-gguf4 "
                                                   "on the bundled model)")
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--tokens", type=int, default=NEW_TOKENS, help=f"new tokens a run (default {NEW_TOKENS})")
    args = p.parse_args(argv)
    say_timed(lambda: loop_row(args.model, args.backend, args.rounds, args.tokens))
