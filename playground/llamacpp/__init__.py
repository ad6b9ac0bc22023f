"""llama.cpp's own programs on this machine: finding them, choosing the configuration that runs here, running
llama-bench and llama-batched-bench, and starting llama-server.

    path = llama_binary("llama-server")        # Path, or raises LlamaCppMissing naming `make llama`
    with LlamaServer(parallel=2) as server:    # the bundled GGUF served on 127.0.0.1
        ...

Modules, lowest first: programs.py (where the programs are, their environment, the CPU variant one loaded,
copies without some variants), bench.py (llama-bench and llama-batched-bench: command lines, their output,
the probe of one configuration), choice.py (the configuration that runs here, cached per CPU and build, and
what callers use: llama_binary, llama_env, llama_bench_args), server.py (llama-server: tests, bench,
app.py --llama-server).

Left out: llama-server's HTTP API (remote/, as any OpenAI-compatible server), GPU builds.
"""
from .bench import (PROBE_THREADS, PROBE_TIMEOUT, PROBE_TOKENS, Trial, batched_bench_command, died,
                    llama_bench_command, parse_batched_bench, run_probe)
from .choice import (AMX_FAULT, MAX_EXCLUDED, OWN, LlamaChoice, choose, llama_available, llama_bench_args,
                     llama_binary, llama_choice, llama_env, probe_choice, second_round)
from .programs import (INSTALL_HINT, ISA, PACKAGE, VARIANT_PREFIX, VARIANTS, LlamaCppMissing, bin_dir, build_key,
                       cache_root, cpu_key, library_env, loaded_cpu_variant, variant_folder)
from .server import APP_LABEL, APP_SOURCE, LlamaServer, StartedServer, add_llama_server

__all__ = ["AMX_FAULT", "APP_LABEL", "APP_SOURCE", "INSTALL_HINT", "ISA", "MAX_EXCLUDED", "OWN", "PACKAGE",
           "PROBE_THREADS", "PROBE_TIMEOUT", "PROBE_TOKENS", "VARIANTS", "VARIANT_PREFIX", "LlamaChoice",
           "LlamaCppMissing", "LlamaServer", "StartedServer", "Trial", "add_llama_server", "batched_bench_command",
           "bin_dir", "build_key", "cache_root", "choose", "cpu_key", "died", "library_env", "llama_available",
           "llama_bench_args", "llama_bench_command", "llama_binary", "llama_choice", "llama_env",
           "loaded_cpu_variant", "parse_batched_bench", "probe_choice", "run_probe", "second_round",
           "variant_folder"]
