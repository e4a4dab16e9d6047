#!/usr/bin/env bash
# Side-by-side tensor workloads (2 threads, float32, CPU): LayerNorm forward + backward over (4096, 512), softmax,
# log-softmax and the softmax gradient over the last axis of (4096, 1024), batched matmul (64, 128, 64) x
# (64, 64, 128); trainkit's graph runtime (tk_bench_tensor_ops), PyTorch eager and Keras 3 on tensorflow-cpu
# (tf.function), interleaved for ROUNDS rounds (default 5); prints each workload's medians (wall and process CPU time
# per run) and trainkit's time ratio to each peer (bench/summarize_ops.py), then the machine line and every run's JSON.
#
#   bench/tensor_ops.sh [ROUNDS] [ITERS]   # ITERS timed iterations per workload and run (default 30, after 5 warm-up)
#   ROUNDS=3 bench/tensor_ops.sh           # peers from $TK_VENV (default .venv), created if missing
#   THREADS=1 bench/tensor_ops.sh          # another thread count for everyone (default 2)
#
# Two threads on two cores: run it on an otherwise idle machine (a busy core deschedules one thread of a team and
# multiplies PyTorch's and trainkit's times; the load average is printed before and after).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-${ROUNDS:-5}}"
ITERS="${2:-${ITERS:-30}}"
source bench/_setup.sh
setup_log=$(mktemp)
runs=$(mktemp)
err=$(mktemp)
trap 'rm -f "$setup_log" "$runs" "$err"' EXIT
# Runs one benchmark, its JSON lines appended to $runs; its stderr (trainkit's per-op profile, TensorFlow's logs) is
# shown only when it fails.
run() { "$@" 2>"$err" >>"$runs" || { cat "$err" >&2; echo "failed: $*" >&2; exit 1; }; }
bench_setup tk_bench_tensor_ops 2> >(tee "$setup_log" >&2)
THREADS="${THREADS:-2}"
export TK_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "load average before: $load_before" >&2
round_loads=""
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  run ./build/bench/tk_bench_tensor_ops --iters "$ITERS"
  run "$VENV/bin/python" bench/peers/torch_ops.py --iters "$ITERS" --threads "$THREADS"
  run "$VENV/bin/python" bench/peers/keras_ops.py --iters "$ITERS" --threads "$THREADS"
  round_loads="${round_loads:+$round_loads / }$(cut -d' ' -f1 /proc/loadavg)"
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/summarize_ops.py "$runs"
grep -m1 '^machine:' "$setup_log" || true
echo "load average (1, 5, 15 min) before: $load_before, after: $load_after; 1 min after each round: $round_loads"
cat "$runs"
