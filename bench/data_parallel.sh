#!/usr/bin/env bash
# Data parallel on one machine, side by side: the default MLP and the tutorial CNN (Adam, global batch 128), each
# as 1 process x 2 threads and as 2 MPI ranks x 1 thread (trainkit: MultiWorkerMirroredStrategy under mpirun;
# PyTorch: DistributedDataParallel on gloo, 2 processes), interleaved for ROUNDS rounds (default 3); prints each
# run's JSON line, then the medians and the data-parallel efficiency (2 x 1 throughput / 1 x 2 throughput).
#
#   bench/data_parallel.sh [ROUNDS] [CNN_STEPS]   # peers from $TK_VENV (default .venv); CNN epochs of CNN_STEPS (100)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}"
CNN_STEPS="${2:-100}"
source bench/_setup.sh
bench_setup tk_bench_data_parallel
mpi=(mpirun --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS -x TK_THREADS -np 2)
runs=$(mktemp)
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  for model in mlp cnn; do
    steps=0
    [ "$model" = cnn ] && steps="$CNN_STEPS"
    OMP_NUM_THREADS=2 TK_THREADS=2 ./build/bench/tk_bench_data_parallel --model $model --max-steps $steps 2>/dev/null |
      tail -n 1 >>"$runs"
    OMP_NUM_THREADS=1 TK_THREADS=1 "${mpi[@]}" ./build/bench/tk_bench_data_parallel --model $model --max-steps $steps \
      2>/dev/null | tail -n 1 >>"$runs"
    OMP_NUM_THREADS=2 "$VENV/bin/python" bench/peers/torch_ddp.py --model $model --procs 1 --threads 2 \
      --max-steps $steps >>"$runs"
    OMP_NUM_THREADS=1 "$VENV/bin/python" bench/peers/torch_ddp.py --model $model --procs 2 --threads 1 \
      --max-steps $steps >>"$runs"
  done
done
cat "$runs"
python3 - "$runs" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = {}
for r in runs:
    med.setdefault((r["peer"].split("-")[0], r["model"], r["processes"]), []).append(r["samples_per_s"])
for (peer, model, procs), v in sorted(med.items()):
    print("%-9s %s %d x %d: median %.0f samples/s of %s" % (peer, model, procs, 3 - procs, statistics.median(v), v))
for peer in ("trainkit", "pytorch"):
    for model in ("mlp", "cnn"):
        one, two = med.get((peer, model, 1)), med.get((peer, model, 2))
        if one and two:
            print("%-9s %s: 2 ranks x 1 thread = %.0f%% of 1 process x 2 threads" %
                  (peer, model, 100 * statistics.median(two) / statistics.median(one)))
PY
rm -f "$runs"
