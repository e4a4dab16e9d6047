#!/usr/bin/env python3
"""Summarizes interleaved benchmark rounds: one JSON line per run (any peer), median samples/s per peer,
trainkit's ratio to each, and trainkit's roofline terms from its median run.

  python3 bench/summarize.py runs.jsonl
"""
import json
import statistics
import sys

runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip().startswith("{")]
by_peer = {}
for r in runs:
    by_peer.setdefault(r["peer"], []).append(r)
tk_runs = by_peer.get("trainkit", [])
if not tk_runs:
    sys.exit("no trainkit run in " + sys.argv[1])
tk_median = statistics.median(r["samples_per_s"] for r in tk_runs)
print(f"cpu: {tk_runs[0].get('cpu', '?')}, threads {tk_runs[0]['threads']}, {len(tk_runs)} interleaved rounds")
print(f"{'':16s} {'median samples/s':>16s} {'runs':>30s} {'trainkit is':>12s}")
for peer, rs in by_peer.items():
    med = statistics.median(r["samples_per_s"] for r in rs)
    each = " ".join(f"{r['samples_per_s']:.0f}" for r in rs)
    version = rs[0].get("version", "")
    print(f"{peer:16s} {med:16.0f} {each:>30s} {tk_median / med:11.2f}x  {version}")
peaks = {peer: max(r["rss_peak_growth_bytes"] for r in rs) for peer, rs in by_peer.items()
         if all("rss_peak_growth_bytes" in r for r in rs)}
if peaks:  # resident memory grown from before the model was built to the end of the steps (largest round)
    print("resident peak growth, MB: " + ", ".join(f"{p} {b / 1e6:.1f}" for p, b in peaks.items()))
for r in tk_runs[:1]:
    if "planned_peak_bytes" in r:  # the step's plan against the device's measured peak (the caller's batch apart)
        caller = r.get("caller_tensor_bytes", 0)
        total = r["planned_peak_bytes"] + caller
        print(f"trainkit memory: planned {r['planned_peak_bytes']:,} + the caller's batch {caller:,} = {total:,} bytes; "
              f"measured {r['measured_peak_bytes']:,} ({'equal' if total == r['measured_peak_bytes'] else 'DIFFERENT'})")
median_run = sorted(tk_runs, key=lambda r: r["samples_per_s"])[len(tk_runs) // 2]
roof = median_run.get("roofline")
if roof:
    print(f"roofline (median trainkit run): {roof['flops_per_step'] / 1e9:.3f} GFLOP / {roof['sgemm1024_gflops']:.1f} "
          f"GFLOP/s = {roof['compute_ms']:.3f} ms, + {roof['bytes_per_step'] / 1e6:.2f} MB / {roof['triad_gbs']:.1f} GB/s "
          f"(triad) = {roof['memory_ms']:.3f} ms -> {roof['roofline_ms']:.3f} ms; step {roof['step_ms']:.3f} ms = "
          f"{roof['step_over_roofline']:.2f}x roofline")
