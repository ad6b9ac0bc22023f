"""pytest -p cuda_plugin (scripts/gpu/ on PYTHONPATH): every torch backend the tests make runs on CUDA_PLUGIN_DEVICE
(default cuda), in the dtype the test asked for. Lives outside tests/: the suite imports tests/ for its doctests."""
import os

from playground.backends import torch_backend

DEVICE = os.environ.get("CUDA_PLUGIN_DEVICE", "cuda")
_init = torch_backend.TorchBackend.__init__


def _on_device(self, loaded, device, dtype):
    if device == "cpu":
        loaded.model.to(DEVICE)
        device = DEVICE
    _init(self, loaded, device, dtype)


torch_backend.TorchBackend.__init__ = _on_device
