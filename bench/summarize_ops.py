#!/usr/bin/env python3
"""Summarizes bench/tensor_ops.sh: one JSON line per (framework, workload) per round, from tk_bench_tensor_ops,
bench/peers/torch_ops.py and bench/peers/keras_ops.py. Prints, per workload, each framework's median over the
rounds of its per-round median ms, the rounds themselves, and trainkit's time over each peer's (above 1: trainkit
is slower).

  python3 bench/summarize_ops.py runs.jsonl
"""
import json
import statistics
import sys

FRAMEWORKS = ("trainkit", "pytorch", "keras")
# trainkit workloads timed against another workload of the peers.
PEER_WORKLOAD = {"layer_norm_fwd_bwd_excl_loss": "layer_norm_fwd_bwd"}

with open(sys.argv[1]) as f:
    runs = [json.loads(line) for line in f if line.strip().startswith("{")]
by = {}
for r in runs:
    by.setdefault(r["workload"], {}).setdefault(r["framework"], []).append(r)
tk_any = [r for r in runs if r["framework"] == "trainkit"]
if not tk_any:
    sys.exit("no trainkit run in " + sys.argv[1])
versions = {}
for r in runs:
    if r["framework"] != "trainkit":
        versions.setdefault(r["framework"], r.get("version", "?") + (
            " / tensorflow " + r["tensorflow_version"] if "tensorflow_version" in r else ""))
rounds = max(len(fw) for w in by.values() for fw in w.values())
print(f"cpu: {tk_any[0].get('cpu', '?')}, threads {tk_any[0].get('threads', '?')}, {rounds} interleaved rounds; "
      + ", ".join(f"{k} {v}" for k, v in versions.items()))
print("ms: median over rounds of each round's median; ratio = trainkit ms / peer ms (above 1: trainkit slower)")
print(f"{'workload':30s} {'framework':9s} {'median ms':>10s}  {'rounds (ms)':34s} {'tk/torch':>9s} {'tk/keras':>9s}")


def median_ms(rs):
    return statistics.median(r["ms"] for r in rs)


for workload, fws in by.items():
    peers = by.get(PEER_WORKLOAD.get(workload, workload), {})
    for fw in FRAMEWORKS:
        if fw not in fws:
            continue
        rs = fws[fw]
        med = median_ms(rs)
        each = " / ".join(f"{r['ms']:.3f}" for r in rs)
        ratios = ""
        if fw == "trainkit":
            for peer in ("pytorch", "keras"):
                ratios += f" {med / median_ms(peers[peer]):8.2f}x" if peer in peers else f" {'-':>9s}"
        print(f"{workload:30s} {fw:9s} {med:10.3f}  {each:34s}{ratios}".rstrip())
    note = [r for r in fws.get("trainkit", []) if "loss_ops_ms" in r]
    if note:
        print(f"{'':30s} (of which ops owned by the loss sum(y*dy) or its gradient, per-op profile: "
              f"{statistics.median(r['loss_ops_ms'] for r in note):.3f} ms, "
              f"{100 * statistics.median(r['loss_ops_share'] for r in note):.1f}% of the profiled step)")
