#!/usr/bin/env bash
# Peak training memory (Adam, batch 128) of the default MLP 784-256-128-10 and a deep MLP
# 784 -> 40 x Dense(512, relu) -> 10: trainkit (memory plan, allocator peak, RSS) beside PyTorch (RSS and
# the profiler's allocator-level peak), each against the theoretical minimum
#   4 B x 4 x params (weights + gradients + 2 Adam slots) + 4 B x batch x (784 + sum of layer widths).
# Methods: the comments at the top of bench/memory_peak.cpp and bench/peers/torch_memory.py.
#
#   bench/memory_peak.sh          # peers from $TK_VENV (default .venv), created if missing
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${TK_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r bench/peers/requirements.txt
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target tk_bench_memory >/dev/null
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%F)" >&2
tk=$(./build/bench/tk_bench_memory)  # memory plan totals go to stderr
# The profiler's kineto start/stop lines and the missing-GPU line are noise on a CPU-only machine.
pt=$("$VENV/bin/python" bench/peers/torch_memory.py --threads 2 2> >(grep -v -e USDT -e gpuGetDeviceCount >&2))
python3 - "$tk" "$pt" <<'PY'
import json, sys
def rows_of(text):  # JSON lines only: trainkit also prints "Created device ..."
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
tk = {r["model"]: r for r in rows_of(sys.argv[1])}
pt = {r["model"]: r for r in rows_of(sys.argv[2])}
MiB = 1 << 20
print("theoretical min = 4 B x (4 x params: weights + gradients + 2 Adam slots)"
      " + 4 B x batch x (784 + sum of layer widths: input + every layer's output), batch 128")
for name, r in tk.items():
    print(f"  {name}: {r['theoretical_min_formula']} = {r['theoretical_min_bytes']} B")
cols = ["model", "theoretical min", "trainkit plan", "trainkit measured", "trainkit RSS delta",
        "PyTorch RSS delta", "PyTorch RSS delta (warm)", "PyTorch profiler peak"]

def cell(v, tmin):
    return "-" if v is None else f"{v / MiB:7.2f} MiB {v / tmin:5.2f}x"

rows = []
for name, t in tk.items():
    p = pt.get(name, {})
    tmin = t["theoretical_min_bytes"]
    rows.append([name, f"{tmin / MiB:7.2f} MiB", cell(t["plan_bytes"], tmin), cell(t["measured_bytes"], tmin),
                 cell(t["rss_delta_bytes"], tmin), cell(p.get("rss_delta_bytes"), tmin),
                 cell(p.get("rss_delta_warm_bytes"), tmin), cell(p.get("profiler_peak_bytes"), tmin)])
w = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
print(" | ".join(c.ljust(w[i]) for i, c in enumerate(cols)))
print("-+-".join("-" * x for x in w))
for r in rows:
    print(" | ".join(c.ljust(w[i]) for i, c in enumerate(r)))
print("(each cell: bytes, then the ratio to the theoretical min; '-': not applicable)")
for name, t in tk.items():
    print(f"  {name}: 4 B x 4 x params = {16 * t['params'] / MiB:.2f} MiB (weights + gradients + Adam slots, all"
          f" live at an unfused update); activations {(t['theoretical_min_bytes'] - 16 * t['params']) / MiB:.2f} MiB")
for r in list(tk.values()) + list(pt.values()):
    print(json.dumps(r))
PY
