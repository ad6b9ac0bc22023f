"""Model specs resolve to the right source; failures name the spec and what was tried."""
from pathlib import Path

import pytest

from playground.models import (FALLBACK_HUB_ID, ModelLoadError, bundled_gguf_path, load_model,
                               resolve_model_spec)


def test_default_spec_is_the_bundled_gguf():
    path = bundled_gguf_path()
    assert path is not None and path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    src = resolve_model_spec(None)
    assert (src.kind, src.location) == ("gguf", path)
    assert resolve_model_spec("  ").location == path


def test_default_falls_back_to_hub_id_without_the_package(monkeypatch):
    import playground.models as models
    monkeypatch.setattr(models, "bundled_gguf_path", lambda: None)
    src = models.resolve_model_spec(None)
    assert (src.kind, src.location) == ("hub", FALLBACK_HUB_ID)


@pytest.mark.parametrize("spec,kind", [("tiny", "tiny"), ("HuggingFaceTB/SmolLM2-135M-Instruct", "hub"),
                                       ("Qwen/Qwen2.5-0.5B-Instruct", "hub")])
def test_spec_kinds(spec, kind):
    assert resolve_model_spec(spec).kind == kind


def test_gguf_file_and_folder_specs(tmp_path):
    gguf = bundled_gguf_path()
    assert resolve_model_spec(str(gguf)).kind == "gguf"
    assert resolve_model_spec(str(gguf.parent)).location == gguf  # a folder with exactly one .gguf
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_spec(str(tmp_path)).kind == "dir"


@pytest.mark.parametrize("spec,needle", [
    ("/no/such/model.gguf", "no such file"), ("./missing-dir", "no such file"),
    ("not a model id", "no such file"),
])
def test_unresolvable_spec_names_itself(spec, needle):
    with pytest.raises(ModelLoadError, match=needle) as info:
        resolve_model_spec(spec)
    assert repr(spec) in str(info.value)


def test_non_gguf_file_is_refused(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match=r"\.gguf"):
        resolve_model_spec(str(f))


def test_unloadable_folder_says_what_was_tried(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ModelLoadError) as info:
        load_model(str(tmp_path))
    msg = str(info.value)
    assert str(tmp_path) in msg and "tried" in msg and "Cause" in msg


def test_loaded_models_are_cached_per_process():
    a = load_model("tiny")
    assert load_model("tiny") is a
    assert load_model("tiny", dtype="bfloat16") is not a


@pytest.mark.subprocess
def test_importing_the_package_loads_no_model():
    import subprocess
    import sys
    code = ("import sys, playground, playground.engine, playground.models, playground.backends;"
            "import playground.models as m; print(len(m._cache))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == "0"


def test_gguf_cache_key_follows_content_not_place(tmp_path):
    """Regression: the key held the file's path and mtime, so every fresh clone (its own .venv) converted
    and exported the same model again, filling the cache with copies."""
    import os
    import shutil

    from playground.models import gguf_content_key

    a = tmp_path / "a" / "m.gguf"
    a.parent.mkdir()
    a.write_bytes(os.urandom(9 << 20))
    b = tmp_path / "b" / "m.gguf"
    b.parent.mkdir()
    shutil.copyfile(a, b)
    os.utime(b, (1, 1))
    assert gguf_content_key(a) == gguf_content_key(b)
    assert gguf_content_key(a, "transformers 4.57") != gguf_content_key(a, "transformers 4.58")
    data = bytearray(a.read_bytes())
    data[-1] ^= 0xFF
    b.write_bytes(bytes(data))
    assert gguf_content_key(a) != gguf_content_key(b)
