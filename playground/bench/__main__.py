"""`make bench` (`python -m playground.bench`): speed figures and ratios, as JSON lines.

`python -m playground.bench COMMAND [ARGS]` runs one part (`--help` lists the commands); with no command
(backend names and flags alone) it runs `all`. Whatever the command, the first line is the stamp
(rows.Stamp: commit, machine, date, load, the command line), so the JSON lines are always stamped;
`results` and `paced-app` print no rows and no stamp, and neither does a bench the bench started itself
(process.CHILD: its rows are read back and printed by the parent).

`all`, in order, each backend measured in its own process on the bundled model:
  - llama.cpp's own `llama-bench` on the same GGUF (peer.py), the machine's fp32 matmul peak, and
    the kernel floor (onnx-gguf4's MatMulNBits alone, per decode token);
  - one row per backend (every registry entry): the engine's TTFT and decode tok/s against plain
    `generate()` on the same runtime, and their ratio (`decode_ratio_engine_vs_generate` >= 0.97 means
    instrumentation costs under 3%), peak RSS, and for the ONNX variants their greedy agreement with fp32;
  - a 1024-token prefill per backend;
  - fidelity per backend (fidelity.py): teacher-forced top-1 agreement with fp32, mean KL, perplexity;
  - fidelity the standard way (kld.py): llama-perplexity --kl-divergence's row for llama.cpp (Q4_1 against
    its F32), then each ONNX backend scored the same way against onnx fp32 on the same ids and chunks
    (Same top p ±, mean and 99th-percentile KLD, PPL ratio), with the gate against llama.cpp's row, and
    ONNX Runtime GenAI's graph scored against llama.cpp's own F32, as llama.cpp's Q4_1 is;
  - llama-bench again, and a summary: every decode and prefill as a multiple of llama.cpp's (the mean
    of its two runs, which bracket ours), prefill as a share of the matmul peak, and the ceilings the
    floors set on those ratios;
  - the rows "ui" and "ui-flat" (ui.py): the app against a headless run, and its work per update;
  - where Chromium is installed, the watch row (watch.py): the Serve tab's Watch view in a presenter's page
    while 24 API clients stream, its main-thread long tasks over 30 s and its screenshots timed;
  - with every backend (no names given): the batch row (batch.py: our continuous batching's
    batch-size sweep against llama.cpp's `llama-batched-bench`, and the bound the 4-bit kernels set) and
    the serve row (serve.py: the pinned workload one at a time and with our batching, the same backend),
    the kvmem rows (kvmem.py: prefix caching, preemption, the prefill-chunk sweep), the aiperf row, the
    clients row (clients.py: misbehaving clients against the endpoint while one behaves), the loop row (loop.py:
    a lone Generate run through the shared engine loop against Engine.run), the room row (attendees.py: 24 people at
    once through the page, the endpoint, both, and llama-server --parallel 24), the conversations row
    (conversations.py: 8 chats of 6 turns at once through the endpoint and llama-server, rounds interleaved),
    the sessions row (sessions.py: agents with tool gaps of 2-10 s under a prefix cache too small to keep them,
    ours without and with session retention and llama-server on the same trace, interleaved; ~5 min), and the
    speculative row (speculative.py: prompt-lookup speculative decoding against plain decoding on the default
    backend, tokens per forward pass and decode tok/s);
  - on the bundled model, the genai row (genai.py): ONNX Runtime GenAI's own builder's int4 graph of the same
    GGUF (built once, cached), its nodes a token and ops, its greedy answer; "skipped" and why where it cannot run;
  - with every backend on the bundled model: the interleaved rows (interleaved.py: llama-bench,
    onnx-gguf4 / onnx-gguf4-int8 and ONNX Runtime GenAI alternating, 3 rounds, the ratios taken within each round),
    then the levers rows (levers.py: each lever on the default's decode graph against the default, nodes a token
    and tokens per CPU second on one core, rounds interleaved; ~3 min), then the gap row (gap.py: the default's
    decode step and GenAI's, profiled, their nodes grouped, the gap put on each group);
  - last, the remote row (remote.py): this client against a llama-server the bench starts on the
    same model.

    python -m playground.bench                 # every backend
    python -m playground.bench onnx-int8       # just one (with llama.cpp and the fidelity reference)
    python -m playground.bench --speed onnx onnx-gguf4   # no fidelity rows (they take ~1-5 min a backend)
    python -m playground.bench --model tiny torch   # the tiny test model (what the test suite runs)
    python -m playground.bench serve --model tiny   # one part: the serve row alone

Figures, not tests: they depend on the machine and its load; report them with this command.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

from . import aiperf, attendees, backends, batch, breakdown, clients, conversations, cpuview, fidelity, gap, genai, interleaved, kld, \
    kvmem, levers, loop, paced, peer, prefill, quiet, remote, results, roofline, serve, sessions, speculative, ui, watch
from .process import CHILD, child_env, row_in_subprocess
from .genai import GENAI
from .rows import PREFILL, Stamp, say


def run_all(argv: list[str]) -> None:
    """Every row of `make bench`, in the order the module docstring gives."""
    p = argparse.ArgumentParser(prog="python -m playground.bench [all]", description="every row of make bench")
    p.add_argument("names", nargs="*", help=f"backends (default: {' '.join(backends.DEFAULT_BACKENDS)})")
    p.add_argument("--model", default=None, help="model spec (default: the bundled SmolLM2; 'tiny' for tests)")
    p.add_argument("--speed", action="store_true", help="no fidelity rows (they take ~1-5 min a backend)")
    args = p.parse_args(argv)
    names = args.names or backends.DEFAULT_BACKENDS
    model = args.model
    on_bundled = model is None   # llama.cpp and fidelity on the bundled model only
    llama_runs = [say(peer.llama_bench_row()), say(peer.matmul_peak_row())] if on_bundled else []
    floor = say(peer.kernel_floor_row()) if on_bundled else None
    ours = quiet.LoadWindow.start()   # the load while our figures of the ratios are measured
    rows = [say(row_in_subprocess("backends", name, "--one", label=name, model=model))
            for name in names]   # each in its own process
    prefills = [say(row_in_subprocess(PREFILL, name, label=name, model=model)) for name in names]
    ours_load = ours.stop()
    # the app's cost to what it measures: rows "ui" and "ui-flat", in a process of its own (--pin)
    subprocess.run([sys.executable, "-m", "playground.bench", "ui", "--backend", "onnx" if "onnx" in names else names[0],
                    *(["--model", model] if model else []), *ui.browser_flags()], check=True, env=child_env())
    if ui.browser_flags():   # the Watch view in a presenter's Chromium while 24 clients stream
        say(row_in_subprocess("watch", *(["--clients", "4", "--window", "5"] if model == "tiny" else []), model=model))
    if not args.names:   # continuous batching: the batch-size sweep, then the workload; AIPerf against Steps
        for command in ("batch", "serve", "kvmem", "aiperf", "clients", "loop", "room", "conversations", "sessions",
                        "roofline", "speculative"):
            say(row_in_subprocess(command, model=model))
    if on_bundled:   # ONNX Runtime GenAI, the peer on ONNX Runtime: its graph (built once, cached), what it is
        say(row_in_subprocess("genai", label=GENAI))
    if not args.names and on_bundled:
        # the default's ratios to llama-bench with the two alternating round after round (the step breakdown is
        # the batch row's); its rows go straight to this output
        subprocess.run([sys.executable, "-m", "playground.bench", "interleaved", "onnx-gguf4", "onnx-gguf4-int8",
                        "--rounds", "3"], check=True, env=child_env())
        # the default's decode graph, one lever at a time, on one core (its rows go straight to this output)
        subprocess.run([sys.executable, "-m", "playground.bench", "levers"], check=True, env=child_env())
        # where the default's decode step spends the time GenAI's does not, by group of nodes
        say(row_in_subprocess("gap", label=GENAI))
    if not on_bundled:
        return
    if not args.speed:
        fidelity.fidelity_rows(names)   # prints its rows
        kld.kld_rows([n for n in names if n.startswith("onnx")])   # llama.cpp's scoring, llama.cpp's row beside
    llama_runs.append(say(peer.llama_bench_row()))
    llama = peer.mean_llama_row(llama_runs[0], llama_runs[2])
    say(peer.ratios_row(llama, llama_runs[1], rows, prefills, peer.model_config(), floor, loads=[ours_load]))
    if not args.names:   # the client against llama.cpp's own server
        say(remote.remote_row())


COMMANDS = {   # name -> (function of the arguments after it, what it prints); PREFILL is the prefill row's kind
    "all": (run_all, "every row below, in make bench's order (the default: backend names and flags alone)"),
    "backends": (backends.main, "the engine against plain generate(), one process a backend"),
    PREFILL: (prefill.main, "a 1024-token prefill on one backend"),
    "fidelity": (fidelity.main, "teacher-forced agreement with onnx fp32, KL, perplexity"),
    "kld": (kld.main, "llama-perplexity --kl-divergence's scoring: llama.cpp's row and ours, and the gate"),
    "peer": (peer.main, "llama.cpp's llama-bench, the fp32 matmul peak, the 4-bit kernel floor"),
    "breakdown": (breakdown.main, "a decode step's time by op type (ONNX Runtime's profiler) and the Python"),
    "batch": (batch.main, "continuous batching's batch-size sweep against llama-batched-bench"),
    "serve": (serve.main, "the pinned workload one at a time and with continuous batching"),
    "kvmem": (kvmem.main, "prefix caching, preemption under a KV budget, the prefill-chunk sweep"),
    "aiperf": (aiperf.main, "NVIDIA AIPerf against the API, beside the Steps' own figures"),
    "clients": (clients.main, "the API under misbehaving clients while one behaves: its TTFT, slots, RSS"),
    "loop": (loop.main, "a lone Generate run through the shared engine loop against Engine.run, alternating"),
    "room": (attendees.main, "N people at once: the page, the endpoint, half and half, llama-server --parallel N"),
    "conversations": (conversations.main, "N chats of T turns at once: the endpoint and llama-server, interleaved"),
    "sessions": (sessions.main, "agents with tool gaps: ours without and with retention, and llama-server"),
    "roofline": (roofline.main, "measured prefill and decode against the machine's roofline"),
    "speculative": (speculative.main, "prompt-lookup speculative decoding against plain decoding"),
    "ui": (ui.main, "rows ui and ui-flat: the app's cost to what it measures"),
    "watch": (watch.main, "the Watch view's main-thread long tasks in a presenter's Chromium while clients stream"),
    "remote": (remote.main, "this client against a llama-server (started here, or at a URL)"),
    "interleaved": (interleaved.main, "ratios to llama.cpp, llama-bench, our backends and ONNX Runtime GenAI alternating"),
    "levers": (levers.main, "levers on the default's decode graph against it: nodes, tokens per CPU second"),
    "as-cpu": (cpuview.main, "a command in a process that sees another CPU kind (avx2: AVX-512 hidden from cpuid)"),
    "gap": (gap.main, "the default's decode step against GenAI's, by group of nodes: where the gap goes"),
    "genai": (genai.main, "ONNX Runtime GenAI's graph of the bundled model: its nodes, ops, a greedy answer"),
    "results": (results.main, "the dated results page of a stamped JSON-lines file"),
    "paced-app": (paced.main, "the app over a PacedEngine on --port (what the ui-flat row starts)"),
}
UNSTAMPED = {"results", "paced-app", "as-cpu"}   # commands that print no rows: no stamp


def usage() -> argparse.ArgumentParser:
    """The top-level help: the commands and what each prints."""
    p = argparse.ArgumentParser(prog="python -m playground.bench", description=__doc__.splitlines()[0],
                                epilog="`python -m playground.bench COMMAND --help` gives a command's options; "
                                       "with no command, backend names and --model/--speed run `all`.")
    sub = p.add_subparsers(title="commands", metavar="COMMAND")
    for name, (_, text) in COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False)
    return p


def main(argv: list[str]) -> None:
    """Dispatch to COMMANDS[argv[0]], or run `all` with argv (backend names and flags, as make bench passes),
    after the stamp (see the module doc)."""
    if argv[:1] in (["-h"], ["--help"]):
        usage().print_help()
        return
    command, rest = (argv[0], argv[1:]) if argv and argv[0] in COMMANDS else ("all", argv)
    if command not in UNSTAMPED and not os.environ.get(CHILD) and not {"-h", "--help"} & set(rest):
        say(Stamp.now(shlex.join(["python", "-m", "playground.bench", *argv])))
    code = COMMANDS[command][0](rest)
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
