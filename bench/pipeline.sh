#!/usr/bin/env bash
# Input pipeline, side by side with tf.data (tensorflow-cpu) in one run:
#  1. throughput: from_tensor_slices -> shuffle(10000) -> batch(128) -> prefetch(AUTOTUNE) over
#     Fashion-MNIST-sized arrays: batches/s (target: >= 2x tf.data) and the hand-off latency of a ready
#     batch (target: <= 50 us);
#  2. overlap: elements of known CPU cost (map, num_parallel_calls=2) feeding a step of known cost, in a
#     compute-bound and an input-bound setting: epoch time / max(compute, load / parallelism) (target <= 1.05).
#
#   bench/pipeline.sh            # peers from $TK_VENV (default .venv), created if missing
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/_setup.sh
bench_setup tk_bench_pipeline
run_both() {  # mode args...
  ./build/bench/tk_bench_pipeline "$@" | tail -n 1
  "$VENV/bin/python" bench/peers/tfdata_pipeline.py "$@"
}
# Overlap runs are repeated 3 times (a 2-vCPU VM is noisy); the summary shows the median by ratio.
results=$(
  run_both throughput --epochs 3
  for i in 1 2 3; do
    run_both overlap --element-us 200 --step-ms 10 --parallel 2 --elements 6400 --batch 64   # compute-bound
    run_both overlap --element-us 400 --step-ms 5 --parallel 2 --elements 6400 --batch 64    # input-bound
  done
)
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
tk, tf = rows[0], rows[1]
print(f"throughput  trainkit {tk['batches_per_s']:8.1f} batches/s  tf.data {tf['batches_per_s']:8.1f}  "
      f"ratio {tk['batches_per_s'] / tf['batches_per_s']:.2f}x")
print(f"hand-off    trainkit p50 {tk['handoff_p50_us']:.1f} us p99 {tk['handoff_p99_us']:.1f} us   "
      f"tf.data p50 {tf['handoff_p50_us']:.1f} us p99 {tf['handoff_p99_us']:.1f} us")
groups = {}
for r in rows[2:]:
    groups.setdefault((r["peer"], r["step_ms"]), []).append(r)
for (peer, step), rs in groups.items():
    rs.sort(key=lambda r: r["ratio_to_bound"])
    r = rs[len(rs) // 2]
    each = ", ".join("%.3f" % x["ratio_to_bound"] for x in rs)
    print(f"overlap     {peer:8s} element {r['element_us']:6.1f} us step {step:5.1f} ms: epoch {r['epoch_s']:.3f} s, "
          f"compute {r['compute_s']:.3f} s, load/P {r['load_over_parallel_s']:.3f} s, ratio to bound "
          f"{r['ratio_to_bound']:.3f} (median of {len(rs)}: {each})")
for r in rows:
    print(json.dumps(r))
PY
