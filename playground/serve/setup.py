"""The Serve setup's pieces, written once: a form (the Serve tab's, or the CLI's flags read into one) into schedulers
and a workload. The two front ends only translate their inputs; run.py puts these pieces together for both.

    form = WorkloadForm(n=16, arrival="poisson", rate=2.0, seed=0, short_prompt=SHORT_QUESTION, short_tokens=48,
                        short_share=0.8, long_prompt=SUMMARIZE_INSTRUCTION + long_document(), long_tokens=48,
                        long_share=0.2)
    a = make_scheduler(Pick("one-at-a-time", "onnx"), get_source)     # ValueError in words
    b = make_scheduler(Pick("batching", "onnx", BatchConfig(slots=8)), get_source)
    workload = build_workload(a.source, form)                         # the long prompt cut to A's window, capped
    (a, b), workload = preset_setup(PRESETS[name], a.source, form, b.config)   # A and B: our batching, the preset's
    chunks, workload = parse_chunks("32,128"), interference_workload(b.source)  # the prefill-chunk sweep's

`get_source(name)` hands out a source by name (the app's registry, the CLI's own engines) and raises ValueError
(or a subclass) in words when it cannot. ui/serve_tab.py reads ServeForm (a WorkloadForm with the schedulers'
fields) into Picks; cli.py reads its flags into the same WorkloadForm and Picks (tests/serve/test_serve_setup.py
holds the two equal).

Left out: putting the pieces together and running them (run.py: what the tab and the CLI call), replaying a
workload file (cli.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from ..config import GenerationSettings
from ..prompts import SHORT_QUESTION, SUMMARIZE_INSTRUCTION, fit_to_window, long_document
from ..source import Origin
from .batching import BatchConfig
from .presets import INTERFERENCE, PRESETS
from .registry import SCHEDULERS, Needs
from .workload import MAX_REQUESTS, MAX_WORKLOAD_TOKENS, RequestClass, Workload, check_tokens

if TYPE_CHECKING:
    from .batching_torch import PoolConfig
    from .presets import Preset
    from .schedulers import Scheduler

ALL_AT_ONCE = "all-at-once"


@dataclass
class WorkloadForm:
    """A workload of two request classes (short, long): how many, how they arrive, each class's prompt,
    budget and share of the mix. Numbers may come as floats (a page's sliders)."""
    n: float
    arrival: str
    rate: float | None
    seed: float
    short_prompt: str
    short_tokens: float
    short_share: float
    long_prompt: str
    long_tokens: float
    long_share: float

    def arrival_rate(self) -> float | None:
        """Requests per second; None when they arrive all at once (or no rate is given).

        >>> sweep_mix(4).arrival_rate(), replace(sweep_mix(4), arrival=ALL_AT_ONCE).arrival_rate()
        (1.0, None)
        """
        return None if self.arrival == ALL_AT_ONCE or self.rate is None else float(self.rate)


@dataclass(frozen=True)
class Pick:
    """A scheduler to make: its name, the source picked for it, the batching schedulers' options (each uses its
    own: `batch` ours, `pool` transformers' manager's; None: its defaults)."""
    scheduler: str
    source: str
    batch: BatchConfig = field(default_factory=BatchConfig)
    pool: PoolConfig | None = None

    @property
    def runs_on(self) -> str:
        """The source it runs on: the one picked, except transformers' manager, which runs on torch.

        >>> Pick("batching-torch", "onnx").runs_on, Pick("batching", "onnx").runs_on, Pick("x", "onnx").runs_on
        ('torch', 'onnx', 'onnx')
        """
        spec = SCHEDULERS.get(self.scheduler)
        return Needs.TORCH.value if spec is not None and spec.needs == Needs.TORCH else self.source


def pool_config(blocks: int | None, max_batch_tokens: int, manager: str) -> PoolConfig:
    """transformers' manager's block pool (`blocks` None or 0: just enough for the workload)."""
    from .batching_torch import PoolConfig
    return PoolConfig(num_blocks=int(blocks or 0) or None, max_batch_tokens=int(max_batch_tokens), scheduler=manager)


def make_scheduler(pick: Pick, get_source: Callable[[str], Any], offered=None) -> Scheduler:
    """The scheduler `pick` names, on its source; ValueError in words. `offered`: the source names the app has
    (None: any name may be asked for)."""
    spec = SCHEDULERS.get(pick.scheduler)
    if spec is None:
        raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}; got {pick.scheduler!r}")
    if spec.needs == Needs.TORCH and offered is not None and Needs.TORCH.value not in offered:
        raise ValueError(f"{spec.label} runs on the torch backend, which this app does not offer")
    source = get_source(pick.runs_on)
    if spec.needs == Needs.REMOTE and source.info.origin != Origin.REMOTE:
        raise ValueError(f"{spec.label} needs a remote server as its source; {source.info.name} runs in this process")
    return spec.create(source, batch=pick.batch, pool=pick.pool)


