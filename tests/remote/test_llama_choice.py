"""Which llama.cpp configuration runs here: the probe, its alternatives, the cached choice, and what callers get.

The fake `llama-bench` loads the best "variant" whose library lies in its own folder (as ggml's loader does), and
where that is sapphirerapids with repacking on, dies with SIGILL on any prompt batch: the AMX fault of a Xeon
(llama.cpp #26954), where decode alone runs.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from playground import llamacpp

FAKE_BENCH = r"""#!/bin/sh
here=$(dirname "$0")
echo run >> "$here/../runs.log"
for v in sapphirerapids zen4 x64; do [ -e "$here/libggml-cpu-$v.so" ] && break; done
echo "load_backend: loaded CPU backend from $here/libggml-cpu-$v.so" >&2
p=0; n=0; repack=1
while [ $# -gt 0 ]; do
  case "$1" in -p) p=$2; shift;; -n) n=$2; shift;; --repack) repack=$2; shift;; esac; shift
done
if [ "$v" = sapphirerapids ] && [ "$repack" = 1 ] && [ "$p" -gt 0 ] && [ -z "$FAKE_AMX_WORKS" ]; then kill -ILL $$; fi
[ "$v" = "$FAKE_BROKEN" ] && exit 1
speed() { case "$v-$repack" in sapphirerapids-1) echo "1000 300";; sapphirerapids-0) echo "${FAKE_NOREPACK:-500 110}";;
          zen4-1) echo "900 150";; *) echo "300 60";; esac; }
