#!/usr/bin/env bash
# vLLM on a GPU with the playground's model, then the remote test suite, the bench's remote row and the serve
# workload (concurrent against one at a time) against it.
# NOT RUN YET: written where no GPU was available; run it on a CUDA machine and put its figures in the README.
#
#   VLLM=/opt/vllm/bin/vllm scripts/vllm_gpu.sh      # vLLM in its own environment (it pins its own torch)
#
# Needs: an NVIDIA GPU, `pip install vllm` (VLLM names its CLI), the model from the hub or its cache, and
# this checkout's .venv (`make install-dev`). vLLM listens on 127.0.0.1 only and is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}"   # the bundled GGUF's original weights
PORT="${PORT:-8000}"
VLLM="${VLLM:-vllm}"
PY="${PY:-.venv/bin/python}"
LOG="$(mktemp -t vllm-XXXXXX.log)"

"$VLLM" serve "$MODEL" --host 127.0.0.1 --port "$PORT" --max-model-len 8192 --max-logprobs 20 \
  --gpu-memory-utilization 0.30 >"$LOG" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true' EXIT

for _ in $(seq 1 600); do                       # a first start compiles kernels: minutes
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { echo "vLLM exited:"; tail -n 50 "$LOG"; exit 1; }
  sleep 1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { echo "vLLM not healthy after 10 min:"; tail -n 50 "$LOG"; exit 1; }

URL="http://127.0.0.1:$PORT/v1"
PLAYGROUND_TEST_ENDPOINT="$URL" "$PY" -m pytest -q -p no:cacheprovider tests/remote/test_remote_server.py
"$PY" -m playground.bench remote "$URL"       # client TTFT and decode tok/s (vLLM gives no per-request timings)
# the serve row's workload on vLLM: every request sent as it arrives (vLLM batches them) against one at a time
"$PY" -m playground.serve --url "$URL" --requests 16 --mix short:0.8,long:0.2 --rate 2 --seed 0 \
  --scheduler concurrent --compare one-at-a-time --out results/vllm-serve
echo "vLLM log: $LOG"
