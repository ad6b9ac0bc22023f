"""A `spaces` module with ZeroGPU's semantics, for tests (no GPU, no ZeroGPU scheduler): what the real package
(spaces 0.51, zero/wrappers.py) does to a decorated function, so that what breaks on a ZeroGPU Space breaks here.

    double = ZeroGpuDouble().install(monkeypatch)   # sys.modules["spaces"], SPACES_ZERO_GPU=true, torch watched
    gpu = spaces.GPU(duration=60)(fn)                # as the app decorates
    double.startup()                                 # what demo.launch() triggers: moved weights are packed
    double.calls                                     # each GPU call: its function and requested seconds

- The decorated function runs in a child forked (multiprocessing's fork context) from this process, a fresh one
  per call (the real one reuses an idle worker only sometimes): what it changes there is lost to the caller.
- Its arguments are pickled to the child (an unpicklable one raises pickle.PicklingError in the caller); each value
  it yields, or returns, is pickled back (an unpicklable one ends the call with gr.Error("PicklingError"), titled
  "ZeroGPU worker error", as the real wrapper raises it). An exception in the child reaches the caller as that
  gr.Error naming its class (a gr.Error as itself). Closing the caller's generator stops the child's after its
  next value.
- The requested duration (a number or a callable of the call's arguments, as spaces.GPU takes it) is a limit: past
  it the child is killed and the caller gets gr.Error("GPU task aborted"), titled "ZeroGPU worker error".
- The device: there is no CUDA, so `device` (default "cpu") stands for it. A module's `.to(device)` is recorded
  (process, thread, before or after start-up); in a thread of the main process other than the main thread it raises,
  as ZeroGPU's patched torch does (its interception is thread-local: such a move reaches CUDA's real init). After
  startup() a forward pass in the main process of a module moved so raises too: ZeroGPU packed its weights away
  and only a worker has them. A move inside the child is allowed (it is on a real Space) but recorded, so a test
  can see a model loaded inside the worker, which is lost with it. The child computes on the CPU in CUDA's place,
  on one thread: a forked child cannot use the OpenMP pool its parent's threads started (a matmul there hangs).
"""
from __future__ import annotations

import inspect
import multiprocessing
import os
import pickle
import sys
import threading
import time
import traceback
import types
from dataclasses import dataclass, field

FORK = multiprocessing.get_context("fork")
POLL = 0.05


@dataclass(frozen=True)
class GpuCall:
    function: str
    seconds: float
    visitor: bool          # Gradio's request was in the caller's context (ZeroGPU counts the call against it)


@dataclass(frozen=True)
class DeviceMove:
    main_process: bool
    main_thread: bool
    after_startup: bool
    module: str