set -- $(speed)
echo "[{\"n_prompt\": $p, \"n_gen\": 0, \"avg_ts\": $1}, {\"n_prompt\": 0, \"n_gen\": $n, \"avg_ts\": $2}]"
"""


@pytest.fixture
def fake_llama(tmp_path, monkeypatch):
    """llama.cpp's folder with the fake llama-bench and three variants' libraries; the cache in tmp_path."""
    folder = tmp_path / "pkg" / "bin"
    folder.mkdir(parents=True)
    bench = folder / "llama-bench"
    bench.write_text(FAKE_BENCH)
    bench.chmod(0o755)
    (folder / "llama-server").write_text("#!/bin/sh\nexit 0\n")
    (folder / "llama-server").chmod(0o755)
    for v in ("x64", "zen4", "sapphirerapids"):
        (folder / f"libggml-cpu-{v}.so").write_text(v)
    (folder / "libllama.so").write_text("lib")
    gguf = tmp_path / "model.gguf"
    gguf.write_text("gguf")
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(llamacpp.programs, "bin_dir", lambda: folder)
    monkeypatch.setattr("playground.models.bundled_gguf_path", lambda: gguf)
    monkeypatch.setattr(llamacpp.choice, "_choice", None)
    for name in ("FAKE_AMX_WORKS", "FAKE_BROKEN", "FAKE_NOREPACK"):
        monkeypatch.delenv(name, raising=False)
    return folder


def runs(folder) -> int:
    log = folder.parent / "runs.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_where_amx_repacking_dies_on_batches_the_next_variant_with_repacking_runs(fake_llama):
    choice = llamacpp.probe_choice(fake_llama, fake_llama.parent / "m.gguf")
    assert (choice.variant, choice.repack, choice.without) == ("zen4", True, ("sapphirerapids",))
    own = choice.own
    assert own.variant == "sapphirerapids" and not own.runs and own.exit_code == -4 and "SIGILL" in own.failure
    assert choice.own_decode_only_runs   # decode alone ran with llama.cpp's own choice
    assert [(t.label(), t.runs) for t in choice.trials] == [
        ("sapphirerapids with repacking", False), ("sapphirerapids without repacking", True),
        ("zen4 with repacking", True)]
    assert choice.describe().startswith("sapphirerapids: its repacked weights run decode alone but die on batches "
                                        "here (exit -4 (SIGILL")
    assert "llama.cpp #26954" in choice.describe() and choice.describe().endswith("; zen4 with repacking")
    # the chosen folder loads zen4: the dying library is not in it, the programs are copies that search it
    run = subprocess.run([os.path.join(choice.folder, "llama-bench"), "-p", "8", "-n", "4"], capture_output=True,
                         text=True, cwd=choice.folder)
    assert run.returncode == 0 and llamacpp.loaded_cpu_variant(run.stderr) == "zen4"
    assert not any("sapphirerapids" in name for name in os.listdir(choice.folder))


def test_the_same_variant_without_repacking_wins_where_it_is_faster(fake_llama, monkeypatch):
    monkeypatch.setenv("FAKE_NOREPACK", "2000 400")
    choice = llamacpp.probe_choice(fake_llama, fake_llama.parent / "m.gguf")
    assert (choice.variant, choice.repack, choice.without) == ("sapphirerapids", False, ())
    assert choice.folder == str(fake_llama) and choice.describe().endswith("; sapphirerapids without repacking")


def test_llama_cpps_own_choice_is_kept_where_it_runs_and_probed_once_per_cpu_and_build(fake_llama, monkeypatch):
    monkeypatch.setenv("FAKE_AMX_WORKS", "1")
    choice = llamacpp.llama_choice()
    assert choice.is_own and choice.variant == "sapphirerapids" and runs(fake_llama) == 1
    assert choice.describe() == "sapphirerapids with repacking: llama.cpp's own choice"
    assert llamacpp.llama_bench_args() == [] and "LLAMA_ARG_REPACK" not in llamacpp.llama_env()
    monkeypatch.setattr(llamacpp.choice, "_choice", None)   # a new process: the cached file answers, nothing runs
    assert llamacpp.llama_choice() == choice and runs(fake_llama) == 1
    cached = list((fake_llama.parents[1] / "cache" / "llama-cpp").glob("choice-*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text())["variant"] == "sapphirerapids"


def test_every_caller_gets_the_chosen_folder_and_repacking(fake_llama, monkeypatch):
    monkeypatch.setenv("FAKE_NOREPACK", "2000 400")
    assert llamacpp.llama_binary("llama-server") == fake_llama / "llama-server"
    assert llamacpp.llama_bench_args() == ["--repack", "0"]
    env = llamacpp.llama_env()
    assert env["LLAMA_ARG_REPACK"] == "0" and env["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(fake_llama)
    assert llamacpp.llama_available()


def test_the_next_variant_is_the_one_llama_cpp_would_pick_without_the_dying_one(fake_llama, monkeypatch):
    """zen4 fails too (another fault): the probe leaves it out as well and lands on x64."""
    monkeypatch.setenv("FAKE_BROKEN", "zen4")
    monkeypatch.setenv("FAKE_NOREPACK", "100 20")
    choice = llamacpp.probe_choice(fake_llama, fake_llama.parent / "m.gguf")
    assert (choice.variant, choice.repack, choice.without) == ("x64", True, ("sapphirerapids", "zen4"))


def test_where_nothing_runs_a_prompt_llama_cpp_is_not_available(fake_llama, monkeypatch):
    (fake_llama / "llama-bench").write_text("#!/bin/sh\necho 'load_backend: loaded CPU backend from "
                                            "/x/libggml-cpu-zen4.so' >&2\nexit 1\n")
    assert not llamacpp.llama_available()
    with pytest.raises(llamacpp.LlamaCppMissing, match="no CPU variant of llama.cpp runs a prompt on this machine"):
        llamacpp.llama_binary("llama-server")


def test_a_program_that_prints_no_figures_does_not_run():
    assert not llamacpp.Trial("zen4", True, failure="printed no figures").runs
    assert llamacpp.died(-4).startswith("exit -4 (SIGILL") and llamacpp.died(1) == "exit 1"


@pytest.mark.server
def test_the_configuration_chosen_here_runs_a_prompt_and_decode_steps():
    """On this machine, whatever its CPU: the chosen llama.cpp configuration reads a prompt and decodes."""
    from playground.models import bundled_gguf_path
    from tests.helpers import require_llama

    require_llama()
    choice = llamacpp.llama_choice()
    trial = llamacpp.run_probe(llamacpp.llama_binary("llama-bench").parent, bundled_gguf_path(), repack=choice.repack,
                               prompt=16, decode=8)
    assert trial.runs and trial.prompt_tps > 0 and trial.decode_tps > 0, (choice.describe(), trial)
    assert trial.variant == choice.variant
