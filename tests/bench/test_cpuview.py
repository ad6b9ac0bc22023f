"""The CPU view (playground/bench/cpuview.py): a process shown an AVX2-only CPU runs its libraries' AVX2 choices,
says so in its stamp, and still dies of a real fault as it would without the view."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from playground.bench import cpuview

pytestmark = [pytest.mark.subprocess,
              pytest.mark.skipif(cpuview.unavailable() is not None, reason=f"no CPU view here: {cpuview.unavailable()}")]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return cpuview.view_env("avx2", cache_dir=tmp_path_factory.mktemp("cache"))


def run(code: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_torch_chooses_its_avx2_kernels_in_the_view(env):
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    assert run(code, env).stdout.strip() == "AVX2"


def test_the_view_clears_avx512_in_cpuid_and_keeps_avx2(env, tmp_path):
    probe = tmp_path / "probe.c"
    probe.write_text('#include <stdio.h>\n#include <cpuid.h>\nint main(void){unsigned a,b,c,d;'
                     '__cpuid_count(7,0,a,b,c,d);printf("%u %u %u\\n",(b>>5)&1,(b>>16)&1,(c>>11)&1);return 0;}\n')
    subprocess.run(["cc", "-O0", "-o", str(tmp_path / "probe"), str(probe)], check=True)
    avx2, avx512f, vnni = subprocess.run([str(tmp_path / "probe")], env=env, capture_output=True, text=True,
                                         check=True).stdout.split()
    assert (avx2, avx512f, vnni) == ("1", "0", "0")


def test_a_real_fault_still_ends_the_process_and_reaches_faulthandler(env):
    crash = "import ctypes; ctypes.string_at(0)"
    assert run(crash, env).returncode == -signal.SIGSEGV
    handled = subprocess.run([sys.executable, "-X", "faulthandler", "-c", crash], env=env, capture_output=True,
                             text=True, timeout=120)
    assert "Segmentation fault" in handled.stderr


def test_the_stamp_names_the_view_and_shows_its_flags(env):
    code = ("import json; from playground.bench.rows import Machine; from playground.bench.cpuview import describe;"
            "print(json.dumps([Machine.here().cpu_flags, describe()]))")
    flags, view = json.loads(run(code, env).stdout)
    assert flags["avx512f"] is False and flags["avx2"] is True
    assert view.startswith("avx2: ")
    plain_flags, plain_view = json.loads(run(code).stdout)
    assert plain_view is None


def test_llama_cpp_keeps_its_choice_apart_in_the_view(env):
    code = "from playground.llamacpp.programs import cpu_key; print(cpu_key())"
    assert run(code, env).stdout.strip() != run(code).stdout.strip()


def test_an_unknown_view_is_refused_with_the_views_named():
    with pytest.raises(cpuview.ViewUnavailable, match="avx2"):
        cpuview.view_env("avx1024")
