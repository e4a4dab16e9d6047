#!/usr/bin/env bash
# One training step of a 2-block transformer encoder (batch 32, T 128, d 128, 4 heads, ff 512) side by side: trainkit,
# PyTorch eager (nn.TransformerEncoderLayer) and Keras 3 (jax); 2 threads, ROUNDS rounds interleaved (default 2).
# Prints the machine line (and its load average) and one JSON line per run. KERAS_VENV: Keras' environment (default
# .venv-keras). Then issue 32's memory check: the same model at T = 512 under a 512 MiB budget, trained with the
# batch Model::auto_batch_size chose (fit's batch_size=auto), its planned and measured peaks in its JSON line.
#
#   bench/transformer_step.sh [STEPS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${1:-20}"
ROUNDS="${2:-2}"
source bench/_setup.sh
bench_setup tk_bench_transformer
KERAS_VENV="${KERAS_VENV:-.venv-keras}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq "$ROUNDS"); do
  ./build/bench/tk_bench_transformer --steps "$STEPS"
  "$VENV/bin/python" bench/peers/torch_transformer.py --steps "$STEPS" --threads 2
  XLA_FLAGS="--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2" \
    "$KERAS_VENV/bin/python" bench/peers/keras_transformer.py --steps "$STEPS"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
TK_MEMORY_LIMIT=512MiB ./build/bench/tk_bench_transformer --batch 0 --steps-t 512 --steps 3