@dataclass
class ZeroGpuDouble:
    device: str = "cpu"
    calls: list[GpuCall] = field(default_factory=list)
    moves: list[DeviceMove] = field(default_factory=list)
    launched: bool = False
    main_pid: int = field(default_factory=os.getpid)
    active: bool = False

    # --- installing

    def install(self, monkeypatch) -> "ZeroGpuDouble":
        import gradio as gr
        import torch

        module = types.ModuleType("spaces")
        module.GPU = self.GPU
        module.double = self
        monkeypatch.setitem(sys.modules, "spaces", module)
        monkeypatch.setenv("SPACES_ZERO_GPU", "true")
        original_to = torch.nn.Module.to
        double = self

        def to(module_, *args, **kwargs):
            device = torch._C._nn._parse_to(*args, **kwargs)[0]
            if double.active and device is not None and device.type == torch.device(double.device).type:
                double._moved(module_)
            return original_to(module_, *args, **kwargs)
        monkeypatch.setattr(torch.nn.Module, "to", to)
        original_launch = gr.Blocks.launch

        def launch(blocks, *args, **kwargs):   # as spaces' one_launch: start-up (packing) when the page launches
            double.startup()
            return original_launch(blocks, *args, **kwargs)
        monkeypatch.setattr(gr.Blocks, "launch", launch)
        monkeypatch.setattr(self, "active", True)   # undone with the monkeypatch: the hooks go quiet
        # a Space's process starts with no model loaded: models another test loaded in this process would skip
        # the device move the double watches for
        from playground import models
        monkeypatch.setattr(models, "_cache", {})
        return self

    def startup(self) -> None:
        self.launched = True

    def _moved(self, module) -> None:
        main_process = os.getpid() == self.main_pid
        main_thread = threading.current_thread() is threading.main_thread()
        self.moves.append(DeviceMove(main_process, main_thread, self.launched, type(module).__name__))
        if main_process and not main_thread:
            raise RuntimeError("Low-level CUDA init (`torch._C._cuda_init`) reached. This means ZeroGPU's PyTorch "
                               "CUDA emulation mode did not intercept a CUDA operation in your code (a move to "
                               f"{self.device} in thread {threading.current_thread().name!r}, not the main thread)")
        if main_process and not getattr(module, "_zerogpu_watched", False):
            module._zerogpu_watched = True
            module.register_forward_pre_hook(self._forward_in_main)

    def _forward_in_main(self, module, args):
        if self.active and self.launched and os.getpid() == self.main_pid:
            raise RuntimeError(f"Cannot apply {type(module).__name__}.forward on disk-offloaded tensors: ZeroGPU "
                               "packed this model's weights at start-up; compute on it only inside spaces.GPU")

    # --- the decorator

    def GPU(self, task=None, *, duration=None, size=None):
        if callable(task):
            return self._wrap(task, duration)
        if task is not None and not isinstance(task, str):   # spaces.GPU(45)
            duration = task
        return lambda fn: self._wrap(fn, duration)

    def _wrap(self, task, duration):
        import functools
        double = self

        if inspect.isgeneratorfunction(task):
            @functools.wraps(task)
            def generator(*args, **kwargs):
                if os.getpid() != double.main_pid:   # already in a worker: run as is
                    yield from task(*args, **kwargs)
                    return
                yield from double._call(task, args, kwargs, duration, streaming=True)
            return generator

        @functools.wraps(task)
        def function(*args, **kwargs):
            if os.getpid() != double.main_pid:
                return task(*args, **kwargs)
            for value in double._call(task, args, kwargs, duration, streaming=False):
                return value
        return function

    def _call(self, task, args, kwargs, duration, streaming: bool):
        import gradio as gr
        from gradio.context import LocalContext

        seconds = duration(*args, **kwargs) if callable(duration) else (duration or 60)
        self.calls.append(GpuCall(task.__name__, float(seconds), LocalContext.request.get(None) is not None))
        payload = pickle.dumps((args, kwargs))   # PicklingError (or TypeError: cannot pickle) here, as the real put
        receive, send = FORK.Pipe(duplex=False)
        stop = FORK.Event()
        child = FORK.Process(target=_child, args=(task, payload, send, stop, streaming), daemon=True)
        child.start()
        send.close()
        deadline = time.monotonic() + float(seconds)
        try:
            while True:
                if time.monotonic() > deadline:   # ZeroGPU kills the worker past its duration
                    raise gr.Error("GPU task aborted", title="ZeroGPU worker error")
                if not receive.poll(POLL):
                    if not child.is_alive() and not receive.poll(0):
                        raise gr.Error("GPU task aborted", title="ZeroGPU worker error")
                    continue
                try:
                    kind, value = pickle.loads(receive.recv_bytes())
                except EOFError:
                    raise gr.Error("GPU task aborted", title="ZeroGPU worker error") from None
                if kind == "error":
                    if isinstance(value, gr.Error):
                        raise value
                    cls, text = value
                    print(text, file=sys.stderr)
                    raise gr.Error(cls, title="ZeroGPU worker error")
                if kind == "end":
                    return
                try:
                    yield value
                except GeneratorExit:
                    stop.set()
                    raise
        finally:
            if child.is_alive():
                stop.set()
                child.join(0.5)
            if child.is_alive():
                child.kill()
            child.join()
            receive.close()


def _child(task, payload, send, stop, streaming: bool) -> None:
    """In the forked worker: run `task`, send each value back pickled, then an end (or the error)."""
    if "torch" in sys.modules:   # the CPU computes here in CUDA's place: one thread, since a forked child cannot
        sys.modules["torch"].set_num_threads(1)   # join the OpenMP pool the parent's threads started (it hangs)

    def put(kind, value) -> bool:
        try:
            data = pickle.dumps((kind, value))
        except Exception as exc:  # noqa: BLE001 - what does not pickle ends the call, as in ZeroGPU
            send.send_bytes(pickle.dumps(("error", ("PicklingError", f"{type(exc).__name__}: {exc}"))))
            return False
        send.send_bytes(data)
        return True

    try:
        args, kwargs = pickle.loads(payload)
        if streaming:
            generator = task(*args, **kwargs)
            for value in generator:
                if stop.is_set():
                    generator.close()
                    break
                if not put("yield", value):
                    generator.close()
                    return
        elif not put("yield", task(*args, **kwargs)):
            return
        send.send_bytes(pickle.dumps(("end", None)))
    except Exception as exc:  # noqa: BLE001 - the caller gets it, as ZeroGPU's exception_result
        import gradio as gr
        error = exc if isinstance(exc, gr.Error) else (type(exc).__name__, traceback.format_exc())
        try:
            send.send_bytes(pickle.dumps(("error", error)))
        except Exception:  # noqa: BLE001 - an unpicklable gr.Error: its class name
            send.send_bytes(pickle.dumps(("error", (type(exc).__name__, traceback.format_exc()))))
    finally:
        send.close()
        os._exit(0)   # as a worker ends: no atexit hooks, no pytest teardown in the child
