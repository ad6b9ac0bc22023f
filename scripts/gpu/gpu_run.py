"""The torch backend on the GPU with its own defaults (dtype chosen for CUDA): one greedy run, its Steps' figures."""
import json
import os

import torch

from playground.backends import create_backend
from playground.config import GenerationSettings
from playground.engine import Engine

b = create_backend("torch", "tiny", device="cuda")
e = Engine(b)
st = GenerationSettings(max_new_tokens=32, temperature=0.0)
t = e.generate("What is the capital of France?", st)
t = e.generate("What is the capital of France?", st)   # warm
kv_ok = [s.kv_bytes for s in t.steps] == [t.kv_shape.formula_bytes(s.seq_len) for s in t.steps]
m = t.metrics()
out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "backend": b.name, "dtype": b.dtype,
       "device": b.device, "tokens": len(t.output_ids), "kv_bytes_equal_formula": kv_ok,
       "kv_bytes_last": t.steps[-1].kv_bytes, "ttft_ms": round(m.ttft * 1e3, 3), "decode_tps": round(m.decode_tps, 1),
       "latencies_positive": all(s.latency > 0 for s in t.steps),
       "cuda_memory_allocated": torch.cuda.memory_allocated()}
print(json.dumps(out))
open(os.path.join(os.environ.get("OUT", "/tmp"), "gpu_run.json"), "w").write(json.dumps(out, indent=1))
