"""Settings for a run and for the app: frozen dataclasses with a comment on every default.

`GenerationSettings` is what one request asks for (sampling, token budget); `validate()` turns any
out-of-range value into a `ValueError` that names the field and its allowed range. `AppConfig` is how
the process is set up (model, backend, dtype), read from `PLAYGROUND_*` environment variables.

Left out: per-user persistence; settings live only as long as the request that carries them.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

# --- limits shared by the API and the UI sliders

MAX_NEW_TOKENS_LIMIT = 2048  # a generous cap: beyond it a CPU demo would run for minutes
MAX_TOP_K = 1000             # more candidates than anyone samples from in practice
MAX_TEMPERATURE = 5.0        # above this the distribution is noise
MAX_TOP_CANDIDATES = 20      # top-k candidates recorded per step (for the probability chart)
MAX_PROMPT_CHARS = 200_000   # ~50k words; longer text is refused before tokenizing


def check_text(text, name: str = "prompt") -> str:
    """`text` when a tokenizer can read it; else ValueError naming the field (`name`) and what is wrong.

    One decision for every way text reaches a tokenizer (the page's prompt and system prompt, the endpoint's
    messages, prompt, stop strings and /tokenize): text that is not a str, or that cannot be encoded as UTF-8
    (a lone surrogate, which a browser or a JSON "\\ud800" escape can send), is refused, never cleaned, so the
    model never reads something other than what was sent. NUL and other control characters are valid UTF-8:
    they pass and are tokenized like any character.

    >>> check_text("nul \\x00 is text")
    'nul \\x00 is text'
    >>> check_text("broken \\ud800 utf-16", "messages[0].content")
    Traceback (most recent call last):
    ValueError: messages[0].content is not valid Unicode (a lone surrogate at position 7); send it again as UTF-8 text
    """
    if not isinstance(text, str):
        raise ValueError(f"{name} must be text, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not valid Unicode (a lone surrogate at position {exc.start}); send it again "
                         "as UTF-8 text") from None
    return text


@dataclass(frozen=True)
class GenerationSettings:
    max_new_tokens: int = 64      # token budget; the run also stops at EOS
    temperature: float = 0.0      # 0 means greedy (argmax); >0 samples from softmax(logits / T)
    top_k: int = 0                # 0 = off; else keep only the k most likely tokens before sampling
    top_p: float = 1.0            # 1.0 = off; else nucleus sampling over the smallest set with mass >= p
    seed: int | None = None       # fixes the sampler's RNG so a sampled run can be reproduced
    chat: bool = True             # apply the model's chat template (if it has one); False = raw completion
    system_prompt: str | None = None  # replaces the template's default system message when given
    top_candidates: int = 5       # how many next-token candidates each Step records

    def __post_init__(self) -> None:
        # 64.0 from a UI slider or a JSON body means 64: whole-number floats become ints here, so every
        # consumer (the sampler's seed, range(), transformers' top-k check) sees an int
        for name in _INT_FIELDS:
            v = getattr(self, name)
            if isinstance(v, float) and math.isfinite(v) and v.is_integer():
                object.__setattr__(self, name, int(v))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> "GenerationSettings":
        """Raise ValueError naming the field and its allowed range; return self when all is well."""
        _check_int("max_new_tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS_LIMIT)
        _check_float("temperature", self.temperature, 0.0, MAX_TEMPERATURE)
        _check_int("top_k", self.top_k, 0, MAX_TOP_K)
        _check_float("top_p", self.top_p, 0.0, 1.0, low_open=True)
        if self.seed is not None:
            _check_int("seed", self.seed, 0, 2**63 - 1)
        _check_int("top_candidates", self.top_candidates, 1, MAX_TOP_CANDIDATES)
        if not isinstance(self.chat, bool):
            raise ValueError(f"chat must be True or False, got {self.chat!r}")
        if self.system_prompt is not None:
            check_text(self.system_prompt, "system_prompt")
        return self

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def with_(self, **changes) -> "GenerationSettings":
        return replace(self, **changes)


def _check_int(name: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)  # 64.0 from a UI slider is fine; 64.5 is not
        else:
            raise ValueError(f"{name} must be a whole number between {low} and {high}, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")


def _check_float(name: str, value, low: float, high: float, low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number between {low} and {high}, got {value!r}")
    if value > high or value < low or (low_open and value == low):
        bound = f"greater than {low} and at most {high}" if low_open else f"between {low} and {high}"
        raise ValueError(f"{name} must be {bound}, got {value}")


_INT_FIELDS = ("max_new_tokens", "top_k", "top_candidates", "seed")


def coerce_settings(**values) -> GenerationSettings:
    """Build settings from loose inputs (UI numbers arrive as floats), then validate.

    >>> coerce_settings(max_new_tokens=8.0, top_k=1.0, seed=3.0).top_k
    1
    """
    return GenerationSettings(**values).validate()


# --- process-level configuration


@dataclass(frozen=True)
class AppConfig:
    model: str | None = None      # None = the bundled SmolLM2 GGUF (or its hub id if not installed)
    backend: str | None = None    # None = torch on CUDA when present, else backends.default_backend_name's choice
    dtype: str | None = None      # None = float32 on CPU, float16 on CUDA
    device: str | None = None     # None = "cuda" when available, else "cpu"
    cache_dir: Path = field(default_factory=lambda: persistent_cache_dir() or local_cache_dir())
    # converted GGUF weights, quantized blocks and ONNX exports live here; delete the folder to clear it

    @classmethod
    def from_env(cls, **overrides) -> "AppConfig":
        env = {
            "model": os.environ.get("PLAYGROUND_MODEL") or None,
            "backend": os.environ.get("PLAYGROUND_BACKEND") or None,
            "dtype": os.environ.get("PLAYGROUND_DTYPE") or None,
            "device": os.environ.get("PLAYGROUND_DEVICE") or None,
        }
        if os.environ.get("PLAYGROUND_CACHE"):
            env["cache_dir"] = Path(os.environ["PLAYGROUND_CACHE"])
        env.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**env)

    @classmethod
    def from_args(cls, args) -> "AppConfig":
        """A CLI's --model / --backend / --device / --dtype over the environment, as the app reads them.

        >>> import argparse, os
        >>> os.environ["PLAYGROUND_MODEL"] = "tiny"
        >>> AppConfig.from_args(argparse.Namespace(model=None, backend="onnx")).model
        'tiny'
        >>> AppConfig.from_args(argparse.Namespace(model="other", backend=None)).model
        'other'
        >>> del os.environ["PLAYGROUND_MODEL"]
        """
        return cls.from_env(**{k: getattr(args, k, None) for k in ("model", "backend", "device", "dtype")})


def default_cache_dir() -> Path:
    return AppConfig.from_env().cache_dir


CACHE_NAME = "llm-serving-playground"
SPACE_DATA = Path("/data")   # where a Space's owner mounts storage by default (a Storage Bucket, as a volume)


def local_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / CACHE_NAME


def persistent_cache_dir() -> Path | None:
    """<SPACE_DATA>/llm-serving-playground on a Space (SPACE_ID set) whose SPACE_DATA is a writable folder, where the
    owner mounts a Storage Bucket; None elsewhere (off a Space, /data is someone else's).
    PLAYGROUND_CACHE, when set, wins over both (AppConfig.from_env)."""
    if os.environ.get("SPACE_ID") and SPACE_DATA.is_dir() and os.access(SPACE_DATA, os.W_OK | os.X_OK):
        return SPACE_DATA / CACHE_NAME
    return None


def on_own_filesystem(path: Path) -> bool:
    """True when `path` (or its nearest existing parent) is a mount point's tree on another filesystem than /:
    a mounted volume (a Storage Bucket), not the container's own disk.

    >>> on_own_filesystem(Path("/"))
    False
    """
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return path.stat().st_dev != Path("/").stat().st_dev


@dataclass(frozen=True)
class CacheLocation:
    """Where the caches live and whether they outlast a restart (None: not a Space, the machine's own disk decides)."""
    path: Path
    survives_restart: bool | None
    why: str

    def log_line(self) -> str:
        verdict = {True: "survives a restart", False: "lost on restart", None: "on this machine's disk"}
        return f"cache: {self.path} ({verdict[self.survives_restart]}: {self.why})"


def cache_location(config: "AppConfig | None" = None) -> CacheLocation:
    """The cache folder of `config` (default: from the environment) and whether it survives a Space's restart:
    the setting given (PLAYGROUND_CACHE: the owner chose it) or a folder on a mounted filesystem survives; the
    container's own disk (the home cache) is wiped when a Space restarts."""
    path = (config or AppConfig.from_env()).cache_dir
    if os.environ.get("PLAYGROUND_CACHE"):
        return CacheLocation(path, True, "PLAYGROUND_CACHE, the folder the owner chose")
    if not os.environ.get("SPACE_ID"):
        return CacheLocation(path, None, "not a Space")
    if on_own_filesystem(path):
        return CacheLocation(path, True, "a mounted volume, not the container's disk")
    return CacheLocation(path, False, f"the Space's own disk; mount a Storage Bucket at {SPACE_DATA} (read-write) "
                                      "or set PLAYGROUND_CACHE to a mounted folder")