def prompt_counter(source) -> Callable[[str], int]:
    """Prompt tokens as `source` reads a prompt (its chat template included)."""
    return lambda prompt: len(source.prompt_ids(prompt, GenerationSettings())[1])


def build_workload(source, form: WorkloadForm, limit: int = MAX_WORKLOAD_TOKENS) -> Workload:
    """The form's workload, its long prompt cut to `source`'s window; ValueError above `limit` tokens (prompts +
    new tokens, counted where the source has a local tokenizer)."""
    long_prompt = fit_to_window(source, form.long_prompt or "", int(form.long_tokens))[0]
    classes = [RequestClass("short", form.short_prompt, int(form.short_tokens), float(form.short_share)),
               RequestClass("long", long_prompt, int(form.long_tokens), float(form.long_share))]
    workload = Workload.build(classes, int(form.n), form.arrival, form.arrival_rate(), int(form.seed))
    if source.capabilities.local_tokenizer:
        check_tokens(workload, prompt_counter(source), limit)
    return workload


def preset_setup(preset: Preset, source, form: WorkloadForm, base: BatchConfig,
                 limit: int = MAX_WORKLOAD_TOKENS) -> tuple[list[Scheduler], Workload]:
    """A preset's workload (the form's count, rate and seed) on `source`, and our batching twice, A and B with
    the preset's settings over `base` (its prefix cache and KV budget are the preset's to set)."""
    workload = preset.build(source, int(form.n), form.arrival_rate(), int(form.seed))
    count = prompt_counter(source)
    check_tokens(workload, count, limit)
    configs = preset.configs(workload, count, replace(base, prefix_cache=0, kv_budget=0))
    return [SCHEDULERS["batching"].create(source, batch=config) for config in configs], workload


def sweep_mix(requests) -> WorkloadForm:
    """The rate sweep's workload: the lesson's two requests (a question, a document to summarize), Poisson."""
    return WorkloadForm(n=requests, arrival="poisson", rate=1.0, seed=0, short_prompt=SHORT_QUESTION,
                        short_tokens=48, short_share=0.8, long_prompt=SUMMARIZE_INSTRUCTION + long_document(),
                        long_tokens=48, long_share=0.2)


def parse_sizes(text) -> list[int]:
    """The batch-size sweep's sizes from "1,2,4"; ValueError in words.

    >>> parse_sizes("1, 4,2")
    [1, 4, 2]
    """
    try:
        sizes = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes or not all(1 <= x <= MAX_REQUESTS for x in sizes):
        raise ValueError(f"batch sizes must be whole numbers between 1 and {MAX_REQUESTS}, e.g. 1,2,4,8,16")
    return sizes


def parse_rates(text) -> list[float]:
    """The rate sweep's rates from "0.5,1" (requests/s; the sweep checks them).

    >>> parse_rates("0.5, 2")
    [0.5, 2.0]
    """
    try:
        return [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"rates must be numbers of requests per second, e.g. 0.25,0.5,1,2; got {text!r}") from None


def parse_chunks(text) -> list[int]:
    """The prefill-chunk sweep's sizes from "32,64,…", sorted; ValueError in words.

    >>> parse_chunks("256,32")
    [32, 256]
    """
    try:
        chunks = sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        chunks = []
    if not chunks or not all(16 <= x <= 4096 for x in chunks):
        raise ValueError("prefill chunks must be whole numbers between 16 and 4096, e.g. 32,64,128,256,512")
    return chunks


def interference_workload(source, requests: int | None = None, rate: float | None = None, seed: int = 0,
                          limit: int = MAX_WORKLOAD_TOKENS) -> Workload:
    """The prefill-chunk sweep's workload: the preset "a long document among chatters" on `source` (its own
    request count and rate unless given); ValueError above `limit` tokens."""
    preset = PRESETS[INTERFERENCE]
    workload = preset.build(source, requests or preset.requests, preset.rate if rate is None else rate, seed)
    check_tokens(workload, prompt_counter(source), limit)
    return workload


def at_chunk(scheduler, chunk: int) -> Scheduler:
    """Our batching as `scheduler` is, reading `chunk` prompt tokens per iteration."""
    return SCHEDULERS["batching"].create(scheduler.source, batch=replace(scheduler.config, prefill_chunk=chunk))
